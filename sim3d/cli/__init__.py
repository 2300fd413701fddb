"""The `sim3d` command: thin typer commands (`app`) that parse, call the library and print."""
