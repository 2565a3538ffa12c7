"""The extraction and evaluation workflows (`ticket extract`, `evaluate`, `inspect`, and the Python API's extract
and Ticket.evaluate): from specs to a ticket, and from a ticket back to its network and measurements.

Its modules, by concern: `build` (the network a run works on: built from specs, or a ticket's rebuilt and opened
with its masks and data), `extract` (one extraction: method, rewind, evaluation, the written ticket), `evaluate`
(re-measuring a ticket, its summary and accuracy gate), `inspect` (a ticket's metadata and densities with numpy
alone), `compare` (tickets' init and mask overlap, pair by pair, with numpy alone), `record` (what an extraction
records in its ticket), `summary` (the typed result extract prints), `parts` (the typed pieces the results share),
`checks` (a loaded ticket against the network rebuilt for it), `inputs` (a run's weights file, method, device and
data shape) and `text` (a text ticket's text found again, another text refused); for several tickets, `folder`
(the ticket files a folder or glob names and inspect's rows, torch-free), `evaluate_folder` (each evaluated and
gated) and `reproduce` (the extract command and TOML that make a ticket again, torch-free).

What it may import (tests/test_layers.py places each module): `inspect`, `compare`, `folder` and `reproduce` only the
ticket file's reader, numpy and the settings' declarations, never torch, so `ticket inspect` and `ticket compare`
start fast; the others the foundations, the building blocks (models, data, training, masks, the ticket file,
checkpoints) and the methods' registry. The other workflows, the Python API and the
command line import its defining modules; this file exports nothing.
"""
