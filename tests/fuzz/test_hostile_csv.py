"""Hostile CSV. `ticket inspect DIR --csv` is opened in spreadsheets, which run a cell beginning with = + - @ (or a
tab or carriage return) as a formula. A folder of crafted tickets (file names, method names, model specs, refused
files whose error line quotes a crafted name) is listed and read back with the csv module: every text column is
neutralised (a leading '), every numeric column holds a number, the method and integrity columns only their fixed
vocabularies, the digest only hex; and every column is one of those kinds."""

from __future__ import annotations

import csv
import io
from pathlib import Path

import pytest
from harness import edit_json
from hostile import cli
from hypothesis import given
from hypothesis import strategies as st

from ticketcli.methods.registry import METHODS
from ticketcli.report.tables import CSV_COLUMNS, CSV_LM_COLUMNS
from ticketcli.report.values import CSV_NUMBERS, CSV_TEXT, CSV_VOCABULARY, csv_cell

DANGEROUS = ("=", "+", "-", "@", "\t", "\r", "\n", "\uff1d", "\uff0b", "\uff0d", "\uff20")
PAYLOADS = ['=HYPERLINK("http://x","y")', "+1+2", "-2+3", "@SUM(A1)", "\tx", "\rx", "=cmd|' /C calc'!A0"]
INTEGRITY = ("ok", "modified", "not recorded", "invalid")


def safe_file_name(payload: str) -> str:
    return payload.replace("/", "%")  # a file name holds no slash


@pytest.fixture(scope="module")
def folder(ticket: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    raw = ticket.read_bytes()
    d = tmp_path_factory.mktemp("csv")
    for i, payload in enumerate(PAYLOADS):
        name = safe_file_name(payload)
        (d / f"{name}.safetensors").write_bytes(raw)  # a crafted name of an intact ticket
        (d / f"{name} refused.safetensors").write_bytes(b"junk")  # its error line begins with the crafted name
        (d / f"method{i}.safetensors").write_bytes(edit_json(raw, "method", lambda m, p=payload: m.update(name=p)))
        (d / f"model{i}.safetensors").write_bytes(edit_json(raw, "model", lambda m, p=payload: m.update(spec=p)))
    return d


def rows(folder: Path, monkeypatch: pytest.MonkeyPatch) -> list[dict[str, str]]:
    monkeypatch.chdir(folder)  # relative paths: the ticket and error cells begin with the crafted names
    r = cli("inspect", ".", "--csv")
    assert r.exit_code == 1, r.stderr  # the junk files fail validation
    table = list(csv.reader(io.StringIO(r.stdout)))
    assert table[0] == list(CSV_COLUMNS)
    return [dict(zip(table[0], row, strict=True)) for row in table[1:]]


def test_every_cell_of_a_crafted_folder_is_safe_in_a_spreadsheet(folder, monkeypatch):
    listed = rows(folder, monkeypatch)
    assert len(listed) == 4 * len(PAYLOADS)
    for row in listed:
        for column in CSV_TEXT:
            assert not row[column].startswith(DANGEROUS), (column, row[column])
        for column in CSV_NUMBERS:
            if row.get(column):  # a language model's columns only where a listed ticket is one (CSV_LM_COLUMNS)
                float(row[column])  # a number we formatted; a leading '-' would be a negative number, not text
        assert row["method"] in (*METHODS.names(), "unknown", "")
        assert row["integrity"] in INTEGRITY
        assert row["masks_sha256"] == "" or all(c in "0123456789abcdef" for c in row["masks_sha256"])
    names = {row["ticket"] for row in listed}
    assert "'" + safe_file_name(PAYLOADS[0]) + ".safetensors" in names  # neutralised, not dropped: still readable
    assert {row["model"] for row in listed} >= {"'" + PAYLOADS[0], "'-2+3"}
    assert "unknown" in {row["method"] for row in listed}  # a crafted method is never passed on as text
    errors = [row["error"] for row in listed if row["error"]]
    # each begins with its crafted file name: neutralised, or escaped (a tab reads \x09)
    assert len(errors) == len(PAYLOADS) and all(e.startswith(("'", "\\")) for e in errors), errors


def test_every_csv_column_is_text_a_number_or_a_vocabulary():
    kinds = (CSV_TEXT, CSV_NUMBERS, CSV_VOCABULARY)
    assert sorted(c for kind in kinds for c in kind) == sorted((*CSV_COLUMNS, *CSV_LM_COLUMNS))
    with pytest.raises(ValueError):
        csv_cell("a new column", "=1")  # a column nobody classified is an error, not free text


def test_numbers_stay_numbers_and_vocabularies_refuse_free_text():
    assert csv_cell("seed", -3) == "-3" and csv_cell("achieved_sparsity", -0.5) == "-0.5"
    assert csv_cell("seed", "=1+1") == "" and csv_cell("file_bytes", True) == ""
    assert csv_cell("method", "=1+1") == "unknown" and csv_cell("method", "augmented") == "augmented"
    assert csv_cell("integrity", "=1+1") == "unknown"
    assert csv_cell("masks_sha256", "=" + "0" * 63) == ""


@given(
    column=st.sampled_from((*CSV_COLUMNS, *CSV_LM_COLUMNS)),
    text=st.one_of(st.text(max_size=20), st.tuples(st.sampled_from(DANGEROUS), st.text(max_size=20)).map("".join)),
)
def test_no_text_of_any_column_begins_a_formula(column, text):
    assert not csv_cell(column, text).startswith(DANGEROUS)
