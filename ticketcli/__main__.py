"""`python -m ticketcli` runs the `ticket` command line."""

from ticketcli.cli import main

if __name__ == "__main__":
    main()
