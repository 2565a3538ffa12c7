"""`ticket train-weak`'s workflow: rewind a ticket to its init and train only its surviving weights (run.py), and its
typed result (result.py: torch-free, the --json document).

A workflow: imports the core (models, data, train, ticketfile, runtime, files) and runs/, never reporting, settings
or the command line."""
