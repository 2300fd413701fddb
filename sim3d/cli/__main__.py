"""`python -m sim3d.cli ...` is the `sim3d` command."""

from .entry import main

main()
