"""sweep-k: oracle selection on hand-made records, reproducible layerwise draws, executor-independent records,
resume from --out-dir, Ray equals local, the CLI's table/JSON/PNG and its one-line errors."""

from __future__ import annotations

import json
import os
import statistics
import sys

import pytest
from typer.testing import CliRunner

import ticketcli
from ticketcli.cli.app import app
from ticketcli.errors import UsageError
from ticketcli.methods import METHODS
from ticketcli.models.registry import parse_model
from ticketcli.settings.resolve import build_extract_spec, merge_settings
from ticketcli.sweep import plan as sweep_plan
from ticketcli.sweep import records as sweep_records
from ticketcli.sweep import result as sweep_result
from ticketcli.sweep import run as sweep_run
from ticketcli.sweep import summary as sweep_summary
from ticketcli.ticketfile import ticket as ticket_io

runner = CliRunner()
TINY = dict(
    method="edge-popup",
    dataset="digits",
    model="mlp:64-32-32-10",
    epochs=1,
    batch_size=128,
    n_extract=500,
    n_val=200,
    device="cpu",
)
TINY_FLAGS = [
    "--dataset",
    "digits",
    "--model",
    "mlp:64-32-32-10",
    "--epochs",
    "1",
    "--batch-size",
    "128",
    "--n-extract",
    "300",
    "--n-val",
    "100",
    "--device",
    "cpu",
    "--quiet",
]


def tiny_plan(seeds=(0,), densities=(0.1, 0.3), layerwise=1, **settings):
    base = build_extract_spec(merge_settings({**TINY, **settings}, None))
    return sweep_plan.build_plan(
        base, seeds=seeds, densities=densities, layerwise=layerwise, double_scoring=sweep_plan.double_scoring_methods()
    )


def stable(records):
    """Records without the fields allowed to differ between runs (timing, where the ticket file lives)."""
    return [{k: v for k, v in r.flat().items() if k not in sweep_records.VOLATILE} for r in records]


def rec(i, seed, val, achieved, group="edge-popup", test=None, fixed=False):
    return {
        "id": f"r{i}",
        "seed": seed,
        "group": group,
        "config": f"c{i}",
        "val_accuracy": val,
        "test_accuracy": val if test is None else test,
        "achieved_sparsity": achieved,
        "fixed": fixed,
    }


# ---- oracle and summary on hand-made records ----


def test_constrained_oracle_respects_band_and_unconstrained_does_not():
    rs = [
        rec(0, 0, 0.80, 0.70),
        rec(1, 0, 0.60, 0.90),
        rec(2, 0, 0.65, 0.96),
        rec(3, 0, 0.62, 0.85),
        rec(4, 0, 0.99, 0.90, group="augmented"),
    ]  # not an edge-popup sweep run: never the oracle
    assert sweep_summary.oracle(rs, (0.85, 0.95))["id"] == "r3"
    assert sweep_summary.oracle(rs, None)["id"] == "r0"
    assert sweep_summary.oracle(rs, (0.97, 0.99)) is None


def test_band_edges_are_inclusive_despite_float_rounding():
    assert sweep_summary.in_band(0.95 + 1e-12, (0.85, 0.95)) and sweep_summary.in_band(0.85 - 1e-12, (0.85, 0.95))
    assert not sweep_summary.in_band(0.9501, (0.85, 0.95)) and not sweep_summary.in_band(0.8499, (0.85, 0.95))


def test_oracle_ties_prefer_sparser_then_plan_order():
    rs = [rec(0, 0, 0.70, 0.86), rec(1, 0, 0.70, 0.92), rec(2, 0, 0.70, 0.92), rec(3, 0, 0.69, 0.94)]
    assert sweep_summary.oracle(rs, (0.85, 0.95))["id"] == "r1"  # sparser than r0, earlier than its exact twin r2
    assert sweep_summary.oracle(list(reversed(rs)), (0.85, 0.95))["id"] == "r2"  # plan order decides exact ties


def test_summary_by_hand():
    rs = [
        rec(0, 0, 0.5, 0.9, test=0.50, fixed=True),
        rec(1, 0, 0.7, 0.7, test=0.80),
        rec(2, 0, 0.6, 0.88, test=0.6),
        rec(3, 1, 0.4, 0.9, test=0.40, fixed=True),
        rec(4, 1, 0.9, 0.5, test=0.90),
        rec(5, 0, 0, 0.85, "augmented", 0.81),
        rec(6, 1, 0, 0.83, "augmented", 0.79),
    ]
    sm = sweep_summary.summarize(rs, band=(0.85, 0.95))
    tests = [0.5, 0.8, 0.6, 0.4, 0.9]
    assert sm["edge_popup"]["configs"] == 5
    assert sm["edge_popup"]["test"]["min"] == 0.4 and sm["edge_popup"]["test"]["max"] == 0.9
    assert sm["edge_popup"]["test"]["std"] == pytest.approx(statistics.stdev(tests))
    c = sm["oracle_constrained"]
    assert c["per_seed"]["0"]["id"] == "r2" and c["per_seed"]["1"]["id"] == "r3"
    assert c["test"]["mean"] == pytest.approx(0.5) and c["seeds_without_candidate"] == []
    u = sm["oracle_unconstrained"]
    assert [u["per_seed"][s]["id"] for s in ("0", "1")] == ["r1", "r4"]
    assert u["achieved_sparsity"]["mean"] == pytest.approx(0.6)
    assert sm["fixed_edge_popup"]["test"]["mean"] == pytest.approx(0.45)
    aug = sm["methods"]["augmented"]
    assert aug["test"]["mean"] == pytest.approx(0.80) and aug["test"]["std"] == pytest.approx(
        statistics.stdev([0.81, 0.79])
    )
    assert sweep_summary.summarize(rs, band=(0.95, 1.0))["oracle_constrained"]["seeds_without_candidate"] == ["0", "1"]


# ---- the plan ----


def test_layerwise_tuples_reproducible_from_the_seed():
    pool = sweep_plan.PAPER_DENSITIES
    a = sweep_plan.layerwise_tuples(0, pool, 4, 8)
    assert a == sweep_plan.layerwise_tuples(0, pool, 4, 8)
    assert a != sweep_plan.layerwise_tuples(1, pool, 4, 8)
    assert len(a) == 8 and all(len(t) == 4 and set(t) <= set(pool) for t in a)
    assert len(set(a)) > 1
    plan = tiny_plan(seeds=(3,), densities=pool, layerwise=5)
    n_layers = sweep_plan.model_layers(parse_model(TINY["model"]))
    drawn = [t.spec.method.layer_densities for t in plan if t.spec.method.layer_densities is not None]
    assert drawn == sweep_plan.layerwise_tuples(3, pool, n_layers, 5)


def test_plan_shares_init_per_seed_and_covers_every_double_scoring_method():
    plan = tiny_plan(seeds=(0, 1), densities=(0.05, 0.1, 0.3), layerwise=2)
    assert len({t.id for t in plan}) == len(plan)
    for t in plan:
        assert t.spec.init.seed == t.seed and t.spec.data.split_seed == t.seed
    ds = [m for m in sweep_plan.DOUBLE_SCORING if m in METHODS.names()]
    assert "augmented" in ds and sweep_plan.double_scoring_methods() == ds
    groups = {t.group for t in plan if t.seed == 0}
    assert groups == {"edge-popup", "random", *ds}  # fixed (k=0.1) is the sweep's own k=0.1 run
    fixed = [t for t in plan if t.fixed]
    assert [t.config for t in fixed] == ["k=0.1", "k=0.1"] and all(
        t.spec.method.density == pytest.approx(0.1) for t in fixed
    )
    other = tiny_plan(densities=(0.05, 0.3), layerwise=0)  # target 0.1 not in the pool: its own task
    assert [t.group for t in other if t.fixed] == ["fixed"]
    assert all(t.spec.method.sparsity == 0.9 for t in other if t.group != "edge-popup")


# ---- executors and resume ----


@pytest.mark.slow
def test_two_workers_give_exactly_the_records_of_one_worker():
    plan = tiny_plan()
    one = sweep_run.run_sweep(plan, workers=1, threads=1).records
    two = sweep_run.run_sweep(plan, workers=2, threads=1).records
    assert [r.id for r in one] == [t.id for t in plan]
    assert stable(one) == stable(two)
    assert all(r.threads == 1 for r in two)
    # Seed 0 draws the layerwise tuple (0.3, 0.3, 0.3): it must reproduce the scalar k=0.3 run bit for bit,
    # while the genuinely different configurations give different masks. (Iterated may stop after its first
    # round, which is augmented's run, so it is left out of the distinctness check.)
    by_id = {r.id: r for r in one}
    assert plan[2].spec.method.layer_densities == (0.3, 0.3, 0.3)
    assert by_id["seed0-edge-popup-lw0"].masks_sha256 == by_id["seed0-edge-popup-k0.3"].masks_sha256
    distinct = ("seed0-edge-popup-k0.1", "seed0-edge-popup-k0.3", "seed0-random", "seed0-augmented")
    assert len({by_id[i].masks_sha256 for i in distinct}) == len(distinct)


def test_resume_skips_finished_runs_and_recomputes_deleted_or_damaged_ones(tmp_path):
    plan = tiny_plan()
    first = sweep_run.run_sweep(plan, out_dir=tmp_path)
    assert first.resumed == [] and all((tmp_path / f"{t.id}.safetensors").is_file() for t in plan)
    (tmp_path / f"{plan[0].id}.safetensors").unlink()
    (tmp_path / f"{plan[1].id}.safetensors").write_bytes(b"not a ticket")
    with pytest.raises(UsageError, match="not replaced without --force"):  # changed since: no longer the sweep's
        sweep_run.run_sweep(plan, out_dir=tmp_path)
    assert (tmp_path / f"{plan[1].id}.safetensors").read_bytes() == b"not a ticket"
    seen, warned = [], []
    second = sweep_run.run_sweep(
        plan,
        out_dir=tmp_path,
        on_result=lambda r, resumed: seen.append((r.id, resumed)),
        overwrite=True,
        warn=warned.append,
    )
    assert len(warned) == 2 and "is missing" in warned[0] and "not a safetensors file" in warned[1]  # one each
    assert second.resumed == [t.id for t in plan[2:]]
    assert sorted(i for i, resumed in seen if not resumed) == sorted([plan[0].id, plan[1].id])
    assert stable(second.records) == stable(first.records)
    assert (tmp_path / f"{plan[0].id}.safetensors").is_file()
    assert sweep_records.finished(tmp_path, plan[1])[0] is not None
    changed = tiny_plan(epochs=2)  # other settings: nothing stored matches; refused, or replaced with --force
    assert all(sweep_records.finished(tmp_path, t) == (None, None) for t in changed)
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir()}
    with pytest.raises(UsageError, match=r"other settings \(epochs: 1 in the folder, 2 now\)"):
        sweep_run.run_sweep(changed[:1], out_dir=tmp_path)
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir()} == before  # nothing recomputed or replaced
    assert sweep_run.run_sweep(changed[:1], out_dir=tmp_path, overwrite=True).resumed == []


def test_a_record_of_an_older_sweep_resumes_with_its_tickets_digest_and_method(tmp_path):
    """A record on disk keeps the method's name; records written before they took their ticket's own masks digest
    (sweep_records.legacy_masks_sha256) still resume, and the document reports the ticket's digest and method record, as
    inspect reads them from the ticket; a digest that is neither is a damaged record, recomputed."""
    plan = tiny_plan(densities=(0.3,), layerwise=0)[:1]
    first = sweep_run.run_sweep(plan, out_dir=tmp_path).records[0]
    loaded = ticket_io.load(tmp_path / f"{plan[0].id}.safetensors")
    assert first.masks_sha256 == loaded.masks_sha256 and first.method == loaded.method.to_json()
    _, record_path = sweep_records.paths(tmp_path, plan[0])
    stored = json.loads(record_path.read_text())
    assert stored["schema"] == "ticket.sweep-k-run/1"
    assert stored["record"]["method"] == first.method and stored["record"]["masks_sha256"] == loaded.masks_sha256
    assert sweep_result.SweepRecord.from_document(stored["record"]) == first
    # the record as sweeps wrote it before records had a schema: flat, the method by its name
    flat = sweep_result.flat_record(stored["record"])
    doc = {"spec": stored["spec"], "record": {**flat, "method": flat["method"]["name"]}}
    assert doc["record"]["method"] == "edge-popup"
    doc["record"]["masks_sha256"] = old = sweep_records.legacy_masks_sha256(loaded.masks)
    assert old != loaded.masks_sha256
    record_path.write_text(json.dumps(doc))
    again = sweep_run.run_sweep(plan, out_dir=tmp_path)
    assert again.resumed == [plan[0].id]
    assert again.records[0].masks_sha256 == loaded.masks_sha256 and again.records[0].method == first.method
    doc["record"]["masks_sha256"] = "0" * 64
    record_path.write_text(json.dumps(doc))
    assert "masks differ from its record's" in str(sweep_records.finished(tmp_path, plan[0])[1])


@pytest.mark.slow
def test_ray_local_mode_equals_local(tmp_path):
    if os.environ.get("TICKET_REQUIRE_RAY") != "1":
        pytest.importorskip("ray", reason="pip install 'ticketcli[ray]'")
    import ray

    plan = tiny_plan(densities=(0.1,), layerwise=0)
    local = sweep_run.run_sweep(plan).records
    ray.init(
        num_cpus=2,
        include_dashboard=False,
        log_to_driver=False,
        runtime_env={"py_modules": [os.path.dirname(ticketcli.__file__)]},
    )
    try:
        remote = sweep_run.run_sweep(plan, executor="ray", out_dir=tmp_path)
    finally:
        ray.shutdown()
    assert stable(remote.records) == stable(local)
    assert all(sweep_records.finished(tmp_path, t)[0] is not None for t in plan)


# ---- the command ----


@pytest.mark.slow
def test_cli_json_table_and_png(tmp_path):
    png = tmp_path / "stability.png"
    args = [
        "sweep-k",
        *TINY_FLAGS,
        "--seeds",
        "0,1",
        "--densities",
        "0.05,0.1,0.3",
        "--layerwise",
        "1",
        "--plot",
        str(png),
    ]
    r = runner.invoke(app, [*args, "--json"])
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    assert len(doc["records"]) == 2 * (3 + 1 + 1 + len(sweep_plan.double_scoring_methods()))
    assert doc["summary"]["oracle_constrained"]["band"] == [0.85, 0.95]
    assert doc["settings"]["threads"] == 1 and doc["plot"] == str(png)
    raw = png.read_bytes()
    assert raw[:8] == b"\x89PNG\r\n\x1a\n"
    import matplotlib.image

    img = matplotlib.image.imread(str(png))
    assert img.shape[0] > 100 and img.shape[1] > 2 * img.shape[0] and img.std() > 0
    r = runner.invoke(app, ["sweep-k", *TINY_FLAGS, "--seeds", "0", "--densities", "0.1", "--layerwise", "0"])
    assert r.exit_code == 0, r.output
    assert "edge-popup sweep" in r.stdout and "oracle" in r.stdout
    r = runner.invoke(app, [*args, "--json"])  # the plot exists now: refused before any work, unless --force
    assert r.exit_code == 2 and "already exists" in r.stderr


@pytest.mark.parametrize(
    "extra, needle",
    [
        (["--band", "0.9-0.8"], "--band"),
        (["--band", "x"], "--band"),
        (["--seeds", "0,0"], "--seeds"),
        (["--densities", "0.1,1.5"], "--densities"),
        (["--workers", str(len(os.sched_getaffinity(0)) + 1)], "exceeds"),
        (["--sparsity", "1.2"], "--sparsity"),
    ],
)
def test_cli_bad_options_are_one_line_errors(extra, needle):
    r = runner.invoke(app, ["sweep-k", *TINY_FLAGS, *extra])
    assert r.exit_code == 2, r.output
    err = r.stderr.strip()
    assert err.startswith("error:") and len(err.splitlines()) == 1 and needle in err


def test_cli_ray_missing_gives_install_hint(monkeypatch):
    monkeypatch.setitem(sys.modules, "ray", None)  # import ray -> ImportError
    r = runner.invoke(
        app, ["sweep-k", *TINY_FLAGS, "--seeds", "0", "--densities", "0.1", "--layerwise", "0", "--executor", "ray"]
    )
    assert r.exit_code == 2, r.output
    assert "pip install 'ticketcli[ray]'" in r.stderr and len(r.stderr.strip().splitlines()) == 1


def test_cli_config_may_not_set_what_the_sweep_chooses(tmp_path):
    cfg = tmp_path / "c.toml"
    cfg.write_text('method = "augmented"\nepochs = 1\n')
    r = runner.invoke(app, ["sweep-k", *TINY_FLAGS, "--config", str(cfg)])
    assert r.exit_code == 2 and "method" in r.stderr
