"""The `ticket` command line: the Typer app, its last-resort error handling and the global options. Each command
lives in a module of its own (thin: parse options, build specs, call one core function, report); options shared
by several commands are in options.py."""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from typing import Annotated

import typer
from typer.core import TyperArgument, TyperCommand, TyperGroup, TyperOption
from typer.core import _click as click

import ticketcli
from ticketcli.cli import bench, compare, drift, evaluate, exits, export, extract, inspect, listing, sweep_k, train_weak
from ticketcli.cli.common import errors_to_exit_codes
from ticketcli.errors import UsageError
from ticketcli.files.bounded import check_user_path
from ticketcli.report import console
from ticketcli.runtime import world
from ticketcli.runtime.interrupts import stop_on_signals


def without_flag_types(params: list[click.Parameter]) -> list[click.Parameter]:
    """Boolean flags (--force, --json, --no-bias) take no value: help shows no `<bool>` type beside them."""
    for p in params:
        if isinstance(p, TyperOption) and p.is_flag and p.metavar is None:
            p.metavar = ""  # what help prints in the type column; a flag's usage and errors never show it
    return params


def choices_in_help(params: list[click.Parameter]) -> list[click.Parameter]:
    """A choice's values are listed in its help text ("One of: augmented, edge-popup, ..."), not in the type column
    as one long word (`<augmented|edge-popup|grasp|...>`) that a narrow terminal can only cut mid-name and that
    squeezes the option names into an ellipsis. The type column then says `<str>`."""
    for p in params:
        if not isinstance(p, (TyperOption, TyperArgument)) or not p.show_choices:
            continue
        descriptor = p.type_descriptor
        if not descriptor.is_choice or not descriptor.choices:
            continue
        p.show_choices = False  # once: get_params runs for every help and every parse
        names = [str(c) for c in descriptor.choices]
        if not all(name in (p.help or "") for name in names):  # a help text that names them all says enough
            p.help = f"{(p.help or '').rstrip()} One of: {', '.join(names)}.".lstrip()
    return params


class Argument(TyperArgument):
    """A positional argument named as the flags' values are, in capitals: `ticket export [OPTIONS] TICKET`,
    `evaluate [OPTIONS] TICKETS...`, `Missing argument 'TICKET'`; not Typer's `{ticket}`."""

    @property
    def display_name_raw(self) -> str:
        return self.metavar if self.metavar is not None else (self.name or "").upper()

    def _usage_display_name(self) -> str:
        name = self.display_name_raw
        return (name if self.required else f"[{name}]") + ("..." if self.nargs != 1 else "")


def capital_arguments(params: list[click.Parameter]) -> list[click.Parameter]:
    """Each positional argument as an Argument (Typer builds its own class; the instance's behaviour is all
    that changes)."""
    for p in params:
        if type(p) is TyperArgument:
            p.__class__ = Argument
    return params


class Command(TyperCommand):
    """Every `ticket` command: its flags shown without a type (without_flag_types), its arguments in capitals
    (capital_arguments), and every path it was given checked before the command runs (check_paths)."""

    def get_params(self, ctx: click.Context) -> list[click.Parameter]:
        return choices_in_help(capital_arguments(without_flag_types(super().get_params(ctx))))

    def invoke(self, ctx: click.Context) -> object:
        check_paths(ctx)
        return super().invoke(ctx)


def check_paths(ctx: click.Context) -> None:
    """Every path argument and option of every command, one rule: a NUL byte, more than PATH_MAX bytes or a name
    over NAME_MAX bytes is one usage line (exit 2), not an OSError wherever the path is first used."""
    for param in ctx.command.params:
        value = ctx.params.get(param.name or "")
        values = value if isinstance(value, (list, tuple)) else [value]
        for v in values:
            if isinstance(v, os.PathLike):
                what = param.opts[0] if param.param_type_name == "option" else (param.name or "path").upper()
                with errors_to_exit_codes():
                    check_user_path(v, what)


class OneLineErrors(TyperGroup):
    """The edge of the program, where every run ends in exactly one exit code (exits.exit_code): Click's own usage
    errors (unknown option, a value outside the choices, not a number) as one 'error:' line with exit code 2, like
    every other bad input, instead of Typer's multi-line box; a closed or missing stdout or stderr quietly (141); a
    signal outside a command's own handling as one line (130/143); anything unexpected as one 'internal error:'
    line with exit code 70 (the traceback with TICKET_DEBUG=1)."""

    def main(
        self,
        args: Sequence[str] | None = None,
        prog_name: str | None = None,
        complete_var: str | None = None,
        standalone_mode: bool = True,
        windows_expand_args: bool = True,
        **extra: object,
    ) -> object:
        if not standalone_mode:
            return super().main(args, prog_name, complete_var, standalone_mode, windows_expand_args, **extra)
        console.standard_streams()  # a missing or closed stdout/stderr: a closed pipe from here on (exit 141)
        streams = exits.std_streams()
        console.tolerate_encodings()  # PYTHONIOENCODING=ascii: escape what cannot be encoded, never fail on it
        try:
            # commands set their own handlers (naming the epoch, the files written); this one covers the rest
            with stop_on_signals(outputs=None, unit=None):
                rv = super().main(args, prog_name, complete_var, False, windows_expand_args, **extra)
                console.flush_results()  # a full stdout is reported now, not lost at the interpreter's exit
            code = rv if isinstance(rv, int) else 0
        except BaseException as e:  # the last resort: whatever escaped becomes an exit code here and only here
            code = exits.exit_code(e, debug=os.environ.get("TICKET_DEBUG", "") not in ("", "0"), streams=streams)
        sys.exit(code)

    def get_params(self, ctx: click.Context) -> list[click.Parameter]:
        return without_flag_types(super().get_params(ctx))


app = typer.Typer(
    cls=OneLineErrors,
    no_args_is_help=True,
    add_completion=True,  # --install-completion / --show-completion (bash, zsh, fish, PowerShell)
    context_settings={"help_option_names": ["-h", "--help"]},  # inherited by every command's context
    pretty_exceptions_enable=False,
    help="Extract, share and re-evaluate strong lottery tickets (binary masks over frozen random weights).",
)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"ticketcli {ticketcli.__version__}")
        raise typer.Exit()


DATA_PARALLEL_COMMANDS = ("extract", "train-weak")


@app.callback()
def main_options(
    ctx: typer.Context,
    version: Annotated[
        bool, typer.Option("--version", callback=_version, is_eager=True, help="Print the version and exit.")
    ] = False,
) -> None:
    """Extract, share and re-evaluate strong lottery tickets."""
    with errors_to_exit_codes():
        if world.from_environment().active and ctx.invoked_subcommand not in DATA_PARALLEL_COMMANDS:
            parallel = " and ".join(DATA_PARALLEL_COMMANDS)
            raise UsageError(
                f"`ticket {ctx.invoked_subcommand}` does not run under torchrun ({world.variables_set()} are set)",
                hint=f"if an earlier job left them, {world.UNSET}; torchrun runs {parallel}",
            )
        if world.from_environment().active:
            world.rendezvous_address()  # MASTER_ADDR and MASTER_PORT checked before any work, not at the rendezvous


# In the order `ticket --help` lists them.
app.command(cls=Command)(extract.extract)
app.command(cls=Command)(evaluate.evaluate)
app.command(cls=Command)(inspect.inspect)
app.command(cls=Command)(compare.compare)
app.command("sweep-k", cls=Command)(sweep_k.sweep_k)
app.command("train-weak", cls=Command)(train_weak.train_weak)
app.command(cls=Command)(drift.drift)
app.command(cls=Command)(export.export)
app.command(cls=Command)(bench.bench)
app.command("list", cls=Command)(listing.list_kind)  # listing.py: a module named list would shadow list()


def main() -> None:
    """Run the command line (the console script goes through ticketcli.cli.entry first)."""
    app()
