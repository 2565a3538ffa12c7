"""Reporting, split by concern; importers name the module (`from ticketcli.report import console`), this file exports
nothing.

- console: stdout and stderr, the --json document, one-line errors and warnings, literal text.
- progress: each command's progress display and --quiet, over plain (progress as plain lines off a terminal).
- tables: each command's human-readable result; study_tables: sweep-k's and train-weak's; compare_tables: compare's;
  values: how a ticket's values read in those tables.
- plots: PNG figures (matplotlib, imported when a figure is drawn).

What it may import: the foundations and, for type annotations only, the typed results it renders; the workflows
import none of it but console's messages."""
