"""`python -m sim3d ...` is the `sim3d` command."""

from .cli.app import main

main()
