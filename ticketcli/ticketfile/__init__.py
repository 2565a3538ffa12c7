"""The ticket file: a ticket's masks and provenance in a safetensors file (format v1), written atomically and read
without trusting it.

Its modules, bottom to top: `meta` (the metadata checked before use: bounded, strict JSON and a type and range for every
field a reader uses), `safetensors_file` (the container read without trusting it: the header checked with size limits
before any tensor byte, then bounded chunks), `record` (the typed records the metadata becomes, each writing back the
JSON it was read from), `layout` (a file's header and metadata checked, its masks' bytes walked) and `ticket` (the
`Ticket`: pack the masks, save, load, validate, the masks' digest).

What it may import (tests/test_layers.py places the package): the standard library, numpy and, at module level, only
torch-free modules below it (`errors`, `specs/`, `files/`, `runtime/machine`, the `models/` registry for a model's
declared size), so that `ticket inspect` and a refused file never import torch; `ticket`'s functions that make or return
tensors import torch themselves. Nothing above the building blocks is imported. This file exports nothing: import the
module that defines a name (`from ticketcli.ticketfile import ticket as ticket_io`).
"""
