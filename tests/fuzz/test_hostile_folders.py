"""Folders and globs are untrusted too. A quoted recursive glob (`g/**/*.safetensors`, expanded by the tool) never
descends into a symlinked folder, so no layout of links makes it loop or list a ticket twice; a bad entry of a
folder (a symlink loop, a dangling link, a FIFO, a file that cannot be read) is one failed row, never a refusal of
the whole folder; what one expansion looks through is bounded. `compare` over many tickets bounds its pairs (each
against the first, said in one line) and the files it holds open at once."""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest
from hostile import assert_clean, child, cli

from ticketcli.errors import UsageError
from ticketcli.runs import folder as runs_folder
from ticketcli.ticketfile import layout as layout_io

ALL_PAIRS = 8  # up to this many tickets compare compares every pair (docs/json.md)
REAL = ("a", "sub/b", "sub/deep/c", "other/d")  # the tickets of the tree, each in a real folder

LINKS: dict[str, list[tuple[str, str]]] = {  # links (where, to what) a recursive glob would follow round and round
    "two links to .": [("l1", "."), ("l2", ".")],
    "a link to the parent": [("sub/up", "..")],
    "a deep link to an ancestor": [("sub/deep/top", "../..")],
    "an absolute link to the tree": [("other/abs", "{root}")],
    "links into each other's folders": [("sub/x", "../other"), ("other/y", "../sub"), ("sub/deep/z", "../../sub")],
}


def tree(ticket: Path, root: Path, links: list[tuple[str, str]]) -> list[str]:
    for rel in REAL:
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(ticket, root / f"{rel}.safetensors")
    for where, to in links:
        (root / where).symlink_to(to.format(root=root))
    return sorted(f"{rel}.safetensors" for rel in REAL)


@pytest.mark.parametrize("case", LINKS)
@pytest.mark.parametrize("relative", [False, True], ids=["under-a-folder", "from-the-cwd"])
def test_a_recursive_glob_never_follows_a_symlinked_folder(ticket, tmp_path, case, relative):
    root = tmp_path / "g"
    expected = tree(ticket, root, LINKS[case])
    pattern = "**/*.safetensors" if relative else f"{root}/**/*.safetensors"
    run = child("inspect", pattern, "--json", cwd=root, timeout=30, warm=True)
    assert run.exit_code == 0, run.stderr[-2000:]
    listed = [t["ticket"] for t in json.loads(run.stdout)["tickets"]]
    assert sorted(str(Path(t).relative_to(root)) if not relative else t for t in listed) == expected


def test_a_glob_through_a_symlinked_folder_named_in_the_pattern_still_matches(ticket, tmp_path):
    root = tmp_path / "g"
    tree(ticket, root, [("runs", "sub")])  # a link the pattern names (not reached by **) is followed, as by glob
    assert runs_folder.ticket_paths([root / "runs" / "*.safetensors"]) == [root / "runs" / "b.safetensors"]
    everything = [root / f"{rel}.safetensors" for rel in ("a", "other/d", "sub/b", "sub/deep/c")]
    assert runs_folder.ticket_paths([root / "**"]) == everything  # a last ** matches the files below, as in glob


def _loop(p: Path) -> None:
    p.symlink_to(p.name)


def _two_link_loop(p: Path) -> None:
    p.symlink_to("other.link")
    (p.parent / "other.link").symlink_to(p.name)


def _unreadable(p: Path) -> None:
    p.write_bytes(b"\x07" * 64)  # refused by its content when run as root, by its permission otherwise
    p.chmod(0)


BAD: dict[str, Callable[[Path], None]] = {
    "a symlink loop": _loop,
    "a loop of two links": _two_link_loop,
    "a dangling link": lambda p: p.symlink_to("nowhere/at/all"),
    "a FIFO": lambda p: os.mkfifo(p),
    "a link to a FIFO": lambda p: (os.mkfifo(p.parent / "fifo"), p.symlink_to("fifo")),
    "an unreadable file": _unreadable,
}


@pytest.mark.parametrize("case", BAD)
def test_a_bad_entry_is_one_failed_row_of_the_folder(ticket, tmp_path, case):
    folder = tmp_path / "tickets"
    folder.mkdir()
    for name in ("a", "c"):
        shutil.copyfile(ticket, folder / f"{name}.safetensors")
    BAD[case](folder / "b.safetensors")
    run = cli("inspect", str(folder), "--json")
    assert_clean(run, 1, contains="1 of 3 tickets failed validation: b.safetensors (invalid)")
    rows = {Path(t["ticket"]).name: t for t in json.loads(run.stdout)["tickets"]}
    assert sorted(rows) == ["a.safetensors", "b.safetensors", "c.safetensors"]
    assert rows["b.safetensors"]["integrity"] == "invalid" and rows["b.safetensors"]["error"]
    assert rows["a.safetensors"]["integrity"] == rows["c.safetensors"]["integrity"] == "ok"


@pytest.mark.parametrize("case", ["a symlink loop", "a FIFO"])
def test_evaluate_dir_lists_a_bad_entry_as_one_error_row(ticket, tmp_path, case):
    folder = tmp_path / "tickets"
    folder.mkdir()
    shutil.copyfile(ticket, folder / "a.safetensors")
    BAD[case](folder / "b.safetensors")
    run = cli("evaluate", str(folder), "--json", "--quiet", "--device", "cpu")
    assert_clean(run, 1, contains="1 of 2 tickets failed: b.safetensors (error)")
    rows = json.loads(run.stdout)["tickets"]
    assert [Path(t["ticket"]).name for t in rows] == ["a.safetensors", "b.safetensors"]
    assert rows[1]["error"] and "metrics" in rows[0]


@pytest.mark.parametrize("where", ["folder", "glob"])
def test_what_one_expansion_looks_through_is_bounded(tmp_path, monkeypatch, where):
    monkeypatch.setattr(runs_folder, "MAX_ENTRIES", 50)
    for i in range(60):
        (tmp_path / f"{i}.json").write_bytes(b"")
    named = tmp_path if where == "folder" else tmp_path / "**" / "*.safetensors"
    with pytest.raises(UsageError, match="more than 50 folder entries"):
        runs_folder.ticket_paths([named])


def _count_open(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """[most ticket files open at once], kept up to date as compare opens them."""
    opened: list = []
    peak = [0]
    real = layout_io.open_file

    def counting(path: Path):
        f, size = real(path)
        opened.append(f)
        peak[0] = max(peak[0], sum(not g.closed for g in opened))
        return f, size

    monkeypatch.setattr(layout_io, "open_file", counting)
    return peak


@pytest.mark.parametrize("n", [ALL_PAIRS + 1, 23, 150])
def test_compare_beyond_a_count_compares_each_ticket_with_the_first_and_says_so(ticket, tmp_path, monkeypatch, n):
    paths = [tmp_path / f"t{i:03}.safetensors" for i in range(n)]
    for p in paths:
        shutil.copyfile(ticket, p)
    peak = _count_open(monkeypatch)
    run = cli("compare", *map(str, paths), "--json")
    assert_clean(run, 0, contains=f"{n} tickets: each compared with the first", prefix="warning:")
    doc = json.loads(run.stdout)
    assert doc["reference"] == 0 and len(doc["tickets"]) == n
    assert [(p["a"], p["b"]) for p in doc["pairs"]] == [(0, j) for j in range(1, n)]
    assert doc["matrix"]["jaccard"] == [[1.0] * n] and doc["matrix"]["same_init"] == [[True] * n]
    assert peak[0] <= 2


@pytest.mark.parametrize("n", [2, ALL_PAIRS])
def test_compare_up_to_the_count_compares_every_pair_silently(ticket, tmp_path, monkeypatch, n):
    paths = [tmp_path / f"t{i}.safetensors" for i in range(n)]
    for p in paths:
        shutil.copyfile(ticket, p)
    peak = _count_open(monkeypatch)
    run = cli("compare", *map(str, paths), "--json")
    assert_clean(run, 0, prefix=None)
    doc = json.loads(run.stdout)
    assert "reference" not in doc and len(doc["pairs"]) == n * (n - 1) // 2 and len(doc["matrix"]["jaccard"]) == n
    assert peak[0] <= ALL_PAIRS


def test_compare_beyond_the_count_refuses_another_model_with_one_line(ticket, tmp_path):
    paths = [tmp_path / f"t{i:02}.safetensors" for i in range(ALL_PAIRS + 3)]
    for p in paths:
        shutil.copyfile(ticket, p)
    paths[-1].write_bytes(b"\x07" * 64)
    assert_clean(cli("compare", *map(str, paths)), 2, contains=str(paths[-1]))
