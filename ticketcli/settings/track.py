"""`--log-to`: the experiment trackers a run also writes to (TensorBoard event files, an MLflow store), shared by
every command that trains, and a config key of the commands that read a config file (extract,
sweep-k). The value is checked here, torch-free, so that a bad destination is one error line before any work;
ticketcli/track/ opens the trackers."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ticketcli.errors import UsageError
from ticketcli.settings.setting import Panel, Setting, Table
from ticketcli.specs.ranges import MAX_TEXT, Range, show

KINDS = ("tensorboard", "mlflow")
MAX_TRACKERS = 8
EXTRA = "pip install 'ticketcli[track]'"


@dataclass(frozen=True)
class Destination:
    """One `--log-to` value: the tracker and where it writes (a folder; an MLflow store: sqlite:///FILE or a
    folder)."""

    kind: str  # one of KINDS
    target: str  # tensorboard: a folder; mlflow: the store, as given

    @property
    def text(self) -> str:
        return f"{self.kind}:{self.target}"


def parse_destination(text: Any, what: str = "--log-to") -> Destination:
    """`tensorboard:DIR` or `mlflow:URI` (URI: sqlite:///FILE or a folder), or a one-line UsageError."""
    usage = "tensorboard:DIR or mlflow:URI (sqlite:///FILE or a folder)"
    if not isinstance(text, str) or len(text) > MAX_TEXT or "\0" in text:
        raise UsageError(f"{what} must be {usage}, got {show(text)}")
    kind, colon, target = text.partition(":")
    if not colon or kind not in KINDS:
        raise UsageError(f"{what} must be {usage}, got {show(text)}", hint=f"trackers: {', '.join(KINDS)}")
    if not target.strip():
        raise UsageError(f"{what} {kind}: needs a {'folder' if kind == 'tensorboard' else 'store'}, got {show(text)}")
    if kind == "mlflow":
        scheme, sep, rest = target.partition("://")
        if sep and scheme not in ("sqlite", "file"):
            raise UsageError(
                f"{what} mlflow: takes a local store (sqlite:///FILE or a folder), got {show(text)}",
                hint="log to a local store and open it with mlflow ui --backend-store-uri",
            )
        if sep and (not rest.startswith("/") or not rest.strip("/")):
            raise UsageError(f"{what} {scheme}:// needs an absolute path after it ({scheme}:///PATH), got {show(text)}")
    return Destination(kind, target)


class TrackersRange(Range):
    """The range of --log-to: one destination or a list of them (a TOML array), each parsed by parse_destination;
    normalised to a tuple of their texts."""

    def describe(self) -> str:
        return f"tensorboard:DIR or mlflow:URI, up to {MAX_TRACKERS}"

    def check(self, value: Any, what: str) -> Any:
        items = [value] if isinstance(value, str) else value
        if not isinstance(items, (list, tuple)) or len(items) > MAX_TRACKERS:
            raise UsageError(f"{what} takes up to {MAX_TRACKERS} destinations (text or an array), got {show(value)}")
        parsed = [parse_destination(v, what) for v in items]
        texts = tuple(p.text for p in parsed)
        twice = sorted({t for t in texts if texts.count(t) > 1})
        if twice:
            raise UsageError(f"{what} names {twice[0]} twice")
        return texts


LOG_TO = Setting(
    "log_to",
    "Also log the run to an experiment tracker: tensorboard:DIR (event files, one run folder per run) or "
    "mlflow:URI (a local store, sqlite:///FILE or a folder); repeat for several. Needs "
    + EXTRA.replace("[", "\\[")
    + ". A tracker that fails is a warning; the run goes on.",
    Panel.OUTPUT,
    list,
    TrackersRange("text"),
    shown="no tracking",
)
TRACK = Table(LOG_TO)  # extract and sweep-k: also a config key
TRACK_FLAG = Table(LOG_TO.but(config=False))  # the commands that read no config file: a flag only


def destinations(value: Any) -> tuple[Destination, ...]:
    """The checked --log-to value (None: not given) as destinations."""
    if not value:
        return ()
    return tuple(parse_destination(v) for v in LOG_TO.check(value))
