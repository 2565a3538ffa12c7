"""Nothing clobbered: every file a command writes (--out, --plot, OUT.ckpt) replaces only a regular file, and only
with --force. A FIFO, a device (/dev/null), a directory, or a symlink to any of them is refused with one line and
exit 2 even with --force, and is still there, unchanged, afterwards. A symlink to a regular file is replaced as a
link: the file it pointed to is never written through."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest
from hostile import assert_clean, cli, snapshot

FAST_EXTRACT = [
    "--method",
    "random",
    "--dataset",
    "digits",
    "--model",
    "mlp:64-13-10",
    "--n-extract",
    "100",
    "--n-val",
    "50",
    "--quiet",
    "--device",
    "cpu",
]
WRITERS = {  # every option that names a file a command writes
    "extract --out": lambda t, dest: ["extract", *FAST_EXTRACT, "--out", dest],
    "export --out": lambda t, dest: ["export", t, "--format", "masks", "--out", dest],
    "train-weak --out": lambda t, dest: ["train-weak", t, "--epochs", "1", "--quiet", "--device", "cpu", "--out", dest],
    "train-weak --plot": lambda t, dest: [
        "train-weak",
        t,
        "--epochs",
        "1",
        "--quiet",
        "--device",
        "cpu",
        "--plot",
        dest,
    ],
    "sweep-k --plot": lambda t, dest: [
        "sweep-k",
        "--dataset",
        "digits",
        "--seeds",
        "0",
        "--epochs",
        "1",
        "--layerwise",
        "0",
        "--densities",
        "0.5",
        "--quiet",
        "--plot",
        dest,
    ],
    "drift --plot": lambda t, dest: [
        "drift",
        "--dataset",
        "digits",
        "--model",
        "mlp:64-16-10",
        "--steps",
        "2",
        "--quiet",
        "--plot",
        dest,
    ],
}


@pytest.fixture(autouse=True)
def never_replace_a_special_file(monkeypatch):
    """A safety net, so that a regression fails the test instead of replacing /dev/null on the machine (as root)."""
    real = os.replace

    def guarded(src, dst, *args, **kwargs):
        mode = os.stat(dst).st_mode if os.path.exists(dst) else stat.S_IFREG  # absent or a dangling link: fine
        if not stat.S_ISREG(mode):
            raise AssertionError(f"os.replace over the special file {dst}")
        return real(src, dst, *args, **kwargs)

    monkeypatch.setattr(os, "replace", guarded)


def special(kind: str, folder: Path, suffix: str = "") -> Path:
    """A destination that is not a regular file, its name ending in `suffix` (a ticket's writers take only
    .safetensors names, so the special file itself is what they must refuse)."""
    target = folder / f"out.png{suffix}"
    if kind == "dev-null":
        return Path(os.devnull)
    fifo, directory = folder / f"fifo{suffix}", folder / f"dir{suffix}"
    if kind in ("fifo", "link-to-fifo"):
        os.mkfifo(fifo)
    if kind == "fifo":
        return fifo
    if kind in ("directory", "link-to-directory"):
        directory.mkdir()
    if kind == "directory":
        return directory
    target.symlink_to({"link-to-dev-null": os.devnull, "link-to-fifo": fifo, "link-to-directory": directory}[kind])
    return target


def state(path: Path) -> tuple:
    """What the destination is (kind, device and inode, link target): the same before and after."""
    st = os.lstat(path)
    link = os.readlink(path) if stat.S_ISLNK(st.st_mode) else None
    return stat.S_IFMT(st.st_mode), st.st_rdev, st.st_ino, link


TICKET_WRITERS = ("extract --out", "train-weak --out")
KINDS = ["fifo", "dev-null", "link-to-dev-null", "link-to-fifo", "directory", "link-to-directory"]


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("writer", list(WRITERS))
def test_force_never_replaces_anything_but_a_regular_file(writer, kind, ticket, tmp_path):
    ticket_name = writer in TICKET_WRITERS  # written as safetensors: only under a .safetensors name
    dest = special(kind, tmp_path, ".safetensors" if ticket_name else "")
    before, listing = state(dest), sorted(p.name for p in tmp_path.iterdir())
    run = cli(*WRITERS[writer](str(ticket), str(dest)), "--force")
    reason = "a directory" if "directory" in kind else "not a regular file"
    if ticket_name and dest.suffix != ".safetensors":  # /dev/null: refused for its name before anything else
        reason = "must end in .safetensors"
    assert_clean(run, 2, contains=reason, folder=tmp_path)
    assert state(dest) == before and sorted(p.name for p in tmp_path.iterdir()) == listing


@pytest.mark.parametrize("kind", KINDS)
def test_without_force_a_special_file_is_refused_too(kind, ticket, tmp_path):
    dest = special(kind, tmp_path)
    before = state(dest)
    assert_clean(cli(*WRITERS["export --out"](str(ticket), str(dest))), 2, folder=tmp_path)
    assert state(dest) == before


def test_force_replaces_a_symlink_to_a_regular_file_as_a_link(ticket, tmp_path):
    target, link = tmp_path / "kept.bin", tmp_path / "out.safetensors"
    target.write_bytes(b"not to be touched")
    link.symlink_to(target)
    run = cli(*WRITERS["export --out"](str(ticket), str(link)), "--force")
    assert run.exit_code == 0 and run.exception is None, run.stderr
    assert not link.is_symlink() and link.read_bytes()[:8] != b"not to b"  # a new regular file took its name
    assert target.read_bytes() == b"not to be touched"
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]


def test_without_force_a_symlink_to_a_regular_file_is_left_alone(ticket, tmp_path):
    target, link = tmp_path / "kept.bin", tmp_path / "out.safetensors"
    target.write_bytes(b"not to be touched")
    link.symlink_to(target)
    before = snapshot(target)
    assert_clean(
        cli(*WRITERS["export --out"](str(ticket), str(link))),
        2,
        contains="already exists",
        unchanged=before,
        folder=tmp_path,
    )
    assert link.is_symlink()


@pytest.mark.parametrize("force", [False, True])
def test_a_dangling_symlink_counts_as_existing(force, ticket, tmp_path):
    link = tmp_path / "out.safetensors"
    link.symlink_to(tmp_path / "nowhere")
    run = cli(*WRITERS["export --out"](str(ticket), str(link)), *(["--force"] if force else []))
    if force:
        assert run.exit_code == 0 and link.is_file() and not link.is_symlink(), run.stderr
        assert not (tmp_path / "nowhere").exists()  # the link was replaced, not followed
    else:
        assert_clean(run, 2, contains="already exists", folder=tmp_path)
        assert link.is_symlink()


@pytest.mark.parametrize("writer", ["extract --out", "export --out"])
def test_a_regular_file_without_force_is_kept(writer, ticket, tmp_path):
    dest = tmp_path / "out.safetensors"
    dest.write_bytes(b"keep me")
    assert_clean(
        cli(*WRITERS[writer](str(ticket), str(dest))),
        2,
        contains="already exists",
        unchanged=snapshot(dest),
        folder=tmp_path,
    )


def test_a_fifo_at_the_checkpoint_path_is_refused(tmp_path):
    out = tmp_path / "t.safetensors"
    os.mkfifo(tmp_path / "t.safetensors.ckpt")
    run = cli(
        "extract",
        "--method",
        "edge-popup",
        "--dataset",
        "digits",
        "--model",
        "mlp:64-13-10",
        "--n-extract",
        "100",
        "--n-val",
        "50",
        "--epochs",
        "2",
        "--quiet",
        "--device",
        "cpu",
        "--checkpoint-every",
        "1",
        "--out",
        str(out),
    )
    assert_clean(run, 2, contains="a FIFO", folder=tmp_path)
    assert not out.exists() and stat.S_ISFIFO(os.lstat(tmp_path / "t.safetensors.ckpt").st_mode)
