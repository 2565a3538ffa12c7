"""The specs: frozen dataclasses whose fields hold every run setting's default (run.py; train-weak's weak.py,
a text corpus's text.py), what a value may be (ranges.py) and the syntax of a model spec
string (syntax.py).

The bottom of the package: imports nothing of ticketcli but errors and contract, and never torch."""
