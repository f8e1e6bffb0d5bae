"""The runtime: executor, trajectory ledger, chat-template token deltas, parsers, state."""
