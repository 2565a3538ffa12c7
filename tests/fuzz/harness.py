"""Fuzz harness for ticket readers: a real ticket from the real writer, hypothesis strategies that break it in
every way a file can be broken, and a table of readers that must all reject each break with exit code 2 and one
line. Used by tests/fuzz/test_fuzz_tickets.py (a few hundred cases) and benchmarks/fuzz_long.py (thousands).

Extending it: a new reader of ticket files (e.g. `ticket export`) is one more entry in READERS; a new way to
break a file is one more strategy in FAMILIES (it must produce a file no reader may accept). The module-level
editors (edit_metadata, edit_json, edit_masks) make one deliberate change to a real ticket for the hostile suite.

A changed mask bit is not a family: load and inspect accept the file and report `integrity: modified`; the
readers that use the masks (MASK_READERS) refuse it.
"""

from __future__ import annotations

import hashlib
import json
import math
import struct
import tempfile
import time
import tracemalloc
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from hypothesis import strategies as st
from typer.testing import CliRunner

from ticketcli.cli.app import app
from ticketcli.errors import TicketCliError, TicketFileError
from ticketcli.runs import extract as runs_extract
from ticketcli.settings.resolve import build_extract_spec, merge_settings
from ticketcli.ticketfile import ticket as ticket_io
from ticketcli.ticketfile.safetensors_file import DTYPE_BYTES

# 13 hidden units and biases: masks of 832, 13, 130 and 10 bits, so three of them have padding bits
SEED_MODEL = "mlp:64-13-10+bias"
HUGE = 10**12


def write_seed_ticket(path: Path) -> bytes:
    """A valid ticket from the real writer (random masks over a tiny digits MLP); returns its bytes."""
    spec = build_extract_spec(
        merge_settings(
            {
                "method": "random",
                "dataset": "digits",
                "model": SEED_MODEL,
                "n_extract": 100,
                "n_val": 50,
                "sparsity": 0.7,
            },
            None,
        )
    )
    runs_extract.extract_ticket(spec, out=path, overwrite=True)
    return path.read_bytes()


# ---- the file as parts: header dict (tensor entries + __metadata__) and body --------------------------------


def split(raw: bytes) -> tuple[dict, bytes]:
    (n,) = struct.unpack("<Q", raw[:8])
    return json.loads(raw[8 : 8 + n]), raw[8 + n :]


def encode(header: dict | str, body: bytes, *, length: int | None = None) -> bytes:
    """Header (a dict, or raw JSON text for duplicated keys) padded to 8 bytes as safetensors writes it."""
    text = (header if isinstance(header, str) else json.dumps(header, separators=(",", ":"))).encode()
    text += b" " * (-len(text) % 8)
    return struct.pack("<Q", len(text) if length is None else length) + text + body


def tensors_of(header: dict, body: bytes) -> list[tuple[str, str, list, bytes]]:
    out = [
        (k, v["dtype"], v["shape"], body[v["data_offsets"][0] : v["data_offsets"][1]])
        for k, v in header.items()
        if k != "__metadata__"
    ]
    return sorted(out, key=lambda t: header[t[0]]["data_offsets"][0])


def rebuild(meta: dict | None, tensors: list[tuple[str, str, list, bytes]]) -> tuple[dict, bytes]:
    """A consistent header (offsets recomputed) for these tensors."""
    header, body = ({"__metadata__": meta} if meta is not None else {}), b""
    for name, dtype, shape, data in tensors:
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [len(body), len(body) + len(data)]}
        body += data
    return header, body


def edit_metadata(raw: bytes, **changes: str | None) -> bytes:
    """The same ticket with these metadata strings replaced (None: removed); tensors and digest untouched."""
    header, body = split(raw)
    meta = {k: v for k, v in {**header["__metadata__"], **changes}.items() if v is not None}
    return encode(*rebuild(meta, tensors_of(header, body)))


def edit_json(raw: bytes, field: str, fn: Callable[[dict], object]) -> bytes:
    """The same ticket with one JSON metadata field changed in place by fn (its return value is ignored)."""
    value = json.loads(split(raw)[0]["__metadata__"][field])
    fn(value)
    return edit_metadata(raw, **{field: json.dumps(value)})


def edit_masks(raw: bytes, fn: Callable[[str, bytearray], object]) -> bytes:
    """The same ticket with fn(name, packed bytes) editing masks in place; the metadata (and so the recorded
    masks_sha256) stays as it was."""
    header, body = split(raw)
    tensors = []
    for name, dtype, shape, data in tensors_of(header, body):
        data = bytearray(data)
        fn(name, data)
        tensors.append((name, dtype, shape, bytes(data)))
    return encode(*rebuild(header["__metadata__"], tensors))


def hand_ticket(raw: bytes, spec: str, shapes: dict[str, list[int]], fill: Callable[[str, int], bytes]) -> bytes:
    """A ticket written by hand from a real one's metadata: this model spec and these mask shapes, each mask's
    packed bytes from fill(name, nbytes), and the masks_sha256 they make (a consistent file, however odd)."""
    header, _ = split(raw)
    model = {**json.loads(header["__metadata__"]["model"]), "spec": spec}
    tensors = [
        (f"mask/{n}", "U8", [(math.prod(s) + 7) // 8], fill(n, (math.prod(s) + 7) // 8))
        for n, s in sorted(shapes.items())
    ]
    digest = hashlib.sha256()
    for name, _, _, data in tensors:
        digest.update(name.encode() + b"\0" + data)
    meta = {
        **header["__metadata__"],
        "model": json.dumps(model),
        "shapes": json.dumps(shapes),
        "masks_sha256": digest.hexdigest(),
    }
    return encode(*rebuild(meta, tensors))


def flip_first_bit(name: str, data: bytearray) -> None:
    """edit_masks helper: flip the first element of the first mask (a bit that is never padding)."""
    if name == "mask/layers.0.weight":
        data[0] ^= 0x80


# ---- families of breakage: each a strategy of (family, bytes or None for "a directory") ---------------------


def families(raw: bytes) -> dict[str, st.SearchStrategy]:
    header, body = split(raw)
    meta = header["__metadata__"]
    tensors = tensors_of(header, body)
    names = [t[0] for t in tensors]
    shapes = json.loads(meta["shapes"])
    n_header = len(raw) - 8 - len(body)
    padded = [f"mask/{n}" for n, s in shapes.items() if math.prod(s) % 8]

    def with_meta(**changes) -> bytes:
        return encode(*rebuild({**meta, **changes}, tensors))

    def edit_tensor(i: int, **changes) -> bytes:
        h = json.loads(json.dumps(header))
        h[names[i]].update(changes)
        return encode(h, body)

    @st.composite
    def truncation(draw):
        region = draw(st.sampled_from(["length", "header", "body"]))
        lo, hi = {"length": (0, 8), "header": (8, 8 + n_header), "body": (8 + n_header, len(raw))}[region]
        return raw[: draw(st.integers(lo, hi - 1))]

    @st.composite
    def header_length_lie(draw):
        true = n_header
        lie = draw(
            st.one_of(
                st.integers(0, true - 1),
                st.integers(true + 1, len(raw) + 64),
                st.integers(len(raw), 2**64 - 1),
                st.sampled_from([2**63, 2**64 - 1, 2**32]),
            )
        )
        return struct.pack("<Q", lie) + raw[8:]

    @st.composite
    def huge_shape(draw):
        i = draw(st.integers(0, len(names) - 1))
        shape = draw(st.sampled_from([[HUGE], [10**6, 10**6], [2**62, 4], [HUGE, HUGE]]))
        kind = draw(st.sampled_from(["tensor-shape", "tensor-consistent-offsets", "metadata-shapes"]))
        if kind == "tensor-shape":
            return edit_tensor(i, shape=shape)
        if kind == "tensor-consistent-offsets":  # shape and byte range agree, but the bytes are not there
            start = header[names[i]]["data_offsets"][0]
            return edit_tensor(i, shape=shape, data_offsets=[start, start + math.prod(shape)])
        key = names[i].removeprefix("mask/")
        return with_meta(shapes=json.dumps({**shapes, key: shape}))

    @st.composite
    def wrong_dtype(draw):
        i = draw(st.integers(0, len(names) - 1))
        dtype = draw(
            st.one_of(
                st.sampled_from(sorted(set(DTYPE_BYTES) - {"U8"})),
                st.text(max_size=8).filter(lambda d: d not in DTYPE_BYTES),
            )
        )
        if dtype in DTYPE_BYTES and draw(st.booleans()):  # keep the layout consistent
            size = len(tensors[i][3])
            item = DTYPE_BYTES[dtype]
            t = list(tensors)
            t[i] = (
                t[i][0],
                dtype,
                [size // item] if size % item == 0 else [size],
                t[i][3] + b"\0" * (0 if size % item == 0 else size * item - size),
            )
            return encode(*rebuild(meta, t))
        return edit_tensor(i, dtype=dtype)

    @st.composite
    def tensor_set(draw):
        kind = draw(st.sampled_from(["extra", "missing", "renamed", "none"]))
        t = list(tensors)
        if kind == "extra":
            name = draw(
                st.one_of(st.just("mask/extra"), st.text(min_size=1, max_size=12)).filter(
                    lambda n: n not in names and n != "__metadata__"
                )
            )
            t.insert(draw(st.integers(0, len(t))), (name, "U8", [3], b"\xff\0\x01"))
        elif kind == "missing":
            del t[draw(st.integers(0, len(t) - 1))]
        elif kind == "renamed":
            i = draw(st.integers(0, len(t) - 1))
            new = draw(st.text(min_size=1, max_size=20).filter(lambda n: n not in names and n != "__metadata__"))
            t[i] = (new, *t[i][1:])
        else:
            t = []
        return encode(*rebuild(meta, t))

    bad_json = st.sampled_from(["", "{", "not json", "{'a': 1}", "[1, 2", '{"a": NaN', '"\\ud800', "\0"])
    wrong_types = st.sampled_from(["[]", "1", '"text"', "null", "true", "3.5"])

    @st.composite
    def metadata_value(draw):
        key = draw(st.sampled_from([k for k in ticket_io.REQUIRED if k != "weights_sha256"]))
        return with_meta(**{key: draw(st.one_of(bad_json, wrong_types))})

    missing = object()
    bad_fields = (
        [("init", "seed", v) for v in ("7", -1, 1.5, True, [], missing, 2**63, 2**64 - 1)]
        + [("init", "k", v) for v in ("7", -1.5, 0, True, float("inf"), float("nan"), missing, 5e-324, 1e-300, 1e13)]
        + [
            (f, sub, v)
            for f, sub in (("init", "scheme"), ("model", "spec"), ("data", "dataset"), ("method", "name"))
            for v in (5, None, [], missing)
        ]
        + [("data", sub, v) for sub in ("n_extract", "n_val", "split_seed") for v in (-1, "7", 1.5, False, missing)]
        + [("data", sub, v) for sub in ("n_extract", "n_val") for v in (0, 2**63)]
        + [("data", "split_seed", 2**63)]
        + [("metrics", split, v) for split in ("test", "val") for v in ("high", [], 3)]
        + [("sparsity", sub, v) for sub in ("requested", "achieved") for v in ("90%", -0.5, 1.5, [], {})]
        + [
            ("sparsity", "per_layer", 3),
            ("metrics", "device", 7),
            ("model", "spec", "mlp:" + "9-" * 600 + "9"),
            ("model", "parameters", {"w": "big"}),
            ("model", "masked", "layers.0.weight"),
        ]
    )

    @st.composite
    def metadata_field_types(draw):
        """Valid JSON objects whose fields have the wrong types or impossible values (or are missing)."""
        field, sub, value = draw(st.sampled_from(bad_fields))
        obj = json.loads(meta[field])
        if value is missing:
            obj.pop(sub)
        else:
            obj[sub] = value
        return with_meta(**{field: json.dumps(obj)})

    @st.composite
    def metric_field_types(draw):
        """metrics.test / metrics.val entries of the wrong type or out of range (the tables print them)."""
        split = draw(st.sampled_from(["test", "val"]))
        key, value = draw(
            st.sampled_from(
                [
                    ("accuracy", "0.9"),
                    ("accuracy", 1.5),
                    ("accuracy", -0.1),
                    ("accuracy", float("nan")),
                    ("loss", "low"),
                    ("loss", []),
                    ("correct", -1),
                    ("correct", "7"),
                    ("n", 1.5),
                    ("n", True),
                ]
            )
        )
        metrics = json.loads(meta["metrics"])
        metrics.setdefault(split, {})[key] = value
        return with_meta(metrics=json.dumps(metrics))

    @st.composite
    def long_integer(draw):
        """An integer of more than 20 digits (up to 5000: json.loads itself fails past 4300) anywhere in the
        header: a metadata JSON value, or the safetensors header's own shape or offsets."""
        digits = draw(st.sampled_from([21, 40, 4301, 5000]))
        number = "9" * digits
        where = draw(st.sampled_from(["metadata", "shape", "offset"]))
        if where == "metadata":
            field = draw(st.sampled_from(["init", "data", "metrics", "method", "sparsity", "created_by", "model"]))
            text = meta[field]
            return with_meta(**{field: text[:-1] + (", " if len(text) > 2 else "") + f'"big": {number}}}'})
        text = json.dumps(header, separators=(",", ":"))
        entry = json.dumps(header[names[0]], separators=(",", ":"))
        if where == "shape":
            new = entry.replace('"shape":[', f'"shape":[{number},', 1)
        else:
            new = entry.replace('"data_offsets":[', f'"data_offsets":[{number},', 1)
        return encode(text.replace(entry, new, 1), body)

    @st.composite
    def deep_nesting(draw):
        """A metadata value (or the safetensors header itself) nested deeper than any ticket needs."""
        depth = draw(st.sampled_from([40, 500, 5000, 100_000]))
        field = draw(st.sampled_from(["metrics", "method", "sparsity", "created_by", "header"]))
        nested = "[" * depth + "]" * depth
        if field == "header":
            return encode(json.dumps(header, separators=(",", ":"))[:-1] + f',"deep":{nested}}}', body)
        text = meta[field]
        return with_meta(**{field: text[:-1] + (", " if len(text) > 2 else "") + f'"deep": {nested}}}'})

    @st.composite
    def masks_digest(draw):
        """masks_sha256 that is not a sha256 hex digest (a modified mask is not a family: see the docstring)."""
        return with_meta(
            masks_sha256=draw(
                st.sampled_from(["", "x" * 64, meta["masks_sha256"].upper(), meta["masks_sha256"][:63], "[]"])
            )
        )

    @st.composite
    def missing_field(draw):
        key = draw(st.sampled_from(["format", "format_version", *ticket_io.REQUIRED]))
        return encode(*rebuild({k: v for k, v in meta.items() if k != key}, tensors))

    @st.composite
    def format_version(draw):
        v = draw(
            st.one_of(st.text(max_size=6), st.sampled_from(["2", "0", "1.0", " 1", "v1"])).filter(
                lambda v: v != ticket_io.FORMAT_VERSION
            )
        )
        return with_meta(format_version=v) if draw(st.booleans()) else with_meta(format=v or "pt")

    @st.composite
    def non_string_metadata(draw):
        key = draw(st.sampled_from(sorted(meta)))
        h = json.loads(json.dumps(header))
        h["__metadata__"][key] = draw(st.sampled_from([1, None, [], {"a": "b"}, True]))
        return encode(h, body)

    @st.composite
    def padding_bits(draw):
        name = draw(st.sampled_from(padded))
        n = math.prod(shapes[name.removeprefix("mask/")])
        i = names.index(name)
        data = bytearray(tensors[i][3])
        data[-1] |= 1 << draw(st.integers(0, 7 - n % 8))  # one of the (8 - n % 8) low bits of the last byte
        t = list(tensors)
        t[i] = (*t[i][:3], bytes(data))
        return encode(*rebuild(meta, t))

    @st.composite
    def byte_length(draw):
        """Declared shapes (metadata) and the packed byte count disagree; or the tensor has extra/fewer bytes."""
        i = draw(st.integers(0, len(names) - 1))
        key = names[i].removeprefix("mask/")
        if draw(st.booleans()):
            n = math.prod(shapes[key])
            new = draw(st.integers(1, 4 * n + 64).filter(lambda m: (m + 7) // 8 != (n + 7) // 8))
            return with_meta(shapes=json.dumps({**shapes, key: [new]}))
        t = list(tensors)
        data = t[i][3]
        data = (
            data + bytes(draw(st.integers(1, 16))) if draw(st.booleans()) else data[: -draw(st.integers(1, len(data)))]
        )
        t[i] = (t[i][0], "U8", [len(data)], data)
        return encode(*rebuild(meta, t))

    @st.composite
    def duplicated_key(draw):
        text = json.dumps(header, separators=(",", ":"))
        where = draw(st.sampled_from(["top-level tensor", "metadata", "tensor field", "metadata value"]))
        if where == "top-level tensor":
            entry = json.dumps({names[0]: header[names[0]]}, separators=(",", ":"))[1:-1]
            text = text[:-1] + "," + entry + "}"
        elif where == "metadata":
            key = draw(st.sampled_from(sorted(meta)))
            text = text.replace(
                '{"__metadata__":{', '{"__metadata__":{' + json.dumps(key) + ":" + json.dumps(meta[key]) + ",", 1
            )
        elif where == "tensor field":
            text = text.replace('"dtype":"U8"', '"dtype":"U8","dtype":"U8"', 1)
        else:
            field = draw(st.sampled_from(["init", "data", "model"]))
            value = meta[field]
            dup = value[:-1] + "," + value[1:]  # every key of the object a second time
            return with_meta(**{field: dup})
        return encode(text, body)

    @st.composite
    def foreign_safetensors(draw):
        n = draw(st.integers(0, 40))
        data = bytes(draw(st.binary(min_size=4 * n, max_size=4 * n)))
        m = draw(
            st.one_of(
                st.none(),
                st.just({"format": "pt"}),
                st.dictionaries(st.text(max_size=5), st.text(max_size=5), max_size=3),
            )
        )
        return encode(*rebuild(m, [("weight", "F32", [n], data)]))

    @st.composite
    def garbage(draw):
        kind = draw(st.sampled_from(["empty", "directory", "random", "plausible-length"]))
        if kind == "empty":
            return b""
        if kind == "directory":
            return None
        data = draw(st.binary(max_size=300))
        return data if kind == "random" else struct.pack("<Q", draw(st.integers(0, len(data)))) + data

    fams = {
        "truncation": truncation(),
        "header-length-lie": header_length_lie(),
        "huge-shape": huge_shape(),
        "wrong-dtype": wrong_dtype(),
        "tensor-set": tensor_set(),
        "metadata-not-json": metadata_value(),
        "metadata-field-types": metadata_field_types(),
        "missing-field": missing_field(),
        "format-version": format_version(),
        "non-string-metadata": non_string_metadata(),
        "padding-bits": padding_bits(),
        "byte-length": byte_length(),
        "duplicated-key": duplicated_key(),
        "foreign-safetensors": foreign_safetensors(),
        "garbage": garbage(),
        "metric-field-types": metric_field_types(),
        "long-integer": long_integer(),
        "deep-nesting": deep_nesting(),
        "masks-digest": masks_digest(),
    }
    return fams


def malformed(raw: bytes) -> st.SearchStrategy:
    """(family, payload) over every family; payload None means "a directory"."""
    return st.one_of(*[s.map(lambda b, f=f: (f, b)) for f, s in families(raw).items()])


@st.composite
def byte_flips(draw, raw: bytes):
    """Any 1-4 bytes of a valid ticket changed: the result may still be valid; it must never crash a reader."""
    data = bytearray(raw)
    for _ in range(draw(st.integers(1, 4))):
        data[draw(st.integers(0, len(data) - 1))] = draw(st.integers(0, 255))
    return bytes(data)


def place(payload: bytes | None, path: Path) -> Path:
    """Put a case on disk: a file with these bytes, or a directory."""
    if path.is_dir():
        path.rmdir()
    elif path.exists():
        path.unlink()
    if payload is None:
        path.mkdir()
    else:
        path.write_bytes(payload)
    return path


# ---- the readers ----------------------------------------------------------------------------------------------


@dataclass
class Outcome:
    reader: str
    exit_code: int
    message: str  # stderr (or the TicketFileError text)
    seconds: float
    peak_bytes: int  # Python-level peak allocation (tracemalloc) during the read; -1 when not measured


runner = CliRunner()


def _load(path: Path) -> tuple[int, str]:
    try:
        ticket_io.load(path)
    except TicketFileError as e:
        return e.exit_code, f"error: {e}"
    return 0, ""


def _cli(*args: str) -> Callable[[Path], tuple[int, str]]:
    def run(path: Path) -> tuple[int, str]:
        result = runner.invoke(app, [*args[:1], str(path), *args[1:]])
        if result.exception is not None and not isinstance(result.exception, SystemExit):
            raise result.exception  # a crash: let the test show the traceback
        return result.exit_code, result.stderr

    return run


_EXPORT_DIR = Path(tempfile.mkdtemp(prefix="ticket-fuzz-export-"))  # an export of a rejected file never lands here


def _drift(path: Path) -> tuple[int, str]:
    result = runner.invoke(app, ["drift", "--ticket", str(path), "--steps", "1", "--device", "cpu", "--quiet"])
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise result.exception
    return result.exit_code, result.stderr


def _load_sparse(path: Path) -> tuple[int, str]:
    from ticketcli.export.sparse.load import load_sparse

    try:
        load_sparse(path, measure=False)
    except TicketCliError as e:
        return e.exit_code, f"error: {e}"
    return 0, ""


READERS: dict[str, Callable[[Path], tuple[int, str]]] = {
    "load": _load,
    "inspect": _cli("inspect", "--json"),
    "compare": lambda path: _cli("compare", str(path), "--json")(path),  # the file compared with itself
    "evaluate": _cli("evaluate", "--json", "--device", "cpu"),
    "export": _cli("export", "--format", "masks", "--force", "--out", str(_EXPORT_DIR / "x.safetensors")),
    "train-weak": _cli("train-weak", "--epochs", "1", "--device", "cpu", "--quiet"),
    "drift": _drift,
    "load_sparse": _load_sparse,  # the sparse runtime form, regenerated from the seed one layer at a time
}
# they use the masks: a modified one is refused
MASK_READERS = ("evaluate", "export", "train-weak", "drift", "load_sparse")


def run_ok(*args: str):
    """`ticket ARGS` in-process, expected to succeed; no tracemalloc (a first train-weak or drift imports hundreds of
    modules, which tracing slows tenfold). Returns Typer's Result."""
    result = runner.invoke(app, list(args))
    assert result.exit_code == 0, (result.exit_code, result.stderr[-1000:])
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    return result


def read(reader: str, path: Path, *, trace_memory: bool = False) -> Outcome:
    if trace_memory:
        tracemalloc.start()
    t0 = time.perf_counter()
    try:
        code, message = READERS[reader](path)
    finally:
        seconds = time.perf_counter() - t0
        peak = tracemalloc.get_traced_memory()[1] if trace_memory else -1
        if trace_memory:
            tracemalloc.stop()
    return Outcome(reader, code, message, seconds, peak)


def clean_rejection(o: Outcome) -> bool:
    """Exit code 2 and exactly one line starting with 'error:' (no traceback)."""
    lines = o.message.strip().splitlines()
    return o.exit_code == 2 and len(lines) == 1 and lines[0].startswith("error:") and "Traceback" not in o.message


# ---- properties: valid tickets of any shape, and random mutations of valid tickets -----------------------------

# shapes drawn for the round trip stay within SEED_MODEL's 985 parameters (a reader refuses masks that hold more)
MAX_DRAWN_BITS = 985
JSON_TEXT = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=12)  # control chars included
JSON_NUMBERS = st.integers(-(2**63), 2**64 - 1) | st.floats(allow_nan=False, allow_infinity=False)
JSON_VALUES = st.recursive(
    st.none() | st.booleans() | JSON_NUMBERS | JSON_TEXT,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(JSON_TEXT, inner, max_size=3),
    max_leaves=8,
)


@st.composite
def mask_shapes(draw) -> dict[str, list[int]]:
    """1-4 masks whose sizes cover every residue mod 8 (padding bits 0-7), as 1 to 3 dimensions."""
    shapes: dict[str, list[int]] = {}
    budget = MAX_DRAWN_BITS
    for i in range(draw(st.integers(1, 4))):
        n = draw(st.integers(0, min(24, (budget - 7) // 8)).map(lambda q: 8 * q)) + draw(st.integers(0, 7))
        if n == 0 or n > budget:
            n = 1
        budget -= n
        split_at = draw(st.sampled_from([d for d in (1, 2, 3, 4, 8) if n % d == 0]))
        shape = [n] if split_at == 1 else [split_at, n // split_at]
        if draw(st.booleans()):
            shape = [1, *shape]  # a leading 1 (a conv's 1x... kernel)
        shapes[f"{draw(st.sampled_from(['layers', 'blocks', 'conv', 'head']))}.{i}.weight"] = shape
    return shapes


@st.composite
def valid_tickets(draw, seed: ticket_io.Ticket) -> ticket_io.Ticket:
    """A ticket the writer may write: `seed`'s records with random masks (any shape, density 0 to 1 included) and
    random values in the places a ticket keeps whatever JSON it is given (a method's options, the metrics'
    extras), numbers and text at their edges."""
    import numpy as np
    import torch

    masks = {}
    for name, shape in draw(mask_shapes()).items():
        n = math.prod(shape)
        kind = draw(st.sampled_from(["zeros", "ones", "random"]))
        if kind == "random":
            rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
            bits = rng.random(n) < draw(st.floats(0, 1))
        else:
            bits = np.full(n, kind == "ones")
        masks[name] = torch.from_numpy(bits).reshape(shape)
    options = draw(
        st.dictionaries(st.text(min_size=1, max_size=8).filter(lambda k: k != "name"), JSON_VALUES, max_size=4)
    )
    fraction = st.floats(0, 1)
    return ticket_io.Ticket.of(
        masks,
        model=seed.model.to_json(),
        init={**seed.init.to_json(), "seed": draw(st.integers(0, 2**63 - 1))},
        weights_sha256=seed.weights_sha256,
        method={**seed.method.to_json(), **options},
        data={**seed.data.to_json(), "split_seed": draw(st.integers(0, 2**63 - 1))},
        sparsity={**seed.sparsity.to_json(), "requested": draw(fraction), "achieved": draw(fraction)},
        metrics={**seed.metrics.to_json(), "note": draw(JSON_VALUES)},
        created_by=seed.created_by.to_json(),
    )


@st.composite
def mutations(draw, raw: bytes) -> tuple[str, bytes]:
    """(what, bytes): a valid ticket after 1-3 random edits of any kind: bytes flipped, inserted or cut, the header
    JSON edited, a metadata value replaced by another type, a huge number, unicode or control characters. Some
    results are still valid tickets; none may crash a reader."""
    data, done = raw, []
    for _ in range(draw(st.integers(1, 3))):
        kind = draw(st.sampled_from(["flip", "insert", "truncate", "header", "value", "drop"]))
        done.append(kind)
        if kind == "flip" and data:
            b = bytearray(data)
            b[draw(st.integers(0, len(b) - 1))] ^= draw(st.integers(1, 255))
            data = bytes(b)
        elif kind == "insert":
            at = draw(st.integers(0, len(data)))
            data = data[:at] + draw(st.binary(min_size=1, max_size=16)) + data[at:]
        elif kind == "truncate":
            data = data[: draw(st.integers(0, len(data)))]
        else:
            try:
                header, body = split(data)
                meta = header["__metadata__"]
            except (ValueError, KeyError, TypeError, struct.error):
                continue  # an earlier edit broke the header: nothing left to edit in it
            if kind == "header":  # a tensor entry's field or the metadata itself replaced by any JSON
                key = draw(st.sampled_from(sorted(header, key=str)))
                header[key] = (
                    draw(JSON_VALUES)
                    if draw(st.booleans())
                    else {**header[key], "x": draw(JSON_VALUES)}
                    if isinstance(header[key], dict)
                    else header[key]
                )
            elif kind == "drop" and isinstance(meta, dict) and meta:
                del meta[draw(st.sampled_from(sorted(meta)))]
            elif isinstance(meta, dict) and meta:
                field = draw(st.sampled_from(sorted(meta)))
                value = draw(
                    JSON_VALUES
                    | st.just(HUGE)
                    | st.integers(10**19, 10**30)
                    | st.sampled_from([1e308, -1e308, 5e-324, "\x00\x1b[2J\u202e", "\ud7ff\U0010ffff"])
                )
                try:
                    parsed = json.loads(meta[field])
                except ValueError:
                    parsed = None
                if isinstance(parsed, dict) and parsed and draw(st.booleans()):  # one value inside the object
                    parsed[draw(st.sampled_from(sorted(parsed)))] = value
                    meta[field] = json.dumps(parsed, ensure_ascii=draw(st.booleans()))
                else:
                    meta[field] = value if isinstance(value, str) and draw(st.booleans()) else json.dumps(value)
            data = encode(json.dumps(header, ensure_ascii=False), body)
    return "+".join(done), data


__all__ = [
    "MASK_READERS",
    "READERS",
    "Outcome",
    "byte_flips",
    "clean_rejection",
    "edit_json",
    "edit_masks",
    "edit_metadata",
    "families",
    "flip_first_bit",
    "hand_ticket",
    "malformed",
    "mask_shapes",
    "mutations",
    "place",
    "read",
    "run_ok",
    "valid_tickets",
    "write_seed_ticket",
]
