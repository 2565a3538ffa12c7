"""Every PNG names its run (dataset, model, method) in its title; train-weak's x-axis ticks are whole epochs; drift
draws activation sparsity and the negative pre-activation share as one panel for ReLU, where they are the same
numbers, and as two otherwise. The commands run for real; the Figures they save are captured and inspected."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from helpers import full_record
from typer.testing import CliRunner

from ticketcli.cli.app import app
from ticketcli.drift import views as drift_views
from ticketcli.drift.result import DriftResult
from ticketcli.report import plots
from ticketcli.sweep.result import SweepResult, SweepSettings

if TYPE_CHECKING:  # matplotlib is imported by the commands these tests run, not when the suite is collected
    from matplotlib.figure import Figure

runner = CliRunner()
MODEL = "mlp:64-16-10"
DRIFT = ["drift", "--dataset", "digits", "--model", MODEL, "--batch-size", "64", "--probe-size", "100"]
DRIFT += ["--steps", "4", "--log-every", "2", "--quiet"]


@pytest.fixture
def saved(monkeypatch: pytest.MonkeyPatch) -> list[Figure]:
    """The Figures the commands turn into PNG files, in order (a closed Figure can still be inspected)."""
    figures: list[Figure] = []
    original = plots.png_bytes

    def capture(fig: Figure, *, dpi: int) -> bytes:
        figures.append(fig)
        return original(fig, dpi=dpi)

    monkeypatch.setattr(plots, "png_bytes", capture)
    monkeypatch.setattr(drift_views, "png_bytes", capture)
    return figures


def title(fig: Figure) -> str:
    """The suptitle and every axes title."""
    sup = fig._suptitle.get_text() if fig._suptitle is not None else ""
    return " | ".join([sup, *(ax.get_title() for ax in fig.axes)])


def invoke(*args: str) -> dict:
    r = runner.invoke(app, [*args, "--json"])
    assert r.exit_code == 0, r.output
    return json.loads(r.stdout)


@pytest.fixture(scope="module")
def ticket(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("plots") / "t.safetensors"
    args = ["extract", "--dataset", "digits", "--model", MODEL, "--method", "edge-popup", "--epochs", "2"]
    invoke(*args, "--n-extract", "300", "--n-val", "100", "--seed", "3", "--out", str(out), "--quiet")
    return out


@pytest.mark.slow
def test_train_weak_names_the_run_and_counts_whole_epochs(ticket, tmp_path, saved):
    png = tmp_path / "w.png"
    invoke("train-weak", str(ticket), "--epochs", "3", "--dense-baseline", "--plot", str(png), "--quiet")
    (fig,) = saved
    for needle in ("train-weak", "digits", MODEL, "edge-popup", "seed 3", "3 epochs"):
        assert needle in title(fig), title(fig)
    assert len(fig.axes) == 2
    for ax in fig.axes:
        lo, hi = ax.get_xlim()
        ticks = [t for t in ax.get_xticks() if lo <= t <= hi]
        assert len(ticks) >= 2 and all(float(t).is_integer() for t in ticks), ticks


@pytest.fixture
def drawn(monkeypatch: pytest.MonkeyPatch) -> list[DriftResult]:
    """The drift results the command drew, in order."""
    results: list[DriftResult] = []
    original = drift_views.drift_figure

    def capture(r: DriftResult) -> Figure:
        results.append(r)
        return original(r)

    monkeypatch.setattr(drift_views, "drift_figure", capture)
    return results


@pytest.mark.slow
def test_drift_relu_draws_one_panel_saying_the_two_shares_are_equal(tmp_path, saved, drawn):
    doc = invoke(*DRIFT, "--activation", "relu", "--plot", str(tmp_path / "d.png"))
    (fig,) = saved
    assert len(fig.axes) == 2, title(fig)
    assert "= share of negative pre-activations (ReLU)" in fig.axes[1].get_title()
    for needle in ("drift", "digits", MODEL, "adam lr 0.001", "cross-entropy", "relu", "seed 0"):
        assert needle in title(fig), title(fig)
    (result,) = drawn
    assert drift_views.relu_panels_coincide(result) and result.to_document()["summary"] == doc["summary"]
    # the oracle of the claim: the JSON's two series are the same numbers for every hidden layer
    hidden = [s for s in doc["summary"]["layers"] if "sparsity" in s]
    assert hidden and all(s["sparsity"]["mean"] == s["neg_preact_share"]["mean"] for s in hidden)


@pytest.mark.slow
def test_drift_keeps_both_panels_when_the_shares_differ(tmp_path, saved, drawn):
    invoke(*DRIFT, "--activation", "gelu", "--plot", str(tmp_path / "d.png"))
    (fig,) = saved
    assert len(fig.axes) == 3 and "gelu" in title(fig)
    assert not drift_views.relu_panels_coincide(drawn[0])
    # ReLU with a pre-activation exactly 0 (a unit the mask emptied): sparse but not negative, so two panels
    invoke(*DRIFT, "--activation", "relu", "--plot", str(tmp_path / "r.png"))
    relu = drawn[1]
    name, layer = next((n, s) for n, s in relu.summary.layers.items() if "sparsity" in s.series)
    sp = layer.series["sparsity"]
    assert sp.mean[-1] is not None
    bumped = dataclasses.replace(sp, mean=(*sp.mean[:-1], sp.mean[-1] + 0.25))
    layers = {**relu.summary.layers, name: dataclasses.replace(layer, series={**layer.series, "sparsity": bumped})}
    relu = dataclasses.replace(relu, summary=dataclasses.replace(relu.summary, layers=layers))
    assert not drift_views.relu_panels_coincide(relu)
    assert len(drift_views.drift_figure(relu).axes) == 3


def test_drift_tradeoff_names_data_models_and_control(tmp_path, saved):
    png = tmp_path / "t.png"
    invoke(*DRIFT, "--tradeoff", "0.5,0.9", "--model", f"{MODEL},mlp:64-16-16-10+res", "--plot", str(png))
    (fig,) = saved
    for needle in ("trade-off", "digits", MODEL, "mlp:64-16-16-10+res", "adam", "control"):
        assert needle in title(fig), title(fig)


def _record(i: int, seed: int, group: str, method: str, fixed: bool = False) -> dict:
    acc, achieved = 0.5 + 0.01 * i, 0.8 + 0.01 * i
    return dict(id=f"r{i}", seed=seed, group=group, config=f"k{i}", fixed=fixed, method=method) | {
        "val_accuracy": acc,
        "test_accuracy": acc,
        "achieved_sparsity": achieved,
    }


def test_sweep_names_dataset_model_methods_and_seeds():
    records = [_record(i, s, "edge-popup", "edge-popup", fixed=i == 0) for s in (0, 1) for i in range(3)]
    records += [_record(9, s, "augmented", "augmented") for s in (0, 1)]
    result = SweepResult.of([full_record(r) for r in records], [])
    settings = SweepSettings(
        0.9, (0, 1), (0.1,), 0, (0.85, 0.95), MODEL, "digits", 2, ("augmented",), 1, 1, "local", None
    )
    fig = plots.sweep_figure(dataclasses.replace(result, settings=settings))
    for needle in ("sweep-k", "digits", MODEL, "edge-popup sweep vs augmented", "2 epochs", "2 seeds"):
        assert needle in title(fig), title(fig)


def images(fig: Figure) -> list:
    """The arrays the figure's axes show as images (heat maps), in order."""
    return [im.get_array() for ax in fig.axes for im in ax.get_images()]


def test_compare_draws_the_pairwise_overlap_as_a_heat_map(ticket, tmp_path, saved):
    other = tmp_path / "other.safetensors"
    args = ["extract", "--dataset", "digits", "--model", MODEL, "--method", "edge-popup", "--epochs", "1"]
    invoke(*args, "--n-extract", "300", "--n-val", "100", "--seed", "4", "--out", str(other), "--quiet")
    saved.clear()
    png = tmp_path / "overlap.png"
    doc = invoke("compare", str(ticket), str(other), str(ticket), "--plot", str(png))
    (fig,) = saved
    assert png.read_bytes().startswith(b"\x89PNG")
    (shown,) = images(fig)
    flat = [x for row in doc["matrix"]["jaccard"] for x in row]
    assert shown.ravel().tolist() == pytest.approx(flat)  # the heat map is the document's matrix
    assert "mask overlap" in title(fig) and MODEL in title(fig)
    labels = [t.get_text() for t in fig.axes[0].get_yticklabels()]
    assert labels[1] == "1: edge-popup, seed 4"
    again = runner.invoke(app, ["compare", str(ticket), str(other), "--plot", str(png)])
    assert again.exit_code == 2 and "--force" in again.stderr  # an existing plot is refused before the work


def test_inspect_draws_densities_and_a_conv_tickets_kept_filter_map(tmp_path, saved):
    from ticketcli.ticketfile import ticket as ticket_io

    t = tmp_path / "conv.safetensors"
    args = ["extract", "--dataset", "digits", "--model", "vgg:8-M-16", "--method", "edge-popup", "--epochs", "1"]
    invoke(*args, "--n-extract", "200", "--n-val", "100", "--sparsity", "0.7", "--out", str(t), "--quiet")
    doc = invoke("inspect", str(t), "--plot", str(tmp_path / "i.png"))
    (fig,) = saved
    bars = [p.get_height() for p in fig.axes[0].patches]
    assert bars == pytest.approx([100 * m["density"] for m in doc["layers"]])
    masks = ticket_io.load(t).masks
    convs = [name for name, m in masks.items() if m.dim() == 4]
    maps = images(fig)
    assert len(convs) == 2 and len(maps) == 2
    for name, shown in zip(convs, maps, strict=True):  # each filter's kept share, from the unpacked mask
        oracle = masks[name].float().flatten(2).mean(2)
        assert shown.shape == tuple(oracle.shape)
        assert shown.ravel().tolist() == pytest.approx(oracle.ravel().tolist(), abs=1e-6)
    assert "vgg:8-M-16" in title(fig) and "kept share per filter" in title(fig)


def test_inspect_plot_is_for_one_ticket(ticket, tmp_path):
    r = runner.invoke(app, ["inspect", str(ticket.parent), "--plot", str(tmp_path / "x.png")])
    assert r.exit_code == 2 and "--plot draws one ticket" in r.stderr
