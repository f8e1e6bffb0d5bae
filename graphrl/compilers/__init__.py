"""Compilers: static checks, lowering to a frozen plan, and compile targets (slime)."""
