"""Files the package reads and writes: atomic writes, bounded reads of small untrusted files, and checkpoint files.

Imports only the standard library, torch (checkpoints) and ticketcli.errors."""
