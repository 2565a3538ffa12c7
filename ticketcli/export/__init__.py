"""`ticket export`'s workflow: a ticket's network in formats plain PyTorch loads (run.py), and as an ONNX model
(onnx.py).

A workflow: imports the core and runs/, never reporting, settings or the command line."""
