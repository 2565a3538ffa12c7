"""Every option of the run settings, declared once.

A `Setting` (setting.py) says everything about one option: its name (the config key and API keyword; the flag is
the name with dashes), the spec field that holds its default, its range, its help text and panel, and, for a
method's hyper-parameter, which methods read it. Everything else is derived from the declarations: the Typer
parameters of each command (cli/declared.py), the TOML keys a config file may set and the API's keyword arguments
(resolve.py), the "Default: X" of every help text, the range checks, the refusal of an option the chosen method
does not read, each Method's `options` (hence what a ticket records), and `ticket list settings`.

Modules:
- setting.py: the `Setting` declaration, a `Table` of them and what is derived from one; the help panels.
- run.py: RUN, the settings that shape a ticket (`extract` and `tc.extract`; `sweep-k` picks from it), with the
  baselines' own hyper-parameters from baselines.py.
- sweep.py: sweep-k's picks of RUN and its own options; weak.py: train-weak's; reader.py: the options of every
  command that rebuilds a ticket (evaluate, export, train-weak, a study's --ticket).
- track.py: --log-to (every command that trains): the experiment trackers a run also writes to.
- checks.py: extract's checks beyond each value's range (the method's options, --init module), torch-free, so that
  resolve.py and `inspect --command` run the same ones.
- registry.py: every setting's range by name across the commands (flags, config keys and API keywords of one
  name share one range).

Torch-free and typer-free: it imports the spec dataclasses (for the defaults), the value ranges and the torch-free
registries' names (methods, models, datasets, init schemes), so that --help can read
it without importing torch; listing.py is `ticket list`'s result. To add an option, see CONTRIBUTING.md."""
