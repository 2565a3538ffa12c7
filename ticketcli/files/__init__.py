"""Files the package reads and writes: atomic writes, bounded reads of small untrusted files, the nesting depth of
a JSON or TOML text before it is parsed, the sections a signal does not split, and checkpoint files.

Imports only the standard library, torch (checkpoints) and ticketcli.errors."""
