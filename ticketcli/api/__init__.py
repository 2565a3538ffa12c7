"""The Python API (`import ticketcli as tc`): every command as a call, in a notebook or a training script. It is the
command line without the flags: the same spec building (`settings.resolve`), the same core calls
(`runs.extract.run_extraction`, `runs.evaluate.evaluate_loaded`, `runs.build.rebuild`, `export.run.export_ticket`,
`weak.run.train_weak`, `sweep.run.sweep_k`, drift's `DriftCommand`), each returning the typed result whose document
its command prints with --json, the same errors, raised instead of turned into exit codes. docs/api.md documents it.

Its modules, by concern: `ticket` (the `Ticket` class: masks, metadata, save, build, evaluate, export, inspect; and
`load`), `bench` (`Ticket.bench`, defined beside it), `extract` (`extract`: a ticket from keyword options, returned
unsaved or written to `out=`), `weak` (`train_weak`), `sweep` (`sweep_k`), `drift` (`drift`), `inspection` (`inspect`:
numpy only), `compare` (`compare`: saved tickets compared as `ticket compare` compares them, numpy only), `saved` (a
ticket argument read from its file: a path or a saved Ticket, torch-free), `data` (the `data` argument: a dataset's
name, or the caller's tensors, Datasets and DataLoaders turned into seeded splits), `masks` (`apply_masks`,
`remove_masks`, `load_pruned`: masks on any nn.Module in torch.nn.utils.prune's layout), `listing` (`list_methods`,
`list_models`, `list_datasets`, `extract_options`), `schemas` (`schema_of`: a --json document's JSON Schema), `sparse`
(`load_sparse`, `sparse_module`), `args` (path, module, reader and data- directory arguments, checked as the command
line checks its flags, and the progress display) and `keywords` (the calls speak in keywords: an unknown one names the
closest, errors name `epochs=`, not `--epochs`, and `overwrite=True`, not `--force`).

What it may import (tests/test_layers.py places the package above resolution, below the command line): every layer
below it (the foundations, building blocks, workflows, `report`, `settings/` and `drift/`), never `cli/`; `masks`
only torch, the foundations, `files.checkpoint`, `models.masked` and `keywords`, so that it stays usable on a module
of the caller's own. Nothing inside ticketcli imports this package but `ticketcli/__init__.py`, which resolves each
public name lazily from its defining module (`import ticketcli` does not import torch); this file exports nothing.
"""
