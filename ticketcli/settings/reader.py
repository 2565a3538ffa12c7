"""The options of every command that rebuilds a ticket's network (evaluate, export, train-weak, a study with
--ticket): which checkpoint and model code it may use, the memory budget, where the data is, where it runs. They are
flags only (these commands take no config file); the shared ones are extract's settings with the same meaning.
`build_reader_spec` turns them, from the command line or the Python API alike, into one ReaderSpec."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from ticketcli.settings.run import RUN
from ticketcli.settings.setting import Panel, Setting, Table, option_flag
from ticketcli.specs.ranges import TEXT
from ticketcli.specs.run import DataSpec, ReaderSpec

READER = Table(
    Setting(
        "weights",
        "The checkpoint the ticket was extracted from (checked against its sha256).",
        Panel.MODEL,
        Path,
        TEXT,
        config=False,
    ),
    Setting(
        "trust_model_code",
        "Allow importing and running the model factory (pkg.module:function) the ticket names. A ticket alone never "
        "runs code: without this (or --model naming the same factory) such a ticket is refused.",
        Panel.MODEL,
        bool,
        config=False,
    ),
    Setting(
        "model",
        "The ticket's own model factory pkg.module:function: confirms that it may be imported (like "
        "--trust-model-code, for that factory only). Any other model is refused.",
        Panel.MODEL,
        str,
        TEXT,
        config=False,
    ),
    *(RUN[name].but(config=False) for name in ("max_params", "max_memory", "data_dir", "download", "device")),
    RUN["threads"].but(config=False),
)
EXPORT_READER = READER.pick(*(n for n in READER.names() if n != "device"))  # export writes on the CPU


def build_reader_spec(
    *,
    weights: str | Path | None = None,
    trust_model_code: bool = False,
    model: str | None = None,
    max_params: int | None = None,
    max_memory: int | str | None = None,
    data_dir: str | Path | None = None,
    download: bool = False,
    device: str | None = None,
    threads: int | None = None,
    named: Callable[[str], str] = option_flag,
) -> ReaderSpec:
    """The reader options (None: not given) validated into one ReaderSpec; `named` says what an error calls an
    option (the flag, or the API's keyword). The limits' defaults, the data's search path (--data-dir,
    $TICKET_DATA, the cache, system copies) and the model policy are resolved here, once."""
    from ticketcli.settings.registry import check_threads
    from ticketcli.settings.resolve import build_model_policy, data_location  # the registries: torch

    n_threads = check_threads(threads, named("threads"))
    policy = build_model_policy(
        trust_model_code=bool(trust_model_code), model=model, max_params=max_params, max_memory=max_memory
    )
    data = DataSpec(**data_location(None if data_dir is None else str(data_dir), bool(download)))
    where = None if weights is None else str(weights)
    return ReaderSpec(data=data, device=device or "auto", weights=where, policy=policy, threads=n_threads)
