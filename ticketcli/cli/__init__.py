"""The command line: the Typer app (app.py), one module per command, the declared options (declared.py, options.py),
the one mapping from what was raised to an exit code (exits.py) and the console script (entry.py).

The top layer: may import everything below it. This __init__ imports nothing, so that entry.py can set the signal
handlers before the app (Typer, Rich) is imported."""
