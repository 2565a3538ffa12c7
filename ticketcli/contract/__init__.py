"""The `--json` contract: schema names and versions, the JSON Schemas and the shapes the documents share (schema.py),
and `Result`, the base of every command's typed result (result.py).

Imports nothing of ticketcli and never torch."""
