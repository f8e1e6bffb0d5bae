"""Engines: one small protocol, several implementations (sglang HTTP, local transformers, scripted)."""
