"""`ticket export`'s workflow: a ticket's network in formats plain PyTorch loads (run.py), and as an ONNX model
(onnx.py); what every format's metadata records of the network's input (inputs.py).

A workflow: imports the core and runs/, never reporting, settings or the command line."""
