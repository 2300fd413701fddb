"""`python -m sim3d ...` is the `sim3d` command."""

from .cli import main

main()
