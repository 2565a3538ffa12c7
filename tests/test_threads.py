"""--threads N and the API's threads=: the run really computes with N torch threads (read inside the run), reports
N in --json and restores the previous count afterwards; without it torch's own count stays. Bad values are one-line
usage errors (exit 2) from a flag, a config file or the API. Pools of workers never ask for more threads than the
process may use cores: one thread per worker by default, workers x threads refused above the cores."""

from __future__ import annotations

import json
from itertools import pairwise

import pytest
import torch
from typer.testing import CliRunner

import ticketcli as tc
from ticketcli.cli.app import app
from ticketcli.drift import run as drift_run
from ticketcli.errors import UsageError
from ticketcli.export import run as export
from ticketcli.runs import extract as runs_extract
from ticketcli.runtime import threads as torch_threads

runner = CliRunner()
TINY = ["--dataset", "digits", "--model", "mlp:64-16-10", "--n-extract", "200", "--n-val", "100"]
TINY += ["--epochs", "1", "--batch-size", "64", "--quiet"]
API_TINY = dict(n_extract=200, n_val=100, batch_size=64, device="cpu", progress=False)


def other_count() -> int:
    """A thread count different from the current one, so that a run at it cannot pass by coincidence."""
    return 1 if torch.get_num_threads() > 1 else 2


@pytest.fixture()
def seen(monkeypatch) -> list[int]:
    """The torch thread count inside every extraction run (run_extraction, which extract and the API call)."""
    counts: list[int] = []
    original = runs_extract.run_extraction

    def spy(*args, **kwargs):
        counts.append(torch.get_num_threads())
        return original(*args, **kwargs)

    monkeypatch.setattr(runs_extract, "run_extraction", spy)
    return counts


@pytest.fixture(scope="module")
def ticket(tmp_path_factory) -> str:
    out = tmp_path_factory.mktemp("threads") / "t.safetensors"
    r = runner.invoke(app, ["extract", *TINY, "--out", str(out)])
    assert r.exit_code == 0, r.output
    return str(out)


def test_extract_runs_with_the_threads_given_and_reports_them(seen, tmp_path):
    before, n = torch.get_num_threads(), other_count()
    r = runner.invoke(app, ["extract", *TINY, "--threads", str(n), "--out", str(tmp_path / "t.safetensors"), "--json"])
    assert r.exit_code == 0, r.output
    assert seen == [n] and json.loads(r.stdout)["threads"] == n
    assert torch.get_num_threads() == before  # restored for whatever runs next in this process


@pytest.mark.parametrize(
    ("others", "model", "expected"),
    [
        (0.0, "mlp:64-512-512-10", 2),  # idle, a step worth sharing: every core
        (0.0, "mlp:64-16-10", 1),  # a step too small to share
        (1.4, "mlp:64-512-512-10", 1),  # one core busy elsewhere: the one that is free
        (5.0, "mlp:64-512-512-10", 1),  # more busy than cores: still one
    ],
)
def test_auto_takes_the_free_cores_and_the_work_per_step(seen, tmp_path, monkeypatch, others, model, expected):
    """--threads auto (the default, and the word itself): the count run with and reported, and how it was chosen."""
    monkeypatch.setattr(torch_threads, "cores", lambda: 2)
    monkeypatch.setattr(torch_threads, "others_running", lambda: others)
    before = torch.get_num_threads()
    args = ["extract", *TINY, "--model", model, "--out", str(tmp_path / "t.safetensors"), "--json"]
    for extra in ([], ["--threads", "auto"]):
        r = runner.invoke(app, [*args, *extra, "--force"])
        assert r.exit_code == 0, r.output
        doc = json.loads(r.stdout)
        assert doc["threads"] == expected and seen[-1] == expected
        params = sum(a * b for a, b in pairwise(int(w) for w in model.partition(":")[2].split("-")))
        assert doc["threads_auto"] == {"cores": 2, "others_running": others, "work_per_step": params * 64}
    assert torch.get_num_threads() == before


def test_auto_is_not_reported_when_threads_are_given(tmp_path):
    r = runner.invoke(app, ["extract", *TINY, "--threads", "1", "--out", str(tmp_path / "t.safetensors"), "--json"])
    assert r.exit_code == 0 and "threads_auto" not in json.loads(r.stdout), r.output


def test_choose_never_exceeds_the_cores_nor_goes_below_one(monkeypatch):
    monkeypatch.setattr(torch_threads, "cores", lambda: 8)
    for others in (0.0, 0.4, 3.0, 7.6, 8.0, 40.0):
        monkeypatch.setattr(torch_threads, "others_running", lambda o=others: o)
        for work in (None, 0, 1, torch_threads.GRAIN * 3, torch_threads.GRAIN * 100):
            c = torch_threads.choose(work)
            by_work = 8 if not work else max(1, work // torch_threads.GRAIN)
            assert c.threads == max(1, min(8 - round(others), by_work)), (others, work)


def test_others_running_is_read_in_this_process_cores(monkeypatch):
    """The machine's running tasks (less this one), scaled to the cores this process may use."""
    monkeypatch.setattr(torch_threads, "cores", lambda: 2)
    monkeypatch.setattr(torch_threads.os, "cpu_count", lambda: 8)
    monkeypatch.setattr(torch_threads, "SAMPLE_GAP_S", 0.0)
    reads = iter([5, 7, 5, 9, 6])
    real_open = open

    def fake_open(path, *a, **k):
        if path == "/proc/stat":
            import io

            return io.BytesIO(b"cpu  1 2 3\nprocs_running %d\nprocs_blocked 0\n" % next(reads))
        return real_open(path, *a, **k)

    monkeypatch.setattr("builtins.open", fake_open)
    assert torch_threads.others_running() == (5 - 1) * 2 / 8


def test_a_config_file_sets_threads_and_a_flag_overrides_it(seen, tmp_path):
    n = other_count()
    config = tmp_path / "run.toml"
    config.write_text(f"threads = {n}\n")
    out = str(tmp_path / "t.safetensors")
    r = runner.invoke(app, ["extract", *TINY, "--config", str(config), "--out", out, "--json"])
    assert r.exit_code == 0 and json.loads(r.stdout)["threads"] == n, r.output
    other = 3 - n  # 1 <-> 2
    r = runner.invoke(
        app, ["extract", *TINY, "--config", str(config), "--threads", str(other), "--out", out, "--force"]
    )
    assert r.exit_code == 0, r.output
    assert seen == [n, other]


def test_same_masks_whatever_the_threads(tmp_path):
    docs = []
    for n in (1, 2):
        out = tmp_path / f"t{n}.safetensors"
        assert runner.invoke(app, ["extract", *TINY, "--threads", str(n), "--out", str(out)]).exit_code == 0
        docs.append(tc.load(out).metadata["masks_sha256"])
    assert docs[0] == docs[1]


@pytest.mark.parametrize(
    "command",
    [
        ["evaluate", "{t}"],
        ["export", "{t}", "--format", "masked", "--out", "{d}/m.st"],
        ["train-weak", "{t}", "--epochs", "1", "--batch-size", "64"],
        ["drift", "--ticket", "{t}", "--steps", "2", "--log-every", "1", "--batch-size", "64", "--probe-size", "50"],
    ],
    ids=lambda c: c[0],
)
@pytest.mark.slow
def test_every_computing_command_takes_threads(command, ticket, tmp_path, monkeypatch):
    inside: list[int] = []

    def spy(original):
        def wrapped(*args, **kwargs):
            inside.append(torch.get_num_threads())
            return original(*args, **kwargs)

        return wrapped

    # every forward pass of a network; export (no BatchNorm here) runs none: its masking; drift: its run (its
    # networks run through functional calls)
    monkeypatch.setattr(torch.nn.Module, "__call__", spy(torch.nn.Module.__call__))
    monkeypatch.setattr(export, "masked_state", spy(export.masked_state))
    monkeypatch.setattr(drift_run, "run_drift", spy(drift_run.run_drift))
    before, n = torch.get_num_threads(), other_count()
    args = [a.format(t=ticket, d=tmp_path) for a in command]
    r = runner.invoke(app, [*args, "--threads", str(n), "--quiet", "--json"])
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["threads"] == n
    assert inside and set(inside) == {n}
    assert torch.get_num_threads() == before


@pytest.mark.parametrize("value", ["0", "-1", "4097", "two", "1.5"])
@pytest.mark.parametrize("command", ["extract", "evaluate", "export", "train-weak", "drift", "sweep-k"])
def test_bad_thread_counts_are_one_usage_line(command, value, ticket, tmp_path):
    args = {
        "extract": ["extract", *TINY, "--out", str(tmp_path / "t.safetensors")],
        "evaluate": ["evaluate", ticket],
        "export": ["export", ticket, "--format", "masks", "--out", str(tmp_path / "m.safetensors")],
        "train-weak": ["train-weak", ticket],
        "drift": ["drift", "--ticket", ticket, "--steps", "1"],
        "sweep-k": ["sweep-k", *TINY],
    }[command]
    r = runner.invoke(app, [*args, f"--threads={value}"])
    assert r.exit_code == 2, r.output
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error:") and "--threads" in lines[0], r.stderr
    assert not (tmp_path / "t.safetensors").exists() and not (tmp_path / "m.safetensors").exists()


@pytest.mark.parametrize("value", ["0", '"two"', '"2.5"', "true", "[2]"])
def test_bad_thread_counts_in_a_config_file(value, tmp_path):
    config = tmp_path / "run.toml"
    config.write_text(f"threads = {value}\n")
    for command in (["extract", *TINY, "--out", str(tmp_path / "t.safetensors")], ["sweep-k", *TINY]):
        r = runner.invoke(app, [*command, "--config", str(config)])
        assert r.exit_code == 2 and r.stderr.count("\n") == 1 and "threads" in r.stderr, r.output


def test_the_api_runs_with_the_threads_given_and_restores_them(ticket, monkeypatch):
    before, n = torch.get_num_threads(), other_count()
    per_epoch: list[int] = []
    t = tc.extract(
        "mlp:64-16-10",
        "digits",
        epochs=2,
        threads=n,
        **{**API_TINY, "progress": lambda s: per_epoch.append(torch.get_num_threads())},
    )
    assert per_epoch == [n, n] and torch.get_num_threads() == before
    assert t.evaluate(threads=n)["threads"] == n and torch.get_num_threads() == before
    monkeypatch.setattr(torch_threads, "others_running", lambda: 0.0)  # an idle machine: auto takes every core
    assert tc.load(ticket).evaluate()["threads"] == torch_threads.cores() and torch.get_num_threads() == before


@pytest.mark.parametrize("value", [0, -2, 5000, "two", True])
def test_the_api_refuses_bad_thread_counts(value, ticket):
    with pytest.raises(UsageError, match="threads"):
        tc.extract("mlp:64-16-10", "digits", epochs=1, threads=value, **API_TINY)
    with pytest.raises(UsageError, match="threads"):
        tc.load(ticket).evaluate(threads=value)


def test_pool_workers_share_the_cores_by_default(monkeypatch):
    monkeypatch.setattr(torch_threads, "cores", lambda: 4)
    assert torch_threads.per_worker(1, None) == 1 and torch_threads.per_worker(4, None) == 1
    assert torch_threads.per_worker(2, 2) == 2 and torch_threads.per_worker(1, 4) == 4
    for workers, threads in ((5, None), (3, 2), (1, 5)):
        with pytest.raises(UsageError, match="exceeds the 4 CPU cores"):
            torch_threads.per_worker(workers, threads)


def test_sweep_k_and_tradeoff_refuse_more_workers_than_cores():
    too_many = str(torch_threads.cores() + 1)
    drift = ["drift", "--dataset", "digits", "--model", "mlp:64-16-10", "--steps", "1", "--tradeoff", "0.5,0.6"]
    for args in (["sweep-k", *TINY, "--workers", too_many], [*drift, "--workers", too_many]):
        r = runner.invoke(app, args)
        assert r.exit_code == 2 and "exceeds the" in r.stderr and r.stderr.count("\n") == 1, r.output


def test_sweep_k_runs_each_configuration_with_its_threads(tmp_path):
    n = other_count()
    sweep = ["sweep-k", *TINY, "--seeds", "0", "--densities", "0.5", "--layerwise", "0", "--device", "cpu"]
    r = runner.invoke(app, [*sweep, "--threads", str(n), "--json"])
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    assert doc["threads"] == n and doc["settings"]["threads"] == n
    assert {rec["threads"] for rec in doc["records"]} == {n}
