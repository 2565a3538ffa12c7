"""The `Setting` declaration and a `Table` of them: the one place an option's name, default, range, help, panel and
readers are written, and the functions that derive the rest from it."""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, replace
from typing import Any

from ticketcli.methods.registry import METHODS
from ticketcli.settings.listing import ListItem
from ticketcli.specs.ranges import Range
from ticketcli.specs.run import field_default


class Panel:
    """The help panels options are grouped in (Typer's rich_help_panel), the same names in every command."""

    METHOD = "Method"
    VARIANTS = "Variants"  # ablations and the settings of one method family
    MODEL = "Model and init"
    DATA = "Data"
    TRAINING = "Training"
    OUTPUT = "Output"
    SCALE_OUT = "Scale-out"  # where and how wide it runs: device, precision, workers, checkpoints
    MEASURE = "Measurement"  # a study's own panels from here on
    ACT_CONTROL = "Activation control"
    RELUFY = "ReLUfication"
    TRADEOFF = "Trade-off sweep"


def show(value: object) -> str:
    """A default as help prints it: 0.01, 1e-8, 200, 0.9,0.999, augmented."""
    if isinstance(value, (tuple, list)):
        return ",".join(show(v) for v in value)
    if isinstance(value, float):
        text = repr(value).removesuffix(".0")  # 200.0 -> 200
        return re.sub(r"e([+-])0*(\d)", r"e\1\2", text)  # 1e-08 -> 1e-8
    return str(value)


def option_flag(name: str) -> str:
    """The flag a user types for setting `name`: --global-topk for global_topk."""
    return "--" + name.replace("_", "-")


@dataclass(frozen=True)
class Setting:
    """One option of a command, declared once.

    name: the config key and the API keyword (the flag is option_flag(name)).
    help: what it does, without its default (help() appends it) or the methods that read it (help() prefixes them).
    panel: the --help panel (Panel, below).
    kind: the type the flag parses (int, float, str, Path, bool: a switch; a tuple: a choice's names); None: the
        type its range holds (kind_of).
    range: what a value may be, checked for flags, config keys and API keywords alike; None: not checked here.
    field: (spec dataclass, field name) that holds the default and receives the value ("optim.lr": a field of a
        nested spec); None: `default` holds it.
    default: the default of a setting no spec field holds (None: not given; the help's `shown` says what happens).
    shown: the help's "Default: ..." text where the default is not a plain value (e.g. "half of the memory"), or ""
        for no default sentence.
    per_method: only the methods whose registry entries name it read it (methods/registry.py; Setting.methods);
        False: every method does, or it is no method option.
    example: a method option's valid value other than its default (Option.example).
    config: a config file key and an API keyword, beside the flag (False: a flag only).
    flag_name: the flag, where it is not the name with dashes (--from and --to of a swap).
    required: a flag the command cannot run without (export's --format and --out); never a config key.
    hidden: left out of --help and `ticket list settings` (a deprecated spelling).
    metavar: what --help shows for the value, where the type's name says too little (SECONDS).
    """

    name: str
    help: str
    panel: str
    kind: Any = None
    range: Range | None = None
    field: tuple[type, str] | None = None
    default: Any = None
    shown: str | None = None
    per_method: bool = False
    example: Any = None
    config: bool = True
    flag_name: str | None = None
    required: bool = False
    hidden: bool = False
    metavar: str | None = None

    def __post_init__(self) -> None:
        if self.kind is None:
            object.__setattr__(self, "kind", kind_of(self.range))

    @property
    def flag(self) -> str:
        return self.flag_name or option_flag(self.name)

    @property
    def value(self) -> Any:
        """The default the code uses: the spec field's, else `default`."""
        return self.default if self.field is None else field_default(*self.field)

    @property
    def methods(self) -> tuple[str, ...]:
        """The methods that read it, as their registry entries say; (): every method, or it is no method option."""
        return tuple(n for n in METHODS.names() if self.name in METHODS.get(n).read()) if self.per_method else ()

    @property
    def switch(self) -> bool:
        """A flag without a value (--frozen-aux): given means true."""
        return self.kind is bool

    def default_text(self) -> str:
        """The default as help and `ticket list settings` show it ("" where the flag is a switch, off by default)."""
        if self.shown is not None:
            return self.shown
        return "" if self.switch and not self.value else ("" if self.value is None else show(self.value))

    def range_text(self) -> str:
        """What a value may be: a choice's names, else its range's description."""
        if isinstance(self.kind, tuple):
            return "one of " + ", ".join(self.kind)
        return "" if self.range is None else self.range.describe()

    def list_item(self) -> ListItem:
        """Its row in `ticket list settings`."""
        return ListItem(
            name=self.name,
            description=self.help,
            flag=self.flag,
            default=self.default_text(),
            range=self.range_text(),
            methods=self.methods,
            panel=self.panel,
            config=self.config,
        )

    def help_text(self) -> str:
        """The help --help shows: who reads it, what it does, its default (none for a switch)."""
        text = f"{readers_prefix(self.methods)}{self.help}"
        default = "" if self.switch and self.shown is None else self.default_text()
        return f"{text} Default: {default}." if default else text

    def check(self, value: Any, what: str | None = None) -> Any:
        """`value` checked against the range and normalised; `what` names it in the error (default: its flag)."""
        return value if self.range is None else self.range.check(value, what or self.flag)

    def but(self, **changes: Any) -> Setting:
        """The same setting with another help or panel in one command (its name, default and range stay)."""
        return replace(self, **changes)


def kind_of(r: Range | None) -> Any:
    """The type a flag of range `r` parses: int, float, bool (a switch), a choice's names, else text."""
    return str if r is None else {"int": int, "float": float, "bool": bool, "choice": r.choices}.get(r.kind, str)


def readers_prefix(methods: tuple[str, ...]) -> str:
    """'augmented, iterated: ' for a setting only some methods read; 'all but augmented, iterated: ' where most do."""
    if not methods:
        return ""
    others = sorted(set(METHODS.names()) - set(methods))
    if len(others) < len(methods):
        return f"all methods but {', '.join(others)}: "
    return f"{', '.join(sorted(methods))}: "


class Settings(dict[str, Any]):
    """Settings by config key (a command's merged settings, a config file's, a table's defaults) that also know which
    keys the user set, by flag or config file: an option the method does not read is refused only when it was set,
    never for its default."""

    given: frozenset[str] = frozenset()


class Table:
    """The settings of one command (or shared by several), in declaration order, looked up by name."""

    def __init__(self, *settings: Setting) -> None:
        self._by_name: dict[str, Setting] = {}
        for s in settings:
            if s.name in self._by_name:
                raise ValueError(f"setting {s.name!r} declared twice")
            self._by_name[s.name] = s

    def __iter__(self) -> Iterator[Setting]:
        return iter(self._by_name.values())

    def __contains__(self, name: object) -> bool:
        return name in self._by_name

    def __getitem__(self, name: str) -> Setting:
        return self._by_name[name]

    def __len__(self) -> int:
        return len(self._by_name)

    def names(self) -> list[str]:
        return list(self._by_name)

    def pick(self, *names: str, **changes: dict[str, Any]) -> Table:
        """A table of some of these settings, e.g. another command's; changes[name] overrides fields (help)."""
        return Table(*(self[n].but(**changes.get(n, {})) for n in names))

    def plus(self, *others: Iterable[Setting]) -> Table:
        return Table(*self, *(s for other in others for s in other))

    def config_keys(self) -> list[str]:
        """The keys a config file (and the API) may set."""
        return [s.name for s in self if s.config]

    def defaults(self) -> Settings:
        """Config key -> the default the code uses."""
        return Settings({s.name: s.value for s in self if s.config})

    def method_options(self) -> tuple[str, ...]:
        """The settings only some methods read (the others are refused for a method that does not read them)."""
        return tuple(s.name for s in self if s.methods)

    def read_by(self, method: str) -> frozenset[str]:
        """The method options that `method` reads."""
        return frozenset(s.name for s in self if method in s.methods)
