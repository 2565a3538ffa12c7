"""`python -m ticketcli` runs the `ticket` command line (start-up signals handled first, see entry.py)."""

from ticketcli.cli.entry import main

if __name__ == "__main__":
    main()
