"""The command-line reference as Markdown, generated from the option declarations: every command of the Typer app,
its arguments, and each option's flag, type, default, range, the methods that read it, whether it is a config key,
and its help, read from the `Setting` that declared it (settings/, through cli/declared.py) and never from a copy.
The documentation site builds its CLI reference page from `cli_reference()` (docs/hooks.py), so the page cannot
go stale; tests/test_cli_reference.py checks it against every command's --help."""

from __future__ import annotations

import inspect
from collections.abc import Iterator
from pathlib import Path

import typer
from typer.core import TyperArgument, TyperGroup, TyperOption
from typer.core import _click as click

from ticketcli.cli.app import app
from ticketcli.cli.declared import SETTINGS_ATTRIBUTE
from ticketcli.settings.setting import Setting, Table, readers_prefix

HELP_FLAGS = ("-h", "--help")  # every command's; listed once, above the commands


def commands() -> Iterator[tuple[str, click.Command]]:
    """Every command of the `ticket` app, by name, in the order --help lists them."""
    group = typer.main.get_command(app)
    assert isinstance(group, TyperGroup)  # the app has several commands, so Typer makes a group
    ctx = click.Context(group, info_name="ticket")
    for name in group.list_commands(ctx):
        command = group.get_command(ctx, name)
        if command is not None and not command.hidden:
            yield name, command


def declared_settings(command: click.Command) -> Table:
    """The settings a command's flags were made from (cli/declared.py left them on the function Typer wraps)."""
    fn: object = command.callback
    while fn is not None:
        table = getattr(fn, SETTINGS_ATTRIBUTE, None)
        if isinstance(table, Table):
            return table
        fn = getattr(fn, "__wrapped__", None)
    return Table()


def cell(text: str) -> str:
    """Text for one cell of a Markdown table: a `|` would end the cell, a newline the row."""
    return " ".join(text.split()).replace("|", "\\|")


def type_text(s: Setting) -> str:
    """What a flag takes, in words."""
    if s.kind == "negatable":
        return "switch, negatable"
    if s.switch:
        return "switch"
    if isinstance(s.kind, tuple):
        return "choice"
    if s.kind is list:
        return "text, repeatable"
    names: dict[object, str] = {int: "integer", float: "number", str: "text", Path: "path"}
    return names.get(s.kind, str(s.kind))


def flag_text(s: Setting) -> str:
    """The flag as a user types it; a negatable one with its --no- form."""
    if s.kind == "negatable":
        return f"`{s.flag}` / `--no-{s.flag.removeprefix('--')}`"
    return f"`{s.flag}`"


def row(flag: str, kind: str, facts: list[tuple[str, str]], help_text: str) -> str:
    """One option's row of two columns, so that the page reads without scrolling sideways in a browser window:
    the flag and what it takes, then its help followed by its default, range, readers and config key."""
    shown = "; ".join(f"*{name}* {value}" for name, value in facts if value)
    said = help_text.strip().replace("*", "\\*")  # `m*n` in a help is text, not the start of emphasis
    what = " ".join(x for x in (said, f"({shown})" if shown else "") if x)
    return f"| {cell(flag)}<br>{cell(kind)} | {cell(what)} |"


def setting_row(s: Setting) -> str:
    """One option's table row, from its declaration."""
    default = s.default_text()
    if s.required:
        default = "required"
    readers = readers_prefix(s.methods).removesuffix(": ")  # empty: every method, or no method's option
    facts = [
        ("default", f"`{default}`" if default else ""),
        ("range", s.range_text()),
        ("read by", readers),
        ("config key", f"`{s.name}`" if s.config else ""),
    ]
    return row(flag_text(s), type_text(s), facts, s.help)


def other_row(p: TyperOption, ctx: click.Context) -> str:
    """The row of an option no setting declares (the app's own --version and completion options), from Click."""
    default = "" if p.is_flag or p.default is None else f"`{p.default}`"
    kind = "switch" if p.is_flag else p.display_type(ctx).lower()
    return row(", ".join(f"`{o}`" for o in p.opts), kind, [("default", default)], p.help or "")


HEADER = "| option | what it does |\n| --- | --- |"


def command_section(name: str, command: click.Command) -> list[str]:
    """One command's part of the reference: its purpose, usage, arguments and option tables by help panel."""
    table = declared_settings(command)
    ctx = click.Context(command, info_name=name)
    pieces = [" ".join(x for p in command.params if isinstance(p, TyperArgument) for x in p.get_usage_pieces(ctx))]
    usage = " ".join(x for x in (f"ticket {name}", *pieces, "[OPTIONS]") if x)
    out = [f"## `ticket {name}`", "", inspect.cleandoc(command.help or "").split("\n\n")[0], "", f"`{usage}`", ""]
    arguments = [p for p in command.params if isinstance(p, TyperArgument)]
    if arguments:
        out += ["| argument | what it is |", "| --- | --- |"]
        out += [f"| `{p.display_name_raw}` | {cell(getattr(p, 'help', None) or '')} |" for p in arguments]
        out.append("")
    panels: dict[str, list[str]] = {}
    for p in command.params:
        if not isinstance(p, TyperOption) or p.hidden or set(p.opts) <= set(HELP_FLAGS):
            continue
        s = table[p.name] if p.name in table else None
        panel = s.panel if s is not None else "Options"
        panels.setdefault(panel, []).append(setting_row(s) if s is not None else other_row(p, ctx))
    for panel, rows in panels.items():
        out += [f"### {panel}", "", HEADER, *rows, ""]
    return out


def cli_reference() -> str:
    """The whole CLI reference page (Markdown): the app's own options, then one section per command."""
    group = typer.main.get_command(app)
    lines = [
        "# Command-line reference",
        "",
        "Generated from the option declarations (`ticketcli/settings/`, `ticketcli/cli/declared.py`) when the site",
        "is built, so it lists exactly what `ticket COMMAND --help` shows. Each option is listed with what it takes",
        "and, after its help, its *default*, its *range*, the methods that read it (*read by*: the methods that read",
        "a method's hyper-parameter; any other method refuses it) and its *config key* (the key of a `--config` TOML",
        "file and the Python API's keyword for the option). Every command also takes `-h` / `--help`.",
        "",
        "## `ticket`",
        "",
        HEADER,
    ]
    ctx = click.Context(group, info_name="ticket")
    lines += [
        other_row(p, ctx) for p in group.params if isinstance(p, TyperOption) and not set(p.opts) <= set(HELP_FLAGS)
    ]
    lines.append("")
    for name, command in commands():
        lines += command_section(name, command)
    return "\n".join(lines).rstrip() + "\n"
