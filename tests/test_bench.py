"""`ticket bench` and `Ticket.bench`: every form's outputs checked against the ticket's network, the forms a mask
allows (whole blocks, 2:4) detected from the mask, the verdict from the timings (made-up ones here: no timing is
asserted), a folder one row each, and the typed result."""

from __future__ import annotations

import dataclasses
import json
import random
from pathlib import Path

import pytest
import torch
from typer.testing import CliRunner

import ticketcli as tc
from ticketcli.bench import forms as bench_forms
from ticketcli.bench import kernels, timing
from ticketcli.bench.result import Agreement, BenchResult, FormReport, Timing
from ticketcli.bench.run import agreeing, agreement, logits
from ticketcli.cli.app import app
from ticketcli.contract.schema import schema_of
from ticketcli.errors import UsageError
from ticketcli.models.registry import parse_model
from ticketcli.runs.build import build_net
from ticketcli.specs.bench import BenchSpec, bench_spec
from ticketcli.specs.run import InitSpec

runner = CliRunner()
DATA = ["--dataset", "digits", "--n-extract", "300", "--n-val", "100", "--quiet", "--epochs", "1"]
QUICK = ["--batch", "1,16", "--repeats", "3", "--threads", "1"]


def extract(out: Path, model: str) -> Path:
    r = runner.invoke(app, ["extract", *DATA, "--model", model, "--out", str(out)])
    assert r.exit_code == 0, r.output
    return out


@pytest.fixture(scope="module")
def tickets(tmp_path_factory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("bench")
    return {"mlp": extract(d / "mlp.safetensors", "mlp:64-16-10"), "vgg": extract(d / "vgg.safetensors", "vgg:8-M-16")}


def bench_json(*args: str) -> dict:
    r = runner.invoke(app, ["bench", *QUICK, "--json", *args])
    assert r.exit_code == 0, r.output
    return json.loads(r.stdout)


@pytest.mark.parametrize("model", ["mlp", "vgg"])
def test_every_form_that_runs_agrees_with_the_ticket_and_the_others_say_why(tickets, model):
    # ONNX's export (seconds) once, on the MLP; the ConvNet's forms besides it
    onnx = model == "mlp"
    doc = bench_json(str(tickets[model]), *(() if onnx else ("--forms", "sparse,bsr,2:4")))
    jsonschema = pytest.importorskip("jsonschema")
    jsonschema.validate(doc, schema_of("bench"))
    (t,) = doc["tickets"]
    forms = {f["name"]: f for f in t["forms"]}
    assert list(forms) == ["dense", "sparse", *(["onnx"] if onnx else []), "bsr", "2:4"]
    for name in ("dense", "sparse", "onnx") if onnx else ("dense", "sparse"):
        f = forms[name]
        a = f["agreement"]
        assert f["available"] and a["agrees"], f
        assert a["max_abs_diff"] <= a["tolerance"] and a["accuracy"] == a["reference_accuracy"]
        assert [x["batch"] for x in f["timings"]] == [1, 16] and f["file_bytes"] > 0 and f["memory_bytes"] > 0
    assert forms["dense"]["agreement"]["max_abs_diff"] == 0.0  # W * M in a plain module is the ticket's network
    assert all(x["speedup"] == 1.0 for x in forms["dense"]["timings"])
    assert not forms["bsr"]["available"] and "whole square blocks" in forms["bsr"]["reason"]
    assert not forms["2:4"]["available"] and "CUDA only" in forms["2:4"]["reason"] and "cpu" in forms["2:4"]["reason"]
    assert forms["2:4"]["timings"] == [] and [p["batch"] for p in t["verdict"]] == [1, 16]
    assert doc["threads"] == 1 and doc["memory_measure"] == "tensors" and doc["clock"] == "wall"


def block_mask(rows: int, cols: int, block: tuple[int, int], g: torch.Generator) -> torch.Tensor:
    r, c = block
    keep = torch.rand(rows // r, cols // c, generator=g) < 0.4
    return keep.repeat_interleave(r, 0).repeat_interleave(c, 1)


@pytest.mark.parametrize("seed", range(6))
def test_block_size_is_read_from_the_mask(seed):
    g = torch.Generator().manual_seed(seed)
    rng = random.Random(seed)
    block = rng.choice([(1, 4), (4, 1), (2, 2), (2, 4), (4, 4), (8, 2), (8, 8)])  # at least 4 entries
    rows, cols = block[0] * rng.randint(2, 6), block[1] * rng.randint(2, 6)
    mask = block_mask(rows, cols, block, g)
    found = kernels.block_of(mask)
    assert found is not None and found[0] * found[1] >= block[0] * block[1]
    r, c = found  # the block found is whole blocks indeed (the oracle: every block kept or dropped whole)
    sums = mask.reshape(rows // r, r, cols // c, c).sum(dim=(1, 3))
    assert bool(((sums == 0) | (sums == r * c)).all())
    flipped = mask.clone()
    flipped[0, 0] = ~flipped[0, 0]  # one entry off: no block of 4 or more is whole (a 1x2 or 2x1 block is too small)
    assert kernels.block_of(flipped) is None


def test_n_of_m_masks_are_told_apart():
    two_of_four = torch.tensor([[1, 0, 1, 0, 0, 1, 1, 0]], dtype=torch.bool)
    assert kernels.is_n_of_m(two_of_four) and not kernels.is_n_of_m(two_of_four, n=1)
    assert not kernels.is_n_of_m(torch.ones(1, 8, dtype=torch.bool)) and not kernels.is_n_of_m(torch.ones(1, 6))


def test_the_block_sparse_form_reproduces_a_network_with_block_masks(tmp_path):
    net, _ = build_net(parse_model("mlp:64-32-16-10"), InitSpec(seed=3), None)
    g = torch.Generator().manual_seed(0)
    blocks = {(32, 64): (4, 4), (16, 32): (8, 2), (10, 16): (2, 2)}
    masks = {n: block_mask(*net.weights[n].shape, blocks[tuple(net.weights[n].shape)], g) for n in net.names}
    src = bench_forms.Source(net, masks, torch.device("cpu"), tmp_path, "digits")
    built = bench_forms.bsr(src)
    assert built.detail == "3 of 3 Linear layers as 2x2, 4x4 blocks"  # 8x2 blocks are whole 2x2 ones: square
    x = torch.randn(50, 64, generator=g)
    y = torch.randint(0, 10, (50,), generator=g)
    with torch.inference_mode():
        a = agreement(logits(built.run, x), logits(lambda xb: net(xb, masks), x), y)
    assert a.agrees and a.max_abs_diff <= a.tolerance
    assert built.file_bytes < bench_forms.dense(src).file_bytes  # the file holds the kept blocks only
    unstructured = {n: torch.rand(net.weights[n].shape, generator=g) < 0.3 for n in net.names}
    with pytest.raises(bench_forms.Unavailable, match="whole square blocks"):
        bench_forms.bsr(bench_forms.Source(net, unstructured, torch.device("cpu"), tmp_path, "digits"))


@pytest.mark.skipif(
    not torch.cuda.is_available(), reason="2:4 semi-structured kernels need CUDA; this machine has none"
)
def test_the_two_of_four_form_runs_on_cuda(tmp_path):  # pragma: no cover - CUDA only
    net, _ = build_net(parse_model("mlp:128-64-64"), InitSpec(seed=1), None)
    net.to(torch.device("cuda"))
    masks = {n: torch.tensor([1, 1, 0, 0], dtype=torch.bool, device="cuda").repeat(64, 32) for n in net.names}
    built = bench_forms.semi_structured(bench_forms.Source(net, masks, torch.device("cuda"), tmp_path, "x"))
    x = torch.randn(64, 128, device="cuda")
    ref = net(x, masks)
    assert float((built.run(x) - ref).abs().max()) <= 1e-2 * float(ref.abs().max())


def test_semi_structured_on_the_cpu_says_why(tmp_path):
    net, _ = build_net(parse_model("mlp:64-16-10"), InitSpec(), None)
    masks = {n: torch.ones_like(net.weights[n], dtype=torch.bool) for n in net.names}
    with pytest.raises(bench_forms.Unavailable, match="CUDA only; this bench runs on cpu"):
        bench_forms.semi_structured(bench_forms.Source(net, masks, torch.device("cpu"), tmp_path, "digits"))


def t(batch: int, median: float, q1: float, q3: float) -> Timing:
    return Timing(batch, median, q1, q3, 9)


def test_the_verdict_names_the_fastest_form_and_keeps_dense_within_noise():
    dense_wins = timing.pick({"dense": t(512, 1.0, 0.9, 1.1), "sparse": t(512, 2.0, 1.9, 2.1)})
    assert (dense_wins.fastest, dense_wins.recommended) == ("dense", "dense")
    assert dense_wins.line() == "dense is fastest at batch 512"
    clear = timing.pick({"dense": t(64, 4.0, 3.8, 4.2), "sparse": t(64, 1.0, 0.9, 1.1), "onnx": t(64, 2.0, 2, 2)})
    assert (clear.fastest, clear.recommended, clear.within_noise, clear.speedup) == ("sparse", "sparse", False, 4.0)
    assert clear.line() == "sparse is fastest at batch 64 (4.00x dense)"
    noisy = timing.pick({"dense": t(1, 1.0, 0.8, 1.3), "sparse": t(1, 0.95, 0.7, 1.2)})
    assert (noisy.fastest, noisy.recommended, noisy.within_noise) == ("sparse", "dense", True)
    assert "within noise of dense: keep dense" in noisy.line()


def test_a_form_that_disagrees_is_timed_but_never_the_verdict():
    def report(name: str, diff: float) -> FormReport:
        return FormReport(name, name, True, agreement=Agreement(diff, 1e-4, 0.9, 0.9, 10))

    reports = {"dense": report("dense", 0.0), "2:4": report("2:4", 3e-3), "sparse": report("sparse", 1e-6)}
    timings = {64: {"dense": t(64, 4.0, 3.9, 4.1), "2:4": t(64, 1.0, 1.0, 1.0), "sparse": t(64, 2.0, 2.0, 2.0)}}
    (pick,) = timing.verdict(agreeing(timings, reports))
    assert (pick.fastest, pick.recommended, pick.speedup) == ("sparse", "sparse", 2.0)


def test_forms_are_timed_interleaved_and_the_speedup_is_over_dense():
    now = [0.0]
    order: list[str] = []

    def form(name: str, cost: float) -> timing.Forward:
        def run() -> None:
            order.append(name)
            now[0] += cost

        return run

    cost = {"dense": 8e-3, "sparse": 2e-3, "onnx": 4e-3}  # each call at least MIN_SAMPLE_S: one call a sample
    got = timing.interleaved({n: form(n, c) for n, c in cost.items()}, 64, 3, clock=lambda: now[0])
    assert {n: round(x.speedup or 0, 9) for n, x in got.items()} == {"dense": 1.0, "sparse": 4.0, "onnx": 2.0}
    assert got["sparse"].median_s == pytest.approx(2e-3) and got["sparse"].throughput == pytest.approx(32_000)
    short = {"dense": form("dense", 4e-3), "sparse": form("sparse", 5e-4)}  # a short call: several a sample
    assert timing.interleaved(short, 1, 3, clock=lambda: now[0])["sparse"].median_s == pytest.approx(5e-4)
    order.clear()
    timing.interleaved({n: form(n, c) for n, c in cost.items()}, 64, 3, clock=lambda: now[0])
    timed = order[-9:]  # after the warm-up and the calibration calls, each repeat starts one form later
    assert timed == ["dense", "sparse", "onnx", "sparse", "onnx", "dense", "onnx", "dense", "sparse"]


def test_a_folder_is_one_row_each_and_a_bad_file_is_an_error_row(tickets, tmp_path):
    folder = tmp_path / "many"
    folder.mkdir()
    for name in ("mlp", "vgg"):
        (folder / f"{name}.safetensors").write_bytes(tickets[name].read_bytes())
    (folder / "junk.safetensors").write_bytes(b"not a ticket")
    r = runner.invoke(app, ["bench", str(folder), *QUICK, "--forms", "sparse", "--json"])
    assert r.exit_code == 1, r.output
    doc = json.loads(r.stdout)
    rows = {Path(x["ticket"]).name: x for x in doc["tickets"]}
    assert sorted(rows) == ["junk.safetensors", "mlp.safetensors", "vgg.safetensors"]
    assert "error" in rows["junk.safetensors"] and "error" not in rows["mlp.safetensors"]
    assert [f["name"] for f in rows["vgg.safetensors"]["forms"]] == ["dense", "sparse"]
    table = runner.invoke(app, ["bench", str(folder), *QUICK, "--forms", "sparse"], env={"COLUMNS": "80"})
    assert table.exit_code == 1 and "3 tickets" in table.stdout and "mlp.safetensors" in table.stdout
    assert "error:" in table.stdout and "could not be benched" in table.output


def test_ticket_bench_returns_the_typed_result(tickets, tmp_path):
    result = tc.load(tickets["mlp"]).bench(batch=[4], repeats=3, forms=["sparse"], threads=1, clock="thread")
    assert isinstance(result, BenchResult) and result.batches == (4,) and result.threads == 1
    assert result.clock == "thread" and all(x.median_s > 0 for f in result.tickets[0].forms for x in f.timings)
    (row,) = result.tickets
    assert [f.name for f in row.forms] == ["dense", "sparse"] and row.form("sparse").agreement.agrees
    assert result["tickets"][0]["verdict"][0]["batch"] == 4  # read as its document, like every result
    with pytest.raises(dataclasses.FrozenInstanceError):
        result.threads = 2  # type: ignore[misc]
    with pytest.raises(UsageError, match="batch="):
        tc.load(tickets["mlp"]).bench(batch=[0])


def test_plot_is_written(tickets, tmp_path):
    png = tmp_path / "bench.png"
    r = runner.invoke(app, ["bench", str(tickets["mlp"]), *QUICK, "--forms", "sparse", "--plot", str(png), "--json"])
    assert r.exit_code == 0, r.output
    assert png.read_bytes()[:4] == b"\x89PNG" and json.loads(r.stdout)["plot"] == str(png)


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["--batch", "0"], "--batch takes distinct batch sizes"),
        (["--batch", "1,x"], "--batch takes comma-separated"),
        (["--repeats", "2"], "--repeats must be"),
        (["--forms", "csr"], "unknown form 'csr'"),
        (["--clock", "thread", "--threads", "2"], "--clock thread counts only the calling thread's CPU time"),
    ],
)
def test_bad_options_are_one_line(tickets, args, said):
    r = runner.invoke(app, ["bench", str(tickets["mlp"]), *args])
    assert r.exit_code == 2 and said in r.output and "Traceback" not in r.output


def test_the_spec_keeps_dense_first_and_the_forms_in_order():
    assert bench_spec(forms="onnx,sparse").forms == ("dense", "sparse", "onnx")
    assert bench_spec() == BenchSpec() and bench_spec("8,2").batches == (8, 2)


def test_a_block_ticket_runs_block_sparse_and_a_two_of_four_ticket_is_recognised(tmp_path):
    """Tickets made with --block and --structure: the block ticket's masks run as BSR and agree with the ticket's
    network; the 2:4 ticket's masks are told to be 2:4 (its kernels need CUDA, which the bench says)."""
    made = {}
    for name, pattern in (("block", ["--block", "4x4", "--sparsity", "0.75"]), ("nm", ["--structure", "2:4"])):
        out = tmp_path / f"{name}.safetensors"
        args = ["extract", *DATA[:-2], "--method", "random", "--model", "mlp:64-32-16-10", *pattern, "--out", str(out)]
        r = runner.invoke(app, args)
        assert r.exit_code == 0, r.output
        made[name] = out
    forms = {f["name"]: f for f in bench_json(str(made["block"]), "--forms", "bsr")["tickets"][0]["forms"]}
    assert forms["bsr"]["available"] and forms["bsr"]["agreement"]["agrees"], forms["bsr"]
    assert "4x4" in forms["bsr"]["description"], forms["bsr"]
    t = tc.load(made["nm"])
    assert all(kernels.is_n_of_m(m) for m in t.masks.values())
    forms = {f["name"]: f for f in bench_json(str(made["nm"]), "--forms", "2:4")["tickets"][0]["forms"]}
    assert not forms["2:4"]["available"] and "CUDA only" in forms["2:4"]["reason"]
