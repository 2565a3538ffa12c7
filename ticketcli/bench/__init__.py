"""`ticket bench`'s workflow: a ticket's network in every form that runs here (dense W * M, the sparse runtime
form, ONNX Runtime, block-sparse and 2:4 semi-structured where the masks allow), each checked against the ticket's
network and then timed interleaved with the others.

Its modules: `run` (the workflow: open, build, check, time, verdict), `forms` (each form written to its file and
loaded back), `sparse_form` (the sparse runtime form's file and loader), `kernels` (the sparse layers and what a
mask allows: its block size, N:M), `timing` (interleaved timing and the verdict, pure arithmetic) and `result` (the
typed result, torch-free).

A workflow: imports the core, runs/ and export/, never reporting, settings or the command line; this file exports
nothing."""
