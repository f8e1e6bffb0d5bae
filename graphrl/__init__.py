"""graphrl: declarative agent graphs compiled to slime rollouts."""

__version__ = "0.1.0"
