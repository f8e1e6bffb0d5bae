"""The simulated SGLang server: deterministic agent-turn outputs with configurable latency."""
