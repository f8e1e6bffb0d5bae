"""Rewards: built-in scorers (exact match, F1, sub-EM, math equality, LLM judge) and user functions."""
