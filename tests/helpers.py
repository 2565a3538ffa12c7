"""Helpers shared by the tests (`from helpers import make_net`): tiny networks, quick method settings and a method
run on them, the command line's quick flags and its one-line errors, one example spec per model and a user's model
file, fake dataset files (IDX, CIFAR-10 batches), a seeded text for `--dataset text`, a hand-made sweep-k record,
and the FashionMNIST check. Fixtures live in conftest.py; a test module never imports conftest, nor another test
module (tests/test_test_imports.py)."""

from __future__ import annotations

import gzip
import importlib.util
import os
import pickle
import re
import struct
import sys
import textwrap
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from typer.testing import CliRunner

from ticketcli.cli.app import app
from ticketcli.data.places import find_idx_dir
from ticketcli.methods.base import ExtractResult
from ticketcli.methods.registry import METHODS, own_options
from ticketcli.models.build import build_model
from ticketcli.models.init import init_weights
from ticketcli.models.masked import MaskedNet
from ticketcli.models.registry import MODELS, parse_model
from ticketcli.settings.readers import check_method_options, method_reads, read_by
from ticketcli.settings.run import METHOD_OPTIONS
from ticketcli.settings.setting import option_flag
from ticketcli.specs.run import InitSpec, MethodSpec
from ticketcli.sweep.result import SweepRecord

FASHION_DIRS = ("/usr/share/datasets",)


def fashion_available() -> bool:
    """Whether FashionMNIST's IDX files are in $TICKET_DATA or the system copy."""
    dirs = tuple(d for d in (os.environ.get("TICKET_DATA"), *FASHION_DIRS) if d)
    return find_idx_dir(dirs, ("", "fashion-mnist", "FashionMNIST/raw")) is not None


def require_fashion() -> None:
    """Skip without FashionMNIST, unless TICKET_REQUIRE_FASHION=1 (CI), where its absence is a failure."""
    if fashion_available():
        return
    if os.environ.get("TICKET_REQUIRE_FASHION") == "1":
        pytest.fail("FashionMNIST is required (TICKET_REQUIRE_FASHION=1) but not installed")
    pytest.skip("FashionMNIST not installed (apt-get install dataset-fashion-mnist)")


def make_net(spec: str = "mlp:64-32-32-10", seed: int = 0) -> MaskedNet:
    """A MaskedNet of `spec` with its weights drawn from `seed`."""
    m = parse_model(spec)
    module = build_model(m)
    net = MaskedNet(module, m)
    net.load_weights(init_weights(module, InitSpec(seed=seed)))
    return net


def quick_method(name: str, **kw) -> MethodSpec:
    """A MethodSpec small enough for a test (2 epochs), with `kw` overriding; of the small settings only those the
    method reads (the others would be refused)."""
    small = dict(epochs=2, batch_size=128, imp_rounds=2, synflow_rounds=10, regrow_every=2)  # 2 epochs of 5 steps
    base = dict(name=name, sparsity=0.8, **{k: v for k, v in small.items() if method_reads(name, k)})
    base.update(kw)
    own = {o.name for o in own_options()}  # a method's own options go in `options`, the shared ones are fields
    return MethodSpec(**{k: v for k, v in base.items() if k not in own}, options={k: base[k] for k in own & set(base)})


def flags_for(name: str, args: list[str]) -> list[str]:
    """Command-line `args` less each `--option VALUE` pair of a method option that method `name` does not read."""
    if name not in METHODS:  # an unknown method, for a test of its refusal
        return list(args)
    unread = {option_flag(o) for o in METHOD_OPTIONS if not method_reads(name, o)}
    out: list[str] = []
    rest = iter(args)
    for a in rest:
        if a in unread:
            next(rest, None)  # its value goes too
        else:
            out.append(a)
    return out


def for_method(name: str, settings: dict) -> dict:
    """`settings` without the method options that method `name` does not read (setting those is refused)."""
    return read_by(name, settings)


def method_extract(name: str, data, net=None, seed: int = 0, progress=None, **kw) -> ExtractResult:
    """Extract with `name` as `ticket extract` would: options checked first, then the method run."""
    net = net or make_net()
    spec = quick_method(name, **kw)
    check_method_options(spec)
    return (
        METHODS.get(name)
        .load()()
        .extract(
            net,
            data,
            spec,
            device=torch.device("cpu"),
            generator=torch.Generator().manual_seed(seed),
            progress=progress,
        )
    )


def method_masks(name: str, data, **kw) -> dict[str, torch.Tensor]:
    """The masks `method_extract` returns."""
    return method_extract(name, data, **kw).masks


# ---- the command line ----

runner = CliRunner()
QUICK = [
    "--dataset",
    "digits",
    "--model",
    "mlp:64-32-32-10",
    "--epochs",
    "2",
    "--batch-size",
    "128",
    "--n-extract",
    "500",
    "--n-val",
    "200",
    "--quiet",
]  # a quick `ticket extract` on digits


def invoke(*args: str):
    """`ticket ARGS` through Typer's CliRunner."""
    return runner.invoke(app, list(args))


def one_line_error(result, code: int = 2) -> str:
    """The one `error:` line a refused command wrote to stderr, after checking its exit code and that it is one line."""
    assert result.exit_code == code, (result.exit_code, result.output)
    assert "Traceback" not in result.output
    err = result.stderr.strip()
    assert err.startswith("error:") and len(err.splitlines()) == 1, err
    return err


def one_line(r, code=2) -> str:
    """stderr of a refused command, after checking its exit code, that it has no traceback and is one line."""
    assert r.exit_code == code, r.output
    assert "Traceback" not in r.output and len(r.stderr.strip().splitlines()) == 1, r.stderr
    return r.stderr


# ---- models ----

# One tiny example per registered model, each family's first (for a 1x8x8 input with 10 classes, as the digits)
EXAMPLES = {name: MODELS.get(name).examples[0] for name in MODELS.names()}
IMAGE_MODELS = [n for n in MODELS.names() if not MODELS.get(n).text]
DIGITS = ((1, 8, 8), 10)

USER_NET = """
import torch
from torch import nn


class Net(nn.Module):
    def __init__(self, width={width}):
        super().__init__()
        self.conv = nn.Conv2d(1, width, 3, padding=1)
        self.bn = nn.BatchNorm2d(width)
        self.scale = nn.Parameter(torch.tensor(2.0))
        self.fc = nn.Linear(width * 16, 10, bias=False)

    def forward(self, x):
        x = torch.relu(self.bn(self.conv(x)))
        return self.fc(nn.functional.max_pool2d(x, 2).flatten(1)) * self.scale


def build_net():
    return Net()


def not_a_module():
    return 3
"""


def write_user_module(d: Path, name: str, width: int = 4) -> None:
    """A user's model file `d/name.py` (a conv net with BatchNorm and a free parameter), not yet imported. Its
    bytecode cache goes too: a cached .pyc is trusted while the source's size and mtime (whole seconds) match, and
    a rewrite with another width within the same second matches both."""
    path = d / f"{name}.py"
    path.write_text(textwrap.dedent(USER_NET.format(width=width)))
    Path(importlib.util.cache_from_source(str(path))).unlink(missing_ok=True)
    sys.modules.pop(name, None)


# ---- dataset files ----

NAMES = {
    "x_train": "train-images-idx3-ubyte",
    "y_train": "train-labels-idx1-ubyte",
    "x_test": "t10k-images-idx3-ubyte",
    "y_test": "t10k-labels-idx1-ubyte",
}  # MNIST's and FashionMNIST's IDX file names, by array


def idx_bytes(a: np.ndarray) -> bytes:
    magic = 0x00000803 if a.ndim == 3 else 0x00000801
    return struct.pack(">I", magic) + struct.pack(f">{a.ndim}I", *a.shape) + a.astype(np.uint8).tobytes()


def write_idx(path: Path, a: np.ndarray) -> Path:
    raw = idx_bytes(a)
    path.write_bytes(gzip.compress(raw) if path.suffix == ".gz" else raw)
    return path


def fake_images(n: int, seed: int) -> np.ndarray:
    """Random 28x28 uint8 images, each unique: its index is written into the first two pixels."""
    rng = np.random.default_rng(seed)
    x = rng.integers(0, 256, size=(n, 28, 28), dtype=np.uint8)
    x[:, 0, 0] = np.arange(n) % 256
    x[:, 0, 1] = np.arange(n) // 256
    return x


CIFAR_BATCH, CIFAR_TEST = 20, 30  # write_cifar's five training batches of 20 (a pool of 100) and its test batch


def cifar_batch(n: int, first_id: int, rng: np.random.Generator) -> dict:
    """A batch as CIFAR-10's python version stores it; every image's id is in its first two red pixels."""
    data = rng.integers(0, 256, size=(n, 3072), dtype=np.uint8)
    ids = np.arange(first_id, first_id + n)
    data[:, 0], data[:, 1] = ids % 256, ids // 256
    return {
        "batch_label": f"batch {first_id}",
        "labels": [int(v) for v in rng.integers(0, 10, n)],
        "data": data,
        "filenames": [f"img_{i}.png" for i in ids],
    }


def write_cifar(root: Path, seed: int = 0) -> Path:
    """CIFAR-10's python batches under root/cifar-10-batches-py, as the original files are written."""
    d = root / "cifar-10-batches-py"
    d.mkdir(parents=True)
    rng = np.random.default_rng(seed)
    batches = {f"data_batch_{i}": cifar_batch(CIFAR_BATCH, (i - 1) * CIFAR_BATCH, rng) for i in range(1, 6)}
    batches["test_batch"] = cifar_batch(CIFAR_TEST, 1000, rng)
    batches["batches.meta"] = {
        "label_names": ["airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck"],
        "num_cases_per_batch": CIFAR_BATCH,
        "num_vis": 3072,
    }
    for name, batch in batches.items():
        with open(d / name, "wb") as f:
            pickle.dump(batch, f, protocol=2)  # the original files are Python 2 pickles
    return d


# ---- text (--dataset text) ----

TEXT_MODEL = "gpt-nano:l1-d16-h2-c16"  # a GPT small enough to extract in a fraction of a second
WORDS = "the quick brown fox jumps over a lazy dog while seven wizards quietly hex jumbo vats of ale. "


def write_text(path: Path, seed: int, n: int = 6000) -> Path:
    """A few thousand characters of words in a seeded order (vocabulary: the letters, the space and the dot)."""
    words = WORDS.split(" ")
    g = torch.Generator().manual_seed(seed)
    idx = torch.randint(len(words), (n // 5,), generator=g).tolist()
    path.write_text(" ".join(words[i] for i in idx)[:n] + "\n", encoding="utf-8")
    return path


# ---- sweep-k ----


def full_record(r: dict) -> SweepRecord:
    """A record from a hand-made one in sweep's flat shape, the fields the summary does not read filled in."""
    rest = {"method": {"name": r["group"]}, "requested_sparsity": 0.9, "layer_densities": None, "test_loss": 1.0}
    rest |= {"masks_sha256": "0" * 64, "device": "cpu", "threads": 1, "wall_time_s": 0.0}
    return SweepRecord.of({**rest, "ticket": None, "ticket_sha256": None, **r})


def in_keywords(line: str) -> str:
    """A command-line error line as the Python API words it: each flag as its keyword (--init-k -> init_k=)."""
    return re.sub(r"(?<![\w-])--([a-z][a-z0-9-]*)", lambda m: m.group(1).replace("-", "_") + "=", line)


def load_digits() -> SimpleNamespace:
    """scikit-learn's digits as `sklearn.datasets.load_digits()` gives them (`.data` float64 (1797, 64), `.target`
    int64), read by ticketcli's own reader: no seconds of importing scikit-learn in every test worker
    (tests/test_data.py checks the two agree)."""
    from ticketcli.data.digits import digits_arrays

    data, target = digits_arrays()
    return SimpleNamespace(data=data, target=target)


def checkout_pythonpath(env: dict[str, str]) -> str:
    """A PYTHONPATH with this checkout first and `env`'s own entries after it, and no empty entry (which would put
    a child's working directory on its path)."""
    return os.pathsep.join(p for p in (str(Path(__file__).resolve().parents[1]), env.get("PYTHONPATH")) if p)
