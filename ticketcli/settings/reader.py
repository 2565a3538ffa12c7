"""The options of every command that rebuilds a ticket's network (evaluate, export, train-weak, a study with
--ticket): which checkpoint and model code it may use, the memory budget, where the data is, where it runs. They are
flags only (these commands take no config file); the shared ones are extract's settings with the same meaning.
`build_reader_spec` turns them, from the command line or the Python API alike, into one ReaderSpec."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from ticketcli.settings.checks import build_spec
from ticketcli.settings.run import RUN
from ticketcli.settings.setting import Panel, Setting, Table
from ticketcli.specs.ranges import TEXT
from ticketcli.specs.run import DataSpec, ReaderSpec

READER = Table(
    Setting(
        "weights",
        "The checkpoint the ticket was extracted from (checked against its sha256).",
        Panel.MODEL,
        Path,
        TEXT,
        (ReaderSpec, "weights"),
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
        range=TEXT,
        config=False,
    ),
    *(RUN[name].but(config=False) for name in ("max_params", "max_memory", "data_dir", "download", "text")),
    *(RUN[name].but(config=False, field=(ReaderSpec, name)) for name in ("device", "threads")),
)
EXPORT_READER = READER.pick(*(n for n in READER.names() if n != "device"))  # export writes on the CPU


def build_reader_spec(**values: Any) -> ReaderSpec:
    """The reader options (READER's, by name; None or absent: not given) validated into one ReaderSpec by the one
    spec builder. The limits' defaults, the data's search path (--data-dir, $TICKET_DATA, the cache, system copies)
    and the model policy are resolved here, once."""
    from ticketcli.settings.registry import check_threads
    from ticketcli.settings.resolve import build_model_policy, data_location  # the registries: torch

    check_threads(values.get("threads"))  # first, as it always was
    policy = build_model_policy(
        trust_model_code=bool(values.get("trust_model_code")),
        model=values.get("model"),
        max_params=values.get("max_params"),
        max_memory=values.get("max_memory"),
    )
    text = values.get("text")
    data = DataSpec(
        **data_location(values.get("data_dir"), bool(values.get("download"))),
        text=None if text is None else os.path.abspath(str(RUN["text"].check(text))),
    )
    return build_spec(ReaderSpec, READER, values, data=data, policy=policy)
