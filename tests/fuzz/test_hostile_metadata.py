"""Metadata semantics: a ticket's JSON fields are typed and ranged before anything uses them. Seeds outside
[0, 2^63), an init.k that makes the init infinite or zero, empty splits (n_val = 0), metrics and sparsity of the
wrong type (the tables print them as percentages), integers of thousands of digits and nesting thousands deep are
each one `error:` line and exit 2 from inspect (the table) and evaluate, never a traceback. The recorded
masks_sha256 makes a changed mask visible: inspect reports it, every reader of the masks refuses it, and a ticket
written before the digest existed still works with one warning."""

from __future__ import annotations

import hashlib
import json
import struct
import sys
from pathlib import Path

import pytest
from harness import (
    MASK_READERS,
    edit_json,
    edit_masks,
    edit_metadata,
    flip_first_bit,
    run_ok,
    split,
    write_seed_ticket,
)
from hostile import assert_clean, cli, snapshot

NINES = "9" * 5000  # json.loads itself raises a bare ValueError past 4300 digits

# (case id, field, key path inside the field's JSON, the value's JSON text, words the error line contains)
CASES = [
    ("seed-2^63", "init", ("seed",), str(2**63), "init.seed"),
    ("seed-2^64", "init", ("seed",), str(2**64), "init.seed"),
    ("seed-negative", "init", ("seed",), "-1", "init.seed"),
    ("seed-5000-digits", "init", ("seed",), NINES, "more than 20 digits"),
    ("split-seed-2^63", "data", ("split_seed",), str(2**63), "data.split_seed"),
    ("split-seed-float", "data", ("split_seed",), "0.5", "data.split_seed"),
    ("k-subnormal", "init", ("k",), "5e-324", "init.k"),
    ("k-tiny", "init", ("k",), "1e-300", "init.k"),
    ("k-huge", "init", ("k",), "1e13", "init.k"),
    ("k-overflows-to-inf", "init", ("k",), "1e400", "init.k"),
    ("k-nan", "init", ("k",), "NaN", "init.k"),
    ("k-zero", "init", ("k",), "0", "init.k"),
    ("k-negative", "init", ("k",), "-0.5", "init.k"),
    ("n-val-zero", "data", ("n_val",), "0", "data.n_val"),
    ("n-extract-zero", "data", ("n_extract",), "0", "data.n_extract"),
    ("n-val-5000-digits", "data", ("n_val",), NINES, "more than 20 digits"),
    ("metrics-test-string", "metrics", ("test",), '"high"', "metrics.test"),
    ("metrics-test-list", "metrics", ("test",), "[0.9]", "metrics.test"),
    ("accuracy-string", "metrics", ("test", "accuracy"), '"90%"', "metrics.test.accuracy"),
    ("accuracy-over-1", "metrics", ("val", "accuracy"), "1.5", "metrics.val.accuracy"),
    ("accuracy-nan", "metrics", ("test", "accuracy"), "NaN", "metrics.test.accuracy"),
    ("correct-string", "metrics", ("val", "correct"), '"7"', "metrics.val.correct"),
    ("loss-object", "metrics", ("test", "loss"), "{}", "metrics.test.loss"),
    ("bits-per-char-string", "metrics", ("test", "bits_per_char"), '"4.7"', "metrics.test.bits_per_char"),
    ("bits-per-char-negative", "metrics", ("val", "bits_per_char"), "-1", "metrics.val.bits_per_char"),
    ("bits-per-char-overflows", "metrics", ("test", "bits_per_char"), "1e400", "metrics.test.bits_per_char"),
    ("perplexity-below-1", "metrics", ("test", "perplexity"), "0.5", "metrics.test.perplexity"),
    ("perplexity-list", "metrics", ("val", "perplexity"), "[26]", "metrics.val.perplexity"),
    ("device-number", "metrics", ("device",), "7", "metrics.device"),
    ("metrics-5000-digits", "metrics", ("test", "n"), NINES, "more than 20 digits"),
    ("requested-string", "sparsity", ("requested",), '"90%"', "sparsity.requested"),
    ("achieved-over-1", "sparsity", ("achieved",), "2.0", "sparsity.achieved"),
    ("achieved-list", "sparsity", ("achieved",), "[]", "sparsity.achieved"),
    ("per-layer-number", "sparsity", ("per_layer",), "3", "sparsity.per_layer"),
    ("method-5000-digits", "method", ("epochs",), NINES, "more than 20 digits"),
    ("created-by-40-deep", "created_by", ("deep",), "[" * 40 + "]" * 40, "nested more than 32"),
    ("created-by-number", "created_by", ("torch",), "7", "created_by.torch"),
    ("created-by-long-text", "created_by", ("cpu_model",), json.dumps("x" * 5000), "created_by.cpu_model"),
    ("metrics-5000-deep", "metrics", ("deep",), "[" * 5000 + "]" * 5000, "nested more than 32"),
    ("method-100k-deep", "method", ("deep",), '{"a":' * 100_000 + "1" + "}" * 100_000, "nested more than 32"),
    ("metrics-33-deep", "metrics", ("deep",), "[" * 32 + "]" * 32, "nested more than 32"),  # 32 in, and the field
    ("text-is-not-nesting", "created_by", ("cpu_model",), json.dumps("[" * 5000), "created_by.cpu_model"),
    ("spec-too-long", "model", ("spec",), json.dumps("mlp:" + "8-" * 1000 + "8"), "longer than 1000"),
    ("parameters-wrong", "model", ("parameters",), '{"w": "big"}', "model.parameters"),
]
READERS = {"inspect": ["inspect"], "evaluate": ["evaluate", "--device", "cpu"]}


@pytest.fixture(scope="module")
def seed(tmp_path_factory) -> bytes:
    return write_seed_ticket(tmp_path_factory.mktemp("meta") / "seed.safetensors")


def with_value(raw: bytes, field: str, keys: tuple[str, ...], text: str) -> bytes:
    """The ticket with field[keys...] set to this raw JSON text (which json.dumps could not always write)."""
    value = json.loads(split(raw)[0]["__metadata__"][field])
    inner = value
    for k in keys[:-1]:
        inner = inner.setdefault(k, {})
    inner[keys[-1]] = "@@VALUE@@"
    return edit_metadata(raw, **{field: json.dumps(value).replace('"@@VALUE@@"', text)})


@pytest.mark.parametrize("reader", list(READERS))
@pytest.mark.parametrize("case,field,keys,text,needle", CASES, ids=[c[0] for c in CASES])
def test_bad_metadata_is_one_line(seed, tmp_path, reader, case, field, keys, text, needle):
    path = tmp_path / "t.safetensors"
    path.write_bytes(with_value(seed, field, keys, text))
    assert_clean(cli(*READERS[reader], str(path)), 2, contains=needle, folder=tmp_path)


@pytest.mark.parametrize("limit", [1_000, 200_000])
@pytest.mark.parametrize("field", ["metrics", "created_by"])
def test_deep_nesting_is_refused_alike_whatever_the_recursion_limit(seed, tmp_path, limit, field):
    """json.loads's own depth limit is the interpreter's recursion limit, which a library in the same process may
    raise (torch's compiler does): the text's depth is checked first, so the line never depends on it (and a
    decoder allowed 200,000 levels never gets to recurse 50,000 deep on the C stack)."""
    old = sys.getrecursionlimit()
    sys.setrecursionlimit(limit)
    try:
        path = tmp_path / "t.safetensors"
        path.write_bytes(with_value(seed, field, ("deep",), "[" * 50_000 + "]" * 50_000))
        assert_clean(cli("inspect", str(path)), 2, contains=f"metadata field {field!r} is nested more than 32")
    finally:
        sys.setrecursionlimit(old)


def test_deep_nesting_in_the_safetensors_header_is_one_line(seed, tmp_path):
    header, body = split(seed)
    text = json.dumps(header, separators=(",", ":"))[:-1] + ',"x":' + "[" * 5000 + "]" * 5000 + "}"
    raw = text.encode() + b" " * (-len(text) % 8)
    path = tmp_path / "t.safetensors"
    path.write_bytes(struct.pack("<Q", len(raw)) + raw + body)
    assert_clean(cli("inspect", str(path)), 2, contains="header is nested more than 32 levels deep")


@pytest.mark.parametrize("where", ["shape", "data_offsets"])
def test_5000_digit_integer_in_the_safetensors_header(seed, tmp_path, where):
    header, body = split(seed)
    name = next(k for k in header if k != "__metadata__")
    text = json.dumps(header, separators=(",", ":"))
    entry = json.dumps(header[name], separators=(",", ":"))
    text = text.replace(entry, entry.replace(f'"{where}":[', f'"{where}":[{NINES},', 1), 1).encode()
    text += b" " * (-len(text) % 8)
    path = tmp_path / "t.safetensors"
    path.write_bytes(struct.pack("<Q", len(text)) + text + body)
    assert_clean(cli("inspect", str(path)), 2, contains="more than 20 digits")


def test_checkpoint_path_must_be_a_string(seed, tmp_path):
    path = tmp_path / "t.safetensors"
    path.write_bytes(edit_metadata(seed, checkpoint=json.dumps({"path": 5, "sha256": "a" * 64})))
    assert_clean(cli("evaluate", str(path), "--device", "cpu"), 2, contains="checkpoint.path")


@pytest.mark.parametrize("digest", ["", "nothex", "A" * 64, "a" * 63])
def test_masks_sha256_must_be_a_digest(seed, tmp_path, digest):
    path = tmp_path / "t.safetensors"
    path.write_bytes(edit_metadata(seed, masks_sha256=digest))
    assert_clean(cli("inspect", "--json", str(path)), 2, contains="masks_sha256")


# ---- integrity ---------------------------------------------------------------------------------------------


def mask_reader(reader: str, path: Path, out: Path) -> list[str]:
    return {
        "evaluate": ["evaluate", str(path), "--device", "cpu"],
        "export": ["export", str(path), "--format", "masked", "--out", str(out)],
        "train-weak": ["train-weak", str(path), "--epochs", "1", "--device", "cpu", "--quiet", "--out", str(out)],
        "drift": ["drift", "--ticket", str(path), "--steps", "1", "--device", "cpu", "--quiet", "--plot", str(out)],
        # tc.load_sparse's command-line road: the ticket regenerated into the sparse form and written
        "load_sparse": ["export", str(path), "--format", "sparse", "--out", str(out)],
    }[reader]


@pytest.mark.parametrize("reader", MASK_READERS)
def test_modified_masks_are_refused_by_every_reader_of_masks(seed, tmp_path, reader):
    path, out = tmp_path / "t.safetensors", tmp_path / "out.safetensors"
    path.write_bytes(edit_masks(seed, flip_first_bit))
    run = cli(*mask_reader(reader, path, out))
    assert_clean(
        run, 2, contains="masks were modified after the ticket was written", unchanged=snapshot(out), folder=tmp_path
    )


@pytest.mark.parametrize("reader", MASK_READERS)
def test_flipping_the_bit_back_makes_the_ticket_whole_again(seed, tmp_path, reader):
    """The refusal above is the digest's doing: the same edit applied twice restores a ticket every reader takes."""
    path, out = tmp_path / "t.safetensors", tmp_path / "out.safetensors"
    path.write_bytes(edit_masks(edit_masks(seed, flip_first_bit), flip_first_bit))
    assert "error" not in run_ok(*mask_reader(reader, path, out)).stderr


def test_inspect_reports_modified_masks(seed, tmp_path):
    path = tmp_path / "t.safetensors"
    path.write_bytes(edit_masks(seed, flip_first_bit))
    assert json.loads(run_ok("inspect", "--json", str(path)).stdout)["integrity"] == "modified"
    assert "MODIFIED" in run_ok("inspect", str(path)).stdout  # the table row (Rich may wrap the rest of it)
    path.write_bytes(seed)
    assert json.loads(run_ok("inspect", "--json", str(path)).stdout)["integrity"] == "ok"


@pytest.mark.parametrize("reader", ["evaluate", "export", "train-weak"])
def test_an_older_ticket_without_the_digest_still_works_with_one_warning(seed, tmp_path, reader):
    path, out = tmp_path / "t.safetensors", tmp_path / "out.safetensors"
    path.write_bytes(edit_metadata(seed, masks_sha256=None))
    lines = [line for line in run_ok(*mask_reader(reader, path, out)).stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("warning:") and "masks_sha256" in lines[0], lines
    assert json.loads(run_ok("inspect", "--json", str(path)).stdout)["integrity"] == "not recorded"


def test_recorded_digest_is_the_documented_one(seed):
    """Oracle: sha256 over sorted keys, each the UTF-8 key, a NUL, then the packed bytes (read with plain json)."""
    header, body = split(seed)
    digest = hashlib.sha256()
    for key in sorted(k for k in header if k != "__metadata__"):
        begin, end = header[key]["data_offsets"]
        digest.update(key.encode("utf-8") + b"\0" + body[begin:end])
    assert header["__metadata__"]["masks_sha256"] == digest.hexdigest()


def test_inspect_json_keeps_its_contract_whatever_the_metadata_adds(seed, tmp_path):
    """inspect --json moves a ticket's metrics facts to the top of its document: a file's extra keys there (named like
    the document's own), a trained entry that is no object, odd sparsity keys and out-of-range per-layer shares do
    not replace the document's keys or leave its schema (ticket.inspect/1)."""
    jsonschema = pytest.importorskip("jsonschema")
    from ticketcli.contract.schema import schema_of

    meta = split(seed)[0]["__metadata__"]
    metrics = {**json.loads(meta["metrics"]), "ticket": "forged", "layers": 3, "trained": 5, "other": [1]}
    sparsity = json.loads(meta["sparsity"])
    name = next(iter(sparsity["per_layer"]))
    sparsity["per_layer"][name]["aux_share"] = 7
    sparsity["mine"] = "x"
    path = tmp_path / "t.safetensors"
    path.write_bytes(edit_metadata(seed, metrics=json.dumps(metrics), sparsity=json.dumps(sparsity)))
    doc = json.loads(run_ok("inspect", "--json", str(path)).stdout)
    jsonschema.validate(doc, schema_of("inspect"))
    assert doc["ticket"] == str(path) and "trained" not in doc and "other" not in doc and "mine" not in doc["sparsity"]
    assert [la["name"] for la in doc["layers"]][0] == name and "aux_share" not in doc["layers"][0]


@pytest.mark.parametrize(
    ("claim", "layout", "code", "words"),
    [
        ({"block": "4x4"}, "auto", 2, "is not whole 4x4 blocks"),
        ({"block": "banana"}, "auto", 2, "--block must be RxC"),
        ({"structure": "2:4"}, "2:4", 2, "--layout 2:4 needs at most 2 kept of every 4 inputs"),
        ({"structure": "2:4"}, "auto", 0, ""),  # the masks do not fit 2:4: auto stores CSR
    ],
)
def test_a_structure_the_method_record_claims_is_checked_against_the_masks(seed, tmp_path, claim, layout, code, words):
    """`export --format sparse --layout` takes its layout from the ticket's recorded structure, and the masks
    themselves must have it: a forged claim is one line (exit 2) or, for auto, no structured layout."""
    path, out = tmp_path / "t.safetensors", tmp_path / "out.safetensors"
    path.write_bytes(edit_json(seed, "method", lambda m: m.update(claim)))
    args = ("export", str(path), "--format", "sparse", "--layout", layout, "--out", str(out), "--json")
    if code:
        assert_clean(cli(*args), 2, contains=words, unchanged=snapshot(out), folder=tmp_path)
    else:
        assert json.loads(run_ok(*args).stdout)["layout"] == "csr"
