"""Every option of the run settings, declared once.

A `Setting` (setting.py) says everything about one option: its name (the config key and API keyword; the flag is
the name with dashes), the spec field that holds its default, its range, its help text and panel, and whether only
some methods read it (which ones, their registry entries say: methods/registry.py, where each method's own
hyper-parameters are declared as `Option`s and made settings here). Everything else is derived from the
declarations: the Typer parameters of each command (cli/declared.py), the TOML keys a config file may set and the
API's keyword arguments (resolve.py), the "Default: X" of every help text, the range checks, the refusal of an
option the chosen method does not read, each method's options (hence what a ticket records), and `ticket list
settings`.

Modules:
- setting.py: the `Setting` declaration, a `Table` of them and what is derived from one; the help panels.
- run.py: RUN, the settings that shape a ticket (`extract` and `tc.extract`; `sweep-k` picks from it), with each
  method's own options placed among them.
- sweep.py: sweep-k's picks of RUN and its own options; weak.py: train-weak's; reader.py: the options of every
  command that rebuilds a ticket (evaluate, export, train-weak, a study's --ticket).
- track.py: --log-to (every command that trains): the experiment trackers a run also writes to.
- checks.py: the one spec builder (build_spec: a spec dataclass from a table's declarations, each value checked by
  its setting) and extract's checks beyond each value's range (the method's options, --init module), torch-free,
  so that resolve.py and `inspect --command` run the same ones.
- registry.py: the check of --threads.
- lm.py: the model and text of a `--dataset text` run (the text is read, with torch, only for such a run).

Torch-free and typer-free: it imports the spec dataclasses (for the defaults), the value ranges and the torch-free
registries' names (methods, models, datasets, init schemes), so that --help can read
it without importing torch; listing.py is `ticket list`'s result. To add an option, see CONTRIBUTING.md."""
