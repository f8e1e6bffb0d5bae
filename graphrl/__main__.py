"""`python -m graphrl`: the same as the `graphrl` command."""

from .cli import main

main()
