"""Data parallelism under torchrun (2 CPU processes, gloo), devices and --precision.

The oracle for data parallelism is the single-process run: one data-parallel step must give every rank the
gradient of the full global batch (up to reduction order), and a whole 2-process extraction must agree with the
1-process one on >= 99% of mask entries and within 1 accuracy point.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import ddp_cases
import pytest
import torch
from typer.testing import CliRunner

from ticketcli.cli.app import app
from ticketcli.errors import UsageError
from ticketcli.runs.inputs import resolve_device
from ticketcli.runtime import distributed
from ticketcli.ticketfile import ticket as ticket_io

HERE = Path(__file__).parent
TORCHRUN = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2"]
DIGITS = [
    "--dataset",
    "digits",
    "--model",
    "mlp:64-64-64-10",
    "--epochs",
    "8",
    "--batch-size",
    "99",
    "--seed",
    "1",
    "--device",
    "cpu",
    "--quiet",
]


def run(cmd: list[str], cwd: Path, *, parallel: bool) -> subprocess.CompletedProcess:
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    if Path("/sys/class/net/lo").exists():  # gloo on loopback: no dependence on how the hostname resolves
        env.setdefault("GLOO_SOCKET_IFNAME", "lo")
    for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK"):
        env.pop(k, None)
    head = TORCHRUN if parallel else [sys.executable]
    return subprocess.run([*head, *cmd], cwd=cwd, env=env, capture_output=True, text=True, timeout=600)


# --- one step, compared tensor by tensor with the single-process oracle ---


@pytest.fixture(scope="module")
def one_step(tmp_path_factory) -> list[dict]:
    out = tmp_path_factory.mktemp("ddp-step")
    p = run([str(HERE / "ddp_worker.py"), str(out)], out, parallel=True)
    assert p.returncode == 0, p.stderr[-3000:]
    return [
        {**torch.load(out / f"rank{r}.pt", weights_only=True), "teardown": (out / f"rank{r}.teardown").read_text()}
        for r in (0, 1)
    ]


@pytest.mark.slow
def test_a_data_parallel_step_equals_the_full_batch_step(one_step):
    oracle = ddp_cases.score_trainer()
    x, y = ddp_cases.batch()
    loss, correct, _ = oracle.step(x, y)
    for r in one_step:
        assert r["world"] == 2
        assert r["loss"] == pytest.approx(loss, rel=1e-6) and r["correct"] == correct
        for n, parts in oracle.scores.items():
            grad, updated = r["scores"][n]
            torch.testing.assert_close(grad, parts[0].grad, rtol=1e-5, atol=1e-8)
            torch.testing.assert_close(updated, parts[0].detach(), rtol=1e-5, atol=1e-7)
    for n in oracle.scores:  # every rank took the very same step
        assert torch.equal(one_step[0]["scores"][n][1], one_step[1]["scores"][n][1])


@pytest.mark.slow
def test_a_data_parallel_weight_step_equals_the_full_batch_step(one_step):
    oracle = ddp_cases.weight_trainer()
    x, y = ddp_cases.batch()
    loss, correct = oracle.step(x, y)
    for r in one_step:
        assert r["wloss"] == pytest.approx(loss, rel=1e-6) and r["wcorrect"] == correct
        for n, p in oracle.params.items():
            grad, updated = r["weights"][n]
            torch.testing.assert_close(grad, p.grad, rtol=1e-5, atol=1e-8)
            torch.testing.assert_close(updated, p.detach(), rtol=1e-5, atol=1e-7)
            assert not bool(updated[~oracle.masks[n].bool()].any())  # masked entries stay exactly zero


@pytest.mark.slow
def test_each_rank_takes_a_contiguous_share_of_the_global_batch(one_step):
    _, y = ddp_cases.batch()
    shards = [r["shard"] for r in one_step]
    assert [s.numel() for s in shards] == [19, 18]
    assert torch.equal(torch.cat(shards), y)


@pytest.mark.slow
def test_no_replica_is_left_for_the_interpreters_finalization(one_step):
    # the trainers dropped their replicas when the step ended; those still alive at exit would free the process
    # group during finalization, which aborts a rank now and then after a run that did everything right
    assert [r["teardown"] for r in one_step] == ["0", "0"]


@pytest.mark.slow
def test_a_diverged_rank_is_caught_on_every_rank(one_step):
    for r in one_step:
        assert r["caught"] is not None and "the test tensors differ between ranks" in r["caught"]
        assert "ranks 1 disagree" in r["caught"]


# --- whole runs through the CLI ---


@pytest.fixture(scope="module")
def extracted(tmp_path_factory) -> dict:
    d = tmp_path_factory.mktemp("ddp-extract")
    one = run(["-m", "ticketcli", "extract", *DIGITS, "--out", "one.safetensors", "--json"], d, parallel=False)
    two = run(["-m", "ticketcli", "extract", *DIGITS, "--out", "two.safetensors", "--json"], d, parallel=True)
    assert one.returncode == 0, one.stderr[-3000:]
    assert two.returncode == 0, two.stderr[-3000:]
    return {
        "dir": d,
        "one": ticket_io.load(d / "one.safetensors"),
        "two": ticket_io.load(d / "two.safetensors"),
        "stdout": two.stdout,
        "stderr": two.stderr,
    }


@pytest.mark.slow
def test_two_processes_agree_with_one(extracted):
    one, two = extracted["one"], extracted["two"]
    total = sum(m.numel() for m in one.masks.values())
    agree = sum(int((one.masks[n] == two.masks[n]).sum()) for n in one.masks)
    assert agree / total >= 0.99
    assert abs(one.metrics.test.accuracy - two.metrics.test.accuracy) <= 0.01
    assert one.sparsity.kept == two.sparsity.kept  # exact counts either way
    assert two.metrics.processes == 2 and not one.metrics.recorded("processes")


@pytest.mark.slow
def test_two_processes_equal_one_process_summing_the_two_shards(extracted, monkeypatch):
    """The whole 2-process run, bit for bit, is one process computing sum(shard losses) / global batch: any
    difference from the plain 1-process run is floating-point summation order, not data parallelism."""
    import torch.nn.functional as F

    from ticketcli.runs import extract as runs_extract
    from ticketcli.settings.resolve import build_extract_spec, merge_settings

    def two_shards(forward, x, y):
        parts = [(forward(xs), ys) for xs, ys in zip(x.tensor_split(2), y.tensor_split(2))]
        loss = sum(F.cross_entropy(logits, ys, reduction="sum") for logits, ys in parts) / y.numel()
        return loss, float(loss.detach()), sum(int((logits.argmax(1) == ys).sum()) for logits, ys in parts)

    monkeypatch.setattr(distributed, "cross_entropy_step", two_shards)
    flags = {
        a.lstrip("-").replace("-", "_"): int(v) if v.isdigit() else v  # typed, as Typer hands them over
        for a, v in zip(DIGITS[0:-1:2], DIGITS[1:-1:2])
    }
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        runs_extract.extract_ticket(
            build_extract_spec(merge_settings(flags, None)), out=extracted["dir"] / "emulated.safetensors"
        )
    finally:
        torch.set_num_threads(threads)
    emulated, two = ticket_io.load(extracted["dir"] / "emulated.safetensors"), extracted["two"]
    assert all(torch.equal(emulated.masks[n], two.masks[n]) for n in two.masks)
    assert emulated.metrics.test == two.metrics.test
    (extracted["dir"] / "emulated.safetensors").unlink()


@pytest.mark.slow
def test_only_rank_zero_prints_and_writes(extracted):
    summary = json.loads(extracted["stdout"])  # exactly one JSON document: rank 1 printed nothing
    assert summary["ticket"] == "two.safetensors" and summary["processes"] == 2
    assert "rank 1" not in extracted["stderr"]
    assert sorted(p.name for p in extracted["dir"].iterdir()) == ["one.safetensors", "two.safetensors"]


@pytest.mark.slow
def test_train_weak_runs_data_parallel(extracted):
    d = extracted["dir"]
    args = [
        "-m",
        "ticketcli",
        "train-weak",
        "one.safetensors",
        "--epochs",
        "3",
        "--batch-size",
        "99",
        "--device",
        "cpu",
        "--quiet",
        "--json",
    ]
    one = run([*args, "--out", "w1.safetensors"], d, parallel=False)
    two = run([*args, "--out", "w2.safetensors"], d, parallel=True)
    assert one.returncode == 0, one.stderr[-3000:]
    assert two.returncode == 0, two.stderr[-3000:]
    r1, r2 = json.loads(one.stdout), json.loads(two.stdout)
    assert r2["processes"] == 2
    assert abs(r1["metrics"]["test"]["accuracy"] - r2["metrics"]["test"]["accuracy"]) <= 0.01
    from safetensors.torch import load_file

    w1, w2 = load_file(str(d / "w1.safetensors")), load_file(str(d / "w2.safetensors"))
    masks = extracted["one"].masks
    for n in w1:
        torch.testing.assert_close(w2[n], w1[n], rtol=1e-3, atol=1e-4)
        assert not bool(w2[n][~masks[n]].any())


SNIP_DIGITS = [a for a in DIGITS if a not in ("--epochs", "8")]  # snip trains nothing: --epochs is refused


@pytest.mark.slow
def test_baselines_are_refused_under_torchrun(tmp_path):
    p = run(
        ["-m", "ticketcli", "extract", "--method", "snip", *SNIP_DIGITS, "--out", "s.safetensors"],
        tmp_path,
        parallel=True,
    )
    assert p.returncode != 0
    assert "error: method 'snip' does not run data-parallel under torchrun" in p.stderr
    assert p.stderr.count("error: method 'snip'") == 1  # rank 1 stays quiet about the same usage error
    assert not (tmp_path / "s.safetensors").exists()


@pytest.mark.slow
def test_other_commands_refuse_a_torchrun_environment(extracted, monkeypatch):
    for k, v in {"RANK": "0", "WORLD_SIZE": "2", "LOCAL_RANK": "0"}.items():
        monkeypatch.setenv(k, v)
    r = CliRunner().invoke(app, ["evaluate", str(extracted["dir"] / "one.safetensors")])
    assert r.exit_code == 2
    assert "`ticket evaluate` does not run under torchrun" in r.output


# --- the torchrun environment and devices, without processes ---


@pytest.mark.parametrize(
    "env, expected",
    [
        ({}, distributed.World()),
        ({"WORLD_SIZE": "1"}, distributed.World()),
        ({"WORLD_SIZE": "4", "RANK": "3", "LOCAL_RANK": "1"}, distributed.World(rank=3, size=4, local_rank=1)),
    ],
)
def test_world_from_the_torchrun_environment(env, expected):
    assert distributed.from_environment(env) == expected


@pytest.mark.parametrize(
    "env",
    [
        {"WORLD_SIZE": "two"},
        {"WORLD_SIZE": "2", "RANK": "2"},
        {"WORLD_SIZE": "0"},
        {"WORLD_SIZE": "2", "RANK": "0", "LOCAL_RANK": "-1"},
    ],
)
def test_inconsistent_torchrun_environment_is_a_usage_error(env):
    with pytest.raises(UsageError):
        distributed.from_environment(env)


@pytest.mark.parametrize(
    "name, needle",
    [
        ("tpu", "unknown device 'tpu'"),
        ("cuda:x", "unknown device"),
        ("mps:1", "unknown device 'mps:1'"),
        ("xla", "device type 'xla' is not supported"),
    ],
)
def test_bad_devices_are_usage_errors(name, needle):
    with pytest.raises(UsageError, match=needle):
        resolve_device(name)


def test_unavailable_accelerators_are_usage_errors(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: False)
    assert resolve_device("auto") == torch.device("cpu")
    for name in ("cuda", "cuda:1", "mps"):
        with pytest.raises(UsageError, match="not available here"):
            resolve_device(name)


def test_cuda_devices_are_checked_and_torchrun_ranks_get_their_own(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    assert resolve_device("cuda:1") == torch.device("cuda", 1)
    with pytest.raises(UsageError, match="has 2 CUDA devices"):
        resolve_device("cuda:2")
    monkeypatch.setattr(distributed, "_WORLD", distributed.World(rank=1, size=2, local_rank=1))
    assert resolve_device("cuda") == resolve_device("auto") == torch.device("cuda", 1)
    with pytest.raises(UsageError, match="under torchrun each process uses cuda:LOCAL_RANK"):
        resolve_device("cuda:0")
    monkeypatch.setattr(distributed, "_WORLD", distributed.World(rank=2, size=3, local_rank=2))
    with pytest.raises(UsageError, match="LOCAL_RANK 2: this machine has 2 CUDA devices"):
        resolve_device("cuda")


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU (run it on a CUDA machine)")
def test_a_gpu_ticket_evaluates_on_the_cpu_within_a_fifth_of_a_point(tmp_path):
    out = tmp_path / "gpu.safetensors"
    args = [a if a != "cpu" else "cuda" for a in DIGITS]
    r = CliRunner().invoke(app, ["extract", *args, "--out", str(out)])
    assert r.exit_code == 0, r.output
    r = CliRunner().invoke(app, ["evaluate", str(out), "--device", "cpu", "--json"])
    assert r.exit_code == 0, r.output
    result = json.loads(r.stdout)
    assert abs(result["metrics"]["test"]["accuracy"] - result["stored"]["metrics"]["test"]["accuracy"]) <= 0.002


# --- --precision ---


def test_bf16_autocasts_the_training_forward_pass_only():
    x, _ = ddp_cases.batch()
    st = ddp_cases.score_trainer()
    hard = st.selection.select(st.scores, torch.float32)
    assert st._forward(x, hard).dtype == torch.float32
    wt = ddp_cases.weight_trainer()
    assert wt._forward(x).dtype == torch.float32
    from dataclasses import replace

    from ticketcli.train import precision_context

    st.autocast = precision_context(st.net.device, replace(st.spec, precision="bf16").precision)
    assert st._forward(x, hard).dtype == torch.bfloat16
    wt.autocast = precision_context(wt.net.device, "bf16")
    assert wt._forward(x).dtype == torch.bfloat16


@pytest.mark.slow
def test_precision_on_the_command_line(tmp_path):
    out = tmp_path / "bf16.safetensors"
    r = CliRunner().invoke(app, ["extract", *DIGITS, "--epochs", "2", "--precision", "bf16", "--out", str(out)])
    assert r.exit_code == 0, r.output
    assert "warning: --precision bf16 on the CPU" in r.output
    tk = ticket_io.load(out)
    assert tk.method.option("precision") == "bf16" and tk.metrics.precision == "bf16"
    r = CliRunner().invoke(app, ["evaluate", str(out), "--json"])  # evaluation is fp32 and reproduces exactly
    assert r.exit_code == 0 and json.loads(r.stdout)["reproduced"] is True
    r = CliRunner().invoke(app, ["train-weak", str(out), "--epochs", "1", "--precision", "bf16", "--json", "--quiet"])
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["precision"] == "bf16"


@pytest.mark.parametrize(
    "args, needle",
    [
        (["extract", "--precision", "fp16"], "--precision must be one of fp32, bf16, got 'fp16'"),
        (
            ["extract", "--method", "imp", "--precision", "bf16"],
            "--precision applies to augmented, edge-popup, iterated",
        ),
        (["extract", "--device", "mps"], "MPS (Apple GPU) is not available here"),
    ],
)
def test_bad_precision_and_device_flags_are_one_line_errors(args, needle, tmp_path, monkeypatch):
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: False)
    r = CliRunner().invoke(
        app, [*args, "--dataset", "digits", "--epochs", "1", "--out", str(tmp_path / "t.safetensors")]
    )
    assert r.exit_code == 2
    assert needle in r.output
