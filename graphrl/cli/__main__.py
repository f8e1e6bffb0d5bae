"""`python -m graphrl.cli`: the same as the `graphrl` command."""

from . import main

main()
