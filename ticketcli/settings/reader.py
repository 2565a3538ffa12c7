"""The options of every command that rebuilds a ticket's network (evaluate, export, train-weak, and drift with
--ticket): which checkpoint and model code it may use, the memory budget, where the data is, where it runs. They are
flags only (these commands take no config file); the shared ones are extract's settings with the same meaning."""

from __future__ import annotations

from pathlib import Path

from ticketcli.settings.ranges import TEXT
from ticketcli.settings.run import RUN
from ticketcli.settings.setting import Panel, Setting, Table

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
# drift --ticket: drift declares its own --model, --device and --weights (settings/drift.py, cli/drift.py)
DRIFT_READER = READER.pick("trust_model_code", "max_params", "max_memory", "data_dir", "download", "threads")
