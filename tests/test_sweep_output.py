"""What sweep-k shows and keeps: rerunning the same command with --out-dir resumes and redraws its own plot without
--force (a file it did not write is still refused); the band check rounds as the table prints (a run shown at
95.00% is inside a band that ends at 95%); one seed has no std (null in JSON, "—" in the table); the plot's
legends name only markers that are drawn."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os

import pytest
from helpers import full_record
from hypothesis import given
from hypothesis import strategies as st
from typer.testing import CliRunner

from ticketcli.cli.app import app
from ticketcli.files.atomic import write_owned
from ticketcli.report.console import pct
from ticketcli.report.plots import sweep_figure
from ticketcli.report.study_tables import NO_SPREAD, sweep_table
from ticketcli.sweep import outputs as sweep_outputs
from ticketcli.sweep import summary as sweep_summary
from ticketcli.sweep.result import SweepResult, SweepSettings

runner = CliRunner()
TINY = ["--dataset", "digits", "--model", "mlp:64-16-10", "--epochs", "1", "--batch-size", "128"]
SMALL = [*TINY, "--n-extract", "300", "--n-val", "100", "--device", "cpu", "--quiet", "--layerwise", "0"]


def rec(i, seed, val, achieved, group="edge-popup", fixed=False):
    return {
        "id": f"r{i}",
        "seed": seed,
        "group": group,
        "config": f"c{i}" if group == "edge-popup" else group,
        "val_accuracy": val,
        "test_accuracy": val,
        "achieved_sparsity": achieved,
        "fixed": fixed,
    }


def result_of(records, band=(0.85, 0.95)):
    """The result sweep-k's table and plot read, for hand-made records."""
    result = SweepResult.of([full_record(r) for r in records], [], band)
    seeds = result.summary.seeds
    settings = SweepSettings(0.9, seeds, (0.1,), 0, band, "m", "d", 1, ("augmented",), 1, 1, "local", None)
    return dataclasses.replace(result, settings=settings)


# ---- resuming over its own plot ----


@pytest.mark.slow
def test_rerun_with_out_dir_redraws_its_own_plot_but_never_a_file_it_did_not_write(tmp_path):
    out, png = tmp_path / "runs", tmp_path / "sweep.png"
    args = ["sweep-k", *SMALL, "--seeds", "0", "--densities", "0.1", "--out-dir", str(out), "--plot", str(png)]
    first = runner.invoke(app, [*args, "--json"])
    assert first.exit_code == 0, first.output
    assert sweep_outputs.written_here(out, png)
    again = runner.invoke(app, [*args, "--json"])  # the same command: resumes every run, redraws the plot
    assert again.exit_code == 0, again.output
    doc = json.loads(again.stdout)
    assert len(doc["resumed"]) == len(doc["records"]) and png.read_bytes()[:4] == b"\x89PNG"

    png.write_bytes(png.read_bytes() + b"edited")  # changed since: the user's now
    r = runner.invoke(app, args)
    assert r.exit_code == 2 and "already exists" in r.stderr
    assert png.read_bytes().endswith(b"edited")
    assert runner.invoke(app, [*args, "--force"]).exit_code == 0

    other = tmp_path / "mine.png"
    other.write_bytes(b"a file the sweep never wrote")
    r = runner.invoke(
        app, ["sweep-k", *SMALL, "--seeds", "0", "--densities", "0.1", "--out-dir", str(out), "--plot", str(other)]
    )
    assert r.exit_code == 2 and other.read_bytes() == b"a file the sweep never wrote"
    r = runner.invoke(app, [*args[:-4], "--out-dir", str(tmp_path / "elsewhere"), "--plot", str(png)])
    assert r.exit_code == 2  # noted in the other --out-dir, not in this one


def test_a_damaged_or_forged_outputs_note_makes_nothing_replaceable(tmp_path):
    png = tmp_path / "p.png"
    sweep_outputs.remember(tmp_path, write_owned(png, b"x"), b"x")
    assert sweep_outputs.written_here(tmp_path, png)
    good = (tmp_path / sweep_outputs.OUTPUTS).read_bytes()
    entry = json.loads(good)["files"][os.path.abspath(png)]
    forged_v1 = json.dumps({str(png.resolve()): hashlib.sha256(b"x").hexdigest()}).encode()  # path and sha256 only
    other_inode = json.dumps(
        {"format": sweep_outputs.FORMAT, "files": {os.path.abspath(png): {**entry, "ino": entry["ino"] + 1}}}
    ).encode()
    for note in (b"{not json", b"[1, 2]", forged_v1, other_inode, b"[" * 100000 + b"]" * 100000):
        (tmp_path / sweep_outputs.OUTPUTS).write_bytes(note)
        assert not sweep_outputs.written_here(tmp_path, png)
    (tmp_path / sweep_outputs.OUTPUTS).write_bytes(good)
    assert sweep_outputs.written_here(tmp_path, png)
    os.utime(png, ns=(entry["mtime_ns"] + 1, entry["mtime_ns"] + 1))  # touched since: the user's file now
    assert not sweep_outputs.written_here(tmp_path, png)
    assert not sweep_outputs.written_here(None, png)


# ---- the band check rounds as the table prints ----


def test_a_run_shown_at_the_band_edge_is_in_the_band():
    band = (0.85, 0.95)
    assert pct(0.950049) == "95.00%" and sweep_summary.in_band(0.950049, band)
    assert pct(0.849951) == "85.00%" and sweep_summary.in_band(0.849951, band)
    assert pct(0.9501) == "95.01%" and not sweep_summary.in_band(0.9501, band)
    rs = [rec(0, 0, 0.5, 0.90), rec(1, 0, 0.9, 0.950049)]  # the better run prints as 95.00%
    assert sweep_summary.oracle(rs, band)["id"] == "r1"


@given(
    lo=st.integers(0, 10000),
    width=st.integers(0, 10000),
    upper=st.booleans(),
    offset=st.floats(-2e-4, 2e-4),
    anywhere=st.one_of(st.none(), st.floats(0, 1)),
)
def test_in_band_agrees_with_the_printed_percentage(lo, width, upper, offset, anywhere):
    """Oracle: the band test on the number the table prints (pct) against the band in percent, for achieved
    sparsities close to either edge of the band (where rounding matters) and anywhere in [0, 1]."""
    band = (lo / 10000, min(lo + width, 10000) / 10000)
    achieved = min(1.0, max(0.0, band[upper] + offset)) if anywhere is None else anywhere
    shown = float(pct(achieved).rstrip("%"))
    assert sweep_summary.in_band(achieved, band) == (100 * band[0] - 1e-9 <= shown <= 100 * band[1] + 1e-9)


# ---- one seed has no spread ----


def test_single_seed_std_is_null_in_json_and_a_dash_in_the_table(capsys):
    records = [
        rec(0, 0, 0.6, 0.90, fixed=True),
        rec(1, 0, 0.7, 0.80),
        rec(2, 0, 0.5, 0.90, group="random"),
        rec(3, 0, 0.8, 0.91, group="augmented"),
    ]
    result = result_of(records)
    sm = result["summary"]  # the document's summary, as --json prints it
    for g in (sm["fixed_edge_popup"], sm["methods"]["random"], sm["methods"]["augmented"], sm["oracle_constrained"]):
        g = {"test": g["metrics"]["test"]["accuracy"], "achieved_sparsity": g["sparsity"]["achieved"]}
        assert g["test"]["n"] == 1 and g["test"]["std"] is None and g["achieved_sparsity"]["std"] is None
    assert json.loads(json.dumps(sm))["methods"]["augmented"]["metrics"]["test"]["accuracy"]["std"] is None
    assert result.summary.edge_popup.test.std is not None  # two sweep runs of one seed do have a spread
    sweep_table(result)
    rows = [line for line in capsys.readouterr().out.splitlines() if "augmented" in line or "fixed edge" in line]
    assert rows and all(NO_SPREAD in line and "0.00 " not in line for line in rows)


def test_two_seeds_have_a_std():
    sm = result_of([rec(0, 0, 0.6, 0.9, group="random"), rec(1, 1, 0.8, 0.9, group="random")]).summary
    assert sm.methods["random"].test.std == pytest.approx(0.1414213562)


# ---- legends name only what is drawn ----


def legend_entries(ax) -> dict[str, object]:
    legend = ax.get_legend()
    return {} if legend is None else {t.get_text(): h for t, h in zip(legend.get_texts(), legend.legend_handles)}


def drawn_labels(ax) -> set[str]:
    """Labels of the artists on the axes that show at least one point (scatters) or an area (the band)."""
    labels = {c.get_label() for c in ax.collections if len(c.get_offsets()) > 0}
    return labels | {p.get_label() for p in ax.patches}


@pytest.mark.parametrize(
    "records, absent",
    [
        # no run in the band for any seed: no "oracle in band" marker, and no legend entry for it
        (
            [rec(0, 0, 0.6, 0.5, fixed=True), rec(1, 0, 0.7, 0.6), rec(2, 0, 0.5, 0.9, group="random")],
            {"oracle in band"},
        ),
        # two seeds, every kind of marker drawn
        (
            [
                rec(0, 0, 0.6, 0.9, fixed=True),
                rec(1, 0, 0.7, 0.8),
                rec(2, 0, 0.5, 0.9, group="random"),
                rec(3, 1, 0.6, 0.9, group="fixed", fixed=True),
                rec(4, 1, 0.7, 0.93),
                rec(5, 1, 0.5, 0.9, group="random"),
            ],
            set(),
        ),
    ],
)
def test_legends_name_only_drawn_markers(records, absent):
    import matplotlib.pyplot as plt

    fig = sweep_figure(result_of(records))
    try:
        left, right = fig.axes
        seeds = {f"seed {s}" for s in {r["seed"] for r in records}}
        assert set(legend_entries(left)) == seeds and seeds <= drawn_labels(left)
        entries = set(legend_entries(right))
        assert entries <= drawn_labels(right), entries - drawn_labels(right)
        assert not entries & absent and {"edge-popup sweep", "random", "fixed edge-popup", "oracle"} <= entries
        assert ("oracle in band" in entries) == ("oracle in band" not in absent)
    finally:
        plt.close(fig)
