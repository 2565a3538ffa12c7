"""--checkpoint-every / --resume: a run stopped at an epoch boundary and resumed gives bit-identical masks and
identical metrics to an uninterrupted run; another run's checkpoint is refused; non-finite values stop the run."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from helpers import for_method, make_net, quick_method
from typer.testing import CliRunner

from ticketcli.cli.app import app
from ticketcli.errors import RunFailed, UsageError
from ticketcli.files.checkpoint import checkpoint_path
from ticketcli.methods import METHODS
from ticketcli.methods.score_training import ScoreTrainer, init_scores, train_scores
from ticketcli.runs.extract import extract_ticket
from ticketcli.selection.groups import scope_groups
from ticketcli.selection.scored import Selection
from ticketcli.settings.resolve import build_extract_spec, merge_settings

SETTINGS = {
    "dataset": "digits",
    "model": "mlp:64-24-24-10",
    "n_extract": 300,
    "n_val": 100,
    "epochs": 5,
    "batch_size": 128,
    "device": "cpu",
}
PER_METHOD = {"iterated": {"sparsity": 0.9, "max_rounds": 3}}  # two rounds: the stop falls in round 2


def spec_for(method: str, **kw):
    return build_extract_spec(
        merge_settings({**for_method(method, SETTINGS), "method": method, **PER_METHOD.get(method, {}), **kw}, None)
    )


class StopAfter:
    """A progress callback that raises KeyboardInterrupt (what SIGINT raises) after a given epoch (and round)."""

    def __init__(self, epoch: int, round: int | None = None):
        self.epoch, self.round, self.seen = epoch, round, []

    def __call__(self, stats: dict) -> None:
        self.seen.append((stats.get("round"), stats["epoch"]))
        if stats["epoch"] == self.epoch and stats.get("round") == self.round:
            raise KeyboardInterrupt


def mask_bytes(path: Path) -> dict[str, bytes]:
    from safetensors.torch import load_file

    return {k: v.numpy().tobytes() for k, v in load_file(str(path)).items()}


def leftovers(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir() if p.name.startswith(".") or p.suffix == ".tmp")


@pytest.mark.parametrize("method", [m for m in METHODS.names() if METHODS.get(m).load().resumable and m != "random"])
@pytest.mark.slow
def test_resume_after_interrupt_is_bit_identical(tmp_path, method):
    spec = spec_for(method)
    ref = tmp_path / "ref.safetensors"
    reference = extract_ticket(spec, out=ref)

    out = tmp_path / "t.safetensors"
    stop = StopAfter(3, round=2 if method == "iterated" else None)
    with pytest.raises(KeyboardInterrupt):  # checkpoints after epochs 2 and 4: epoch 3 is redone on resume
        extract_ticket(spec, out=out, checkpoint_every=2, progress=stop)
    assert not out.exists() and checkpoint_path(out).is_file()

    seen = []
    resumed = extract_ticket(
        spec, out=out, checkpoint_every=2, resume=True, progress=lambda s: seen.append((s.get("round"), s["epoch"]))
    )
    assert seen[0] == (stop.round, 3)  # it really resumed from epoch 2 instead of starting over
    assert mask_bytes(out) == mask_bytes(ref)
    for split in ("test", "val"):
        assert resumed["metrics"][split] == reference["metrics"][split]
    assert resumed["sparsity"] == reference["sparsity"]
    assert not checkpoint_path(out).exists() and leftovers(tmp_path) == []


def test_random_takes_checkpoint_options_and_gives_the_same_bits(tmp_path):
    """random has no epochs: nothing to save, so --checkpoint-every and --resume change nothing."""
    spec = spec_for("random")
    extract_ticket(spec, out=tmp_path / "a.safetensors")
    extract_ticket(spec, out=tmp_path / "b.safetensors", checkpoint_every=1, resume=True)
    assert mask_bytes(tmp_path / "a.safetensors") == mask_bytes(tmp_path / "b.safetensors")
    assert not checkpoint_path(tmp_path / "b.safetensors").exists()


def test_resuming_a_different_run_is_refused(tmp_path):
    out = tmp_path / "t.safetensors"
    with pytest.raises(KeyboardInterrupt):
        extract_ticket(spec_for("edge-popup"), out=out, checkpoint_every=1, progress=StopAfter(2))
    with pytest.raises(UsageError, match=r"belongs to a different run \(method.lr: 0.01 -> 0.02\)"):
        extract_ticket(spec_for("edge-popup", lr=0.02), out=out, resume=True)
    with pytest.raises(UsageError, match="different run"):
        extract_ticket(spec_for("edge-popup", seed=1), out=out, resume=True)

    r = CliRunner().invoke(
        app,
        [
            "extract",
            "--method",
            "edge-popup",
            "--dataset",
            "digits",
            "--model",
            SETTINGS["model"],
            "--n-extract",
            "300",
            "--n-val",
            "100",
            "--epochs",
            "5",
            "--batch-size",
            "128",
            "--device",
            "cpu",
            "--lr",
            "0.02",
            "--quiet",
            "--out",
            str(out),
            "--resume",
        ],
    )
    assert r.exit_code == 2 and len(r.stderr.strip().splitlines()) == 1 and "different run" in r.stderr
    assert not out.exists() and checkpoint_path(out).is_file()  # the checkpoint is kept for the right command

    checkpoint_path(out).write_bytes(b"torn")
    with pytest.raises(UsageError, match="cannot read checkpoint"):
        extract_ticket(spec_for("edge-popup"), out=out, resume=True)


def test_checkpoint_options_refused_for_methods_without_resume(tmp_path, monkeypatch):
    from ticketcli.methods.random import RandomMask

    monkeypatch.setattr(RandomMask, "resumable", False)
    with pytest.raises(UsageError, match="do not apply to method 'random'"):
        extract_ticket(spec_for("random"), out=tmp_path / "t.safetensors", checkpoint_every=1)


# ---- non-finite values ----------------------------------------------------------------------------------------


def test_nan_weight_is_named_with_epoch_and_layer(digits):
    net = make_net("mlp:64-32-32-10")
    net.weights["layers.1.weight"][3, 4] = float("nan")
    spec = quick_method("edge-popup")
    selection = Selection(net, scope_groups(net, spec, "layer", 0.2), parts=1)
    trainer = ScoreTrainer(net, selection, spec, init_scores(net, 1, torch.Generator().manual_seed(0)))
    with pytest.raises(RunFailed, match=r"non-finite loss at epoch 1 \(first non-finite: weights of layers.1.weight\)"):
        train_scores(trainer, digits, spec, torch.Generator().manual_seed(1), None)


def test_nan_score_is_named(digits):
    net = make_net("mlp:64-32-32-10")
    spec = quick_method("augmented")
    selection = Selection(net, scope_groups(net, spec, "layer", 0.2), parts=2)
    scores = init_scores(net, 2, torch.Generator().manual_seed(0))
    scores["layers.2.weight"][1][0, 0] = float("inf")  # an auxiliary score
    trainer = ScoreTrainer(net, selection, spec, scores)
    with pytest.raises(
        RunFailed, match=r"non-finite scores at epoch 1 \(first non-finite: scores of layers.2.weight\)"
    ):
        train_scores(trainer, digits, spec, torch.Generator().manual_seed(1), None)


@pytest.mark.parametrize("method", ["edge-popup", "augmented"])
def test_huge_lr_stops_with_exit_1_and_no_ticket(tmp_path, method):
    out = tmp_path / "t.safetensors"
    r = CliRunner().invoke(
        app,
        [
            "extract",
            "--method",
            method,
            "--dataset",
            "digits",
            "--model",
            "mlp:64-16-10",
            "--n-extract",
            "200",
            "--n-val",
            "50",
            "--epochs",
            "3",
            "--lr",
            "1e38",
            "--quiet",
            "--out",
            str(out),
        ],
    )
    assert r.exit_code == 1, r.output
    err = r.stderr.strip()
    assert len(err.splitlines()) == 1 and "non-finite" in err and "epoch 1" in err and "layers.0.weight" in err
    assert list(tmp_path.iterdir()) == []
