"""`python -m sim3d ...` is the `sim3d` command."""

from .cli.entry import main

main()
