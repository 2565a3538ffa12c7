"""Own every file you write: an auxiliary file (OUT.ckpt, the sweep's plot, its records and tickets, its note)
obeys the rule of --out: absent, or replaced only with --force; a run removes only what it created (created
exclusively, then tracked by identity); whatever records ownership cannot be forged by whoever hands over the
folder; a read-only or full destination fails at the start, before the work."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
from hostile import QUICK_SWEEP as SWEEP
from hostile import REPO, assert_clean, cli, snapshot

from ticketcli.errors import UsageError
from ticketcli.files import atomic
from ticketcli.files.atomic import Owned, write_owned
from ticketcli.files.checkpoint import Checkpointer
from ticketcli.runs import extract as runs_extract
from ticketcli.sweep import outputs as sweep_outputs

EXTRACT = [
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
]


@pytest.fixture
def no_work(monkeypatch):
    """Fail the case if an extraction starts: the refusal must come before the work."""

    def started(*args, **kwargs):
        raise AssertionError("the work started before the destination was checked")

    monkeypatch.setattr(runs_extract, "run_extraction", started)


# ---- OUT.ckpt ----


def test_a_users_file_at_the_checkpoint_path_is_neither_replaced_nor_removed(tmp_path, no_work):
    out, ckpt = tmp_path / "o.safetensors", tmp_path / "o.safetensors.ckpt"
    ckpt.write_text("notes\n")
    before = snapshot(ckpt, out)
    run = cli(*EXTRACT, "--checkpoint-every", "1", "--out", str(out))
    assert_clean(run, 2, contains="already exists", unchanged=before, folder=tmp_path)
    assert "--resume" in run.stderr and "--force" in run.stderr


def test_resume_from_a_users_file_refuses_it_and_keeps_it(tmp_path):
    out, ckpt = tmp_path / "o.safetensors", tmp_path / "o.safetensors.ckpt"
    ckpt.write_text("notes\n")
    before = snapshot(ckpt, out)
    run = cli(*EXTRACT, "--checkpoint-every", "1", "--resume", "--out", str(out))
    assert_clean(run, 2, unchanged=before, folder=tmp_path, peak=512 << 20)


def test_a_run_removes_its_own_checkpoint_and_force_replaces_a_users(tmp_path):
    out, ckpt = tmp_path / "o.safetensors", tmp_path / "o.safetensors.ckpt"
    ckpt.write_text("notes\n")
    run = cli(*EXTRACT, "--checkpoint-every", "1", "--force", "--out", str(out))
    assert run.exit_code == 0, run.stderr
    assert out.is_file() and not ckpt.exists()  # replaced with --force: then it was this run's, and removed


def test_the_checkpointer_removes_and_replaces_only_the_file_it_wrote(tmp_path):
    path = tmp_path / "o.ckpt"
    saver = Checkpointer(path, every=1, identity={"a": 1}, resume=False)
    saver.save({"epoch": 1})
    saver.save({"epoch": 2})  # its own file: replaced without --force
    assert saver.owned is not None and saver.owned.still_ours()
    path.unlink()
    path.write_text("the user's file, made after the run wrote its own")
    with pytest.raises(UsageError, match="already exists"):
        saver.save({"epoch": 3})
    saver.remove()
    assert path.read_text().startswith("the user's file")


# ---- exclusive creation and identity ----


def test_write_owned_never_replaces_a_file_it_does_not_own(tmp_path):
    path = tmp_path / "f"
    first = write_owned(path, b"one")
    assert first == Owned.of(path, os.stat(path)) and first.still_ours()
    second = write_owned(path, b"two", owned=first)  # its own: replaced
    assert path.read_bytes() == b"two" and not first.still_ours() and second.still_ours()
    forged = [
        Owned(**{**second.to_dict(), "ino": second.ino + 1}),
        Owned(**{**second.to_dict(), "ctime_ns": second.ctime_ns - 1}),
        Owned(**{**second.to_dict(), "path": str(tmp_path / "other")}),
        first,
    ]
    for claim in forged:
        with pytest.raises(UsageError, match="already exists"):
            write_owned(path, b"three", owned=claim)
        assert path.read_bytes() == b"two"
        assert not claim.remove() and path.exists()
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]


def test_a_name_taken_after_the_check_is_not_replaced(tmp_path, monkeypatch):
    """Another process creates the file between the destination check and the rename: the exclusive link fails."""
    path = tmp_path / "f"
    real = atomic.check_destination

    def then_someone_writes(p, **kwargs):
        real(p, **kwargs)
        Path(p).write_bytes(b"theirs")

    monkeypatch.setattr(atomic, "check_destination", then_someone_writes)
    with pytest.raises(UsageError, match="already exists"):
        write_owned(path, b"ours")
    assert path.read_bytes() == b"theirs"
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]


@pytest.mark.parametrize(
    "entry",
    [None, [], {"path": "x"}, {"path": "/x", "dev": True, "ino": 1, "size": 1, "mtime_ns": 1, "ctime_ns": 1}],
)
def test_an_identity_record_is_typed(entry):
    assert Owned.from_dict(entry) is None


# ---- sweep-k's note ----


def forged_notes(png: Path) -> dict[str, bytes]:
    """Notes a sender can write for the user's file: they know its path and bytes, even its size and mtime, but
    not its device, inode and ctime."""
    st = os.stat(png)
    digest = hashlib.sha256(png.read_bytes()).hexdigest()
    guess = {
        "path": os.path.abspath(png),
        "dev": 1,
        "ino": 1,
        "size": st.st_size,
        "mtime_ns": st.st_mtime_ns,
        "ctime_ns": st.st_mtime_ns,
    }
    return {
        "version 1 (path and sha256)": json.dumps({str(png.resolve()): digest}).encode(),
        "guessed identity": json.dumps(
            {"format": sweep_outputs.FORMAT, "files": {guess["path"]: {**guess, "sha256": digest}}}
        ).encode(),
        "deep": b"[" * 100000 + b"]" * 100000,
    }


@pytest.mark.parametrize("kind", ["version 1 (path and sha256)", "guessed identity", "deep"])
def test_a_forged_note_does_not_let_sweep_k_replace_a_users_plot(kind, tmp_path, no_work):
    png, folder = tmp_path / "precious.png", tmp_path / "handed-over"
    png.write_bytes(b"\x89PNG the user's own picture")
    folder.mkdir()
    (folder / sweep_outputs.OUTPUTS).write_bytes(forged_notes(png)[kind])
    before = snapshot(png)
    run = cli(*SWEEP, "--out-dir", str(folder), "--plot", str(png))
    assert_clean(run, 2, contains="already exists", unchanged=before, folder=tmp_path, peak=256 << 20)


def test_a_users_file_at_a_run_name_in_out_dir_is_not_replaced_without_force(tmp_path, no_work):
    folder = tmp_path / "runs"
    folder.mkdir()
    mine = folder / "seed0-random.json"
    mine.write_text('{"my": "notes"}')
    before = snapshot(mine)
    run = cli(*SWEEP, "--out-dir", str(folder))
    assert_clean(run, 2, contains="seed0-random.json", unchanged=before, peak=256 << 20)
    assert "--force" in run.stderr


def test_a_note_that_is_not_sweep_ks_is_replaced_only_with_force(tmp_path, no_work):
    folder = tmp_path / "runs"
    folder.mkdir()
    note = folder / sweep_outputs.OUTPUTS
    note.write_text("my own notes, by chance under this name")
    before = snapshot(note)
    assert_clean(cli(*SWEEP, "--out-dir", str(folder)), 2, contains="--force", unchanged=before, peak=256 << 20)


# ---- read-only and full destinations fail at the start ----


def test_an_unwritable_folder_is_refused_before_the_work(tmp_path, monkeypatch, no_work):
    """Whatever makes the folder refuse a new file (here EROFS from the kernel, simulated for the probe)."""
    real = atomic.tempfile.mkstemp

    def read_only(*args, dir=None, **kwargs):
        if dir is not None and Path(dir) == tmp_path:
            raise OSError(30, "Read-only file system")
        return real(*args, dir=dir, **kwargs)

    monkeypatch.setattr(atomic.tempfile, "mkstemp", read_only)
    assert_clean(cli(*EXTRACT, "--out", str(tmp_path / "o.safetensors")), 2, contains="Read-only file system")


def test_low_free_space_is_a_warning_naming_the_need(tmp_path, monkeypatch):
    monkeypatch.setattr(atomic.shutil, "disk_usage", lambda p: SimpleNamespace(total=10, used=0, free=10))
    message = atomic.space_shortfall(tmp_path, 1 << 20)
    assert message is not None and "10 bytes free" in message and "1.0 MiB" in message
    assert atomic.space_shortfall(tmp_path, 5) is None


@pytest.mark.parametrize("command", ["extract", "sweep-k"])
def test_each_writer_warns_of_low_free_space_before_the_work(command, tmp_path, monkeypatch, no_work):
    """extract (ticket, checkpoint) and sweep-k (a ticket and record per configuration) compare the free space of
    their destination with what they will write before any work starts: one warning line, then the work."""
    monkeypatch.setattr(atomic.shutil, "disk_usage", lambda p: SimpleNamespace(total=10, used=0, free=10))
    dest = ["--out", str(tmp_path / "o.safetensors")] if command == "extract" else ["--out-dir", str(tmp_path)]
    run = cli(*(EXTRACT if command == "extract" else SWEEP), *dest)
    lines = run.stderr.splitlines()
    warnings = [line for line in lines if line.startswith("warning:")]
    assert len(warnings) == 1 and "10 bytes free" in warnings[0], run.stderr
    # no_work stopped the run where its work began (an internal error, 70): the warning came before it
    assert run.exit_code == 70 and "the work started" in lines[-1] and lines.index(warnings[0]) < len(lines) - 1


def _in_small_fs(tmp_path: Path, setup: str, *args: str) -> subprocess.CompletedProcess:
    """`ticket ARGS` in a private mount namespace where tmp_path/fs is a 256 KiB tmpfs prepared by `setup`."""
    fs = tmp_path / "fs"
    fs.mkdir()
    script = f'mount -t tmpfs -o size=256k tmpfs "{fs}" && {setup} && exec "$@"'
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.run(
        ["unshare", "-m", "sh", "-c", script, "sh", sys.executable, "-m", "ticketcli", *args],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )


def _can_mount(tmp_path: Path) -> bool:
    if shutil.which("unshare") is None:
        return False
    probe = subprocess.run(
        ["unshare", "-m", "sh", "-c", f'mount -t tmpfs tmpfs "{tmp_path}"'], capture_output=True, timeout=30
    )
    return probe.returncode == 0


@pytest.mark.parametrize(
    "setup, reason",
    [
        ('mount -o remount,ro "$FS"', "Read-only file system"),
        ('(dd if=/dev/zero of="$FS/fill" bs=4k 2>/dev/null || true)', "No space left on device"),
    ],
    ids=["read-only", "full"],
)
@pytest.mark.slow
def test_a_real_read_only_or_full_file_system_fails_at_the_start(setup, reason, tmp_path):
    if not _can_mount(tmp_path):
        pytest.skip("needs unshare and mount (root or user namespaces) to make a small file system")
    fs = tmp_path / "fs"
    out = fs / "o.safetensors"
    res = _in_small_fs(tmp_path, setup.replace("$FS", str(fs)), *EXTRACT, "--epochs", "50", "--out", str(out))
    lines = [line for line in res.stderr.splitlines() if line.strip()]
    assert res.returncode == 2, res.stderr[-2000:]
    assert len(lines) == 1 and lines[0].startswith("error:") and reason in lines[0], res.stderr[-2000:]
