"""Hostile text files for `ticket drift --text`: a huge (sparse) file, a binary one, an empty one, invalid UTF-8, a
text too short for one training and one validation block, too many distinct characters, a directory, a FIFO (would
hang) or /dev/zero (endless) under the file's name, or no file at all: each ends with exit code 2 and one `error:`
line, never a traceback, and never reads what the file only declares (in-process peak < 64 MiB)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hostile import assert_clean, cli

from ticketcli.text import MAX_TEXT_BYTES, MAX_VOCAB

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
    monkeypatch.setattr("ticketcli.text.FORTUNES_SYSTEM_DIR", str(tmp_path / "nowhere"))
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
