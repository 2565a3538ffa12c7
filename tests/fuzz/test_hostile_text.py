"""Hostile text. Files for `ticket drift --text`: a huge (sparse) file, a binary one, an empty one, invalid UTF-8, a
text too short for one training and one validation block, too many distinct characters, a directory, a FIFO (would
hang) or /dev/zero (endless) under the file's name, or no file at all: each ends with exit code 2 and one `error:`
line, never a traceback, and never reads what the file only declares (in-process peak < 64 MiB). Text from a
ticket's metadata or a file name: every character of an unsafe Unicode category is escaped on the terminal, and
--json stays valid UTF-8."""

from __future__ import annotations

import json
import os
import unicodedata
from pathlib import Path

import pytest
from harness import edit_metadata, split
from hostile import assert_clean, child, cli
from hypothesis import given, settings
from hypothesis import strategies as st

from ticketcli.data.text import MAX_TEXT_BYTES, MAX_VOCAB
from ticketcli.report.console import literal

GPT = "gpt-nano:l1-d16-h2-c8"


def drift(path: Path | str, *extra: str):
    return cli("drift", "--model", GPT, "--text", str(path), "--steps", "1", "--batch-size", "4", "--quiet", *extra)


def make(tmp_path: Path, kind: str) -> Path:
    path = tmp_path / "corpus.txt"
    if kind == "huge":
        with open(path, "wb") as f:
            f.truncate(MAX_TEXT_BYTES + 1)  # sparse: one byte over the bound, nothing really written
    elif kind == "binary":
        path.write_bytes(b"some text\x00\x01\x02 and then binary" * 10)
    elif kind == "empty":
        path.write_bytes(b"")
    elif kind == "not-utf8":
        path.write_bytes(b"caf\xe9 au lait, " * 20)  # Latin-1
    elif kind == "too-short":
        path.write_text("0123456789abcdef", encoding="utf-8")  # 16 characters: one block of context 8 + 1
    elif kind == "vocab":
        path.write_text("".join(chr(0x4E00 + i) for i in range(MAX_VOCAB + 1)), encoding="utf-8")
    elif kind == "directory":
        path.mkdir()
    elif kind == "fifo":
        os.mkfifo(path)
    elif kind == "missing":
        pass
    else:
        raise ValueError(kind)
    return path


CASES = {
    "huge": "is larger than 8 MiB",
    "binary": "is binary",
    "empty": "is empty",
    "not-utf8": "is not UTF-8 text",
    "too-short": "too short for context 8",
    "vocab": f"more than {MAX_VOCAB}",
    "directory": "is a directory",
    "fifo": "is not a regular file",
    "missing": "text file not found",
}


@pytest.mark.parametrize("kind", list(CASES))
def test_hostile_text_file(tmp_path, kind):
    assert_clean(drift(make(tmp_path, kind)), 2, contains=CASES[kind])


def test_dev_zero_is_not_read_forever():
    assert_clean(drift("/dev/zero"), 2, contains="is not a regular file")


def test_missing_fortunes_say_how_to_get_them(tmp_path, monkeypatch):
    monkeypatch.setattr("ticketcli.data.text.FORTUNES_SYSTEM_DIR", str(tmp_path / "nowhere"))
    run = cli("drift", "--model", GPT, "--data-dir", str(tmp_path), "--steps", "1", "--quiet")
    assert_clean(run, 2, contains="fortunes files")
    assert "apt-get install fortunes" in run.stderr


def test_a_hostile_fortunes_file_in_data_dir(tmp_path):
    """The default corpus is read with the same bounds: a binary file posing as one of the fortunes files."""
    folder = tmp_path / "fortunes"
    folder.mkdir()
    for name in ("literature", "science", "computers", "wisdom"):
        (folder / name).write_text("a fortune\n%\n", encoding="utf-8")
    (folder / "science").write_bytes(b"\x00" * 100)
    run = cli("drift", "--model", GPT, "--data-dir", str(tmp_path), "--steps", "1", "--quiet")
    assert_clean(run, 2, contains="is binary")


# ---- text from files on the terminal and in --json ---------------------------------------------------------
# One rule, by Unicode category: controls (Cc), format characters (Cf: bidi marks, embeddings, overrides,
# isolates, zero-width characters), line and paragraph separators (Zl, Zp), lone surrogates (Cs), private-use
# (Co) and unassigned (Cn) code points never reach the terminal raw.

UNSAFE = frozenset({"Cc", "Cf", "Zl", "Zp", "Cs", "Co", "Cn"})
# one instance each of the reported families, and others of the same categories
INVISIBLE = "\u200e\u200f\u061c\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069\u2028\u2029\u0085"
OTHERS = "\u200b\u200d\ufeff\u00ad\U000e0041\ue000\U0010fffd\ud800 \udfff\x1b\x9b\x7f"


@given(st.text(alphabet=st.characters(min_codepoint=0, max_codepoint=0x10FFFF), max_size=40))
@settings(max_examples=300, deadline=None)
def test_literal_leaves_no_unsafe_character_and_keeps_the_rest(text):
    """The oracle is unicodedata: no character of an unsafe category survives, every other one is kept as is."""
    shown = literal(text)
    assert not any(unicodedata.category(c) in UNSAFE for c in shown)
    kept = "".join(c for c in text if unicodedata.category(c) not in UNSAFE)
    assert "".join(c for c in shown if not c.isascii()) == "".join(c for c in kept if not c.isascii())
    shown.encode("utf-8")  # always writable


def _write_hostile_metadata(ticket: Path, tmp_path: Path) -> Path:
    """The real ticket with every hostile character in a metadata string that inspect shows (created_by) and in a
    key of a JSON field (method), as a writer of JSON would escape them (\\ud800 for a lone surrogate)."""
    raw = ticket.read_bytes()
    meta = split(raw)[0]["__metadata__"]
    created = json.loads(meta["created_by"])
    created["ticketcli"] = f"1{INVISIBLE}{OTHERS}2"
    method = json.loads(meta["method"])
    method[f"note{OTHERS}"] = INVISIBLE
    path = tmp_path / "hostile-text.safetensors"
    path.write_bytes(edit_metadata(raw, created_by=json.dumps(created), method=json.dumps(method)))
    return path


def test_inspect_escapes_every_unsafe_character_of_a_ticket(ticket, tmp_path):
    run = cli("inspect", str(_write_hostile_metadata(ticket, tmp_path)), env={"COLUMNS": "1000"})
    assert_clean(run, 0, prefix=None)
    assert not any(unicodedata.category(c) in UNSAFE for c in run.stdout if c != "\n")
    for c in (c for c in INVISIBLE + OTHERS if c != " "):
        escape = (
            f"\\x{ord(c):02x}" if ord(c) < 0x100 else f"\\u{ord(c):04x}" if ord(c) < 0x10000 else f"\\U{ord(c):08x}"
        )
        assert escape in run.stdout, escape


def test_inspect_json_stays_valid_utf8_and_strict(ticket, tmp_path):
    run = cli("inspect", "--json", str(_write_hostile_metadata(ticket, tmp_path)))
    assert_clean(run, 0, prefix=None)
    run.stdout.encode("utf-8")  # no lone surrogate: strict encoders and parsers accept the document

    def strict(pairs):  # a lone surrogate escape would decode to a lone surrogate: refuse it like strict parsers
        for k, v in pairs:
            for s in (k, v) if isinstance(v, str) else (k,):
                s.encode("utf-8")
        return dict(pairs)

    doc = json.loads(run.stdout, object_pairs_hook=strict)
    assert doc["created_by"]["ticketcli"].startswith("1\u200e")  # the other characters are data, kept as they were
    assert "\ufffd" in doc["created_by"]["ticketcli"]  # the lone surrogates, replaced


@pytest.mark.slow
def test_an_undecodable_file_name_is_one_escaped_line(tmp_path):
    """A path with bytes that are not UTF-8 becomes lone surrogates in Python (surrogateescape): the error line
    shows them escaped instead of failing to print."""
    name = os.fsdecode(b"caf\xe9\xff.safetensors")
    run = child("inspect", str(tmp_path / name))
    assert_clean(run, 2, contains="\\udce9\\udcff")
