"""ResNets and wide ResNets with BatchNorm, the ViT with LayerNorm, residual and normalised MLPs, user factories
with norm layers. Proves: layouts and plain-PyTorch parameter names (torchvision's for ResNet-18);
the masked forward equals the plain module holding W * M, with running and with batch statistics; every
registered model builds on the meta device; BatchNorm statistics are recalibrated deterministically, so a ticket
re-evaluates exactly, in a fresh process too; tickets written before the convention still re-evaluate; and
geometries or specs that do not fit are refused in one line."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from functools import partial
from pathlib import Path

import pytest
import torch
from helpers import DIGITS, EXAMPLES, IMAGE_MODELS, one_line, write_cifar
from torch import nn
from typer.testing import CliRunner

from ticketcli.cli.app import app
from ticketcli.drift.sites import measure_traced, mlp_sites
from ticketcli.errors import UsageError
from ticketcli.methods import METHODS
from ticketcli.models import batchnorm
from ticketcli.models.build import build_model
from ticketcli.models.init import init_weights
from ticketcli.models.masked import MaskedNet
from ticketcli.models.registry import MODELS, parse_model
from ticketcli.runs import build as runs_build
from ticketcli.runs import evaluate as runs_evaluate
from ticketcli.runs import extract as runs_extract
from ticketcli.runs import record as runs_record
from ticketcli.settings.readers import method_options
from ticketcli.specs.run import DataSpec, InitSpec, MethodSpec, ModelPolicy, ModelSpec, ReaderSpec, RunSpec
from ticketcli.ticketfile import ticket as ticket_io
from ticketcli.ticketfile.record import ModelRecord

TRUSTED = ModelPolicy(trust_model_code=True)  # these tests' own factories: the user opted in

runner = CliRunner()
MLP_VARIANTS = [
    "mlp:64-16-16-10+res",
    "mlp:64-16-16-10+norm=batch",
    "mlp:64-16-16-10+res+norm=layer+bias",
    "mlp:64-16-16-10+norm=rms",
]
QUICK = [
    "--dataset",
    "digits",
    "--n-extract",
    "64",
    "--n-val",
    "32",
    "--epochs",
    "1",
    "--batch-size",
    "32",
    "--quiet",
    "--json",
]


def spec_of(text: str, geometry=DIGITS) -> ModelSpec:
    return parse_model(text).with_data(*geometry)


def net_of(text: str, seed: int = 0, geometry=DIGITS) -> MaskedNet:
    spec = spec_of(text, geometry)
    module = build_model(spec)
    net = MaskedNet(module, spec)
    net.load_weights(init_weights(module, InitSpec(seed=seed)))
    return net


def names(module: nn.Module) -> list[str]:
    return [n for n, _ in module.named_parameters()]


# ---------------------------------------------------------------- layouts and names


def test_resnet20_layout():
    module = build_model(spec_of("resnet20", ((3, 32, 32), 10)))
    assert sum(p.numel() for p in module.parameters()) == 270_896  # option-B shortcuts: 2,560 above He et al.'s
    n = names(module)
    assert n[:3] == ["conv1.weight", "layer1.0.conv1.weight", "layer1.0.conv2.weight"] and n[-1] == "fc.weight"
    assert "layer2.0.downsample.0.weight" in n and "layer1.0.downsample.0.weight" not in n
    assert len([x for x in n if "downsample" in x]) == 2
    bns = [m for m in module.modules() if isinstance(m, nn.BatchNorm2d)]
    assert len(bns) == 1 + 2 * 9 + 2 and not any(b.affine for b in bns)  # non-affine: buffers only
    assert "layer3.2.bn2.running_var" in module.state_dict()
    assert module(torch.randn(2, 3, 32, 32)).shape == (2, 10)


def test_resnet18_names_and_blocks_match_torchvision():
    tv = pytest.importorskip("torchvision")
    with torch.device("meta"):
        ours = build_model(spec_of("resnet18", ((3, 32, 32), 10)))
        theirs = tv.models.resnet18(num_classes=10)
    ref = {
        n: tuple(p.shape)
        for n, p in theirs.named_parameters()
        if ".bn" not in n
        and not n.startswith("bn")
        and not n.endswith(("downsample.1.weight", "downsample.1.bias"))
        and n != "fc.bias"
    }
    mine = {n: tuple(p.shape) for n, p in ours.named_parameters()}
    # torchvision's names and order, BatchNorm's affine parameters and the classifier's bias (ours are bias-free
    # unless +bias) aside
    assert list(mine) == list(ref)
    assert {n for n in mine if mine[n] != ref[n]} == {"conv1.weight"}  # the CIFAR stem: 3x3, not 7x7
    assert mine["conv1.weight"] == (64, 3, 3, 3)
    # one of our blocks computes exactly what torchvision's BasicBlock computes with the same weights
    block = build_model(spec_of("resnet20", ((3, 32, 32), 10))).layer2[0]
    norm = partial(nn.BatchNorm2d, affine=False)
    ref_block = tv.models.resnet.BasicBlock(
        16, 32, 2, nn.Sequential(nn.Conv2d(16, 32, 1, 2, bias=False), norm(32)), norm_layer=norm
    )
    torch.manual_seed(0)
    for p in block.parameters():
        p.data.normal_()
    ref_block.load_state_dict(block.state_dict())
    x = torch.randn(4, 16, 8, 8)
    assert torch.equal(block.train()(x), ref_block.train()(x))


def test_wide_resnet_layout():
    with torch.device("meta"):
        module = build_model(spec_of("wrn:16-4", ((3, 32, 32), 10)))
    assert sum(p.numel() for p in module.parameters()) == 2_745_264  # WRN-16-4: 2.7M (Zagoruyko & Komodakis)
    n = names(module)
    assert n[:4] == ["conv1.weight", "layer1.0.conv1.weight", "layer1.0.conv2.weight", "layer1.0.shortcut.weight"]
    assert "layer1.1.shortcut.weight" not in n and n[-1] == "fc.weight"
    assert tuple(module.get_parameter("layer3.1.conv2.weight").shape) == (256, 256, 3, 3)


def test_vit_layout():
    module = build_model(spec_of("vit:p4-d64-l4-h4", ((1, 28, 28), 10)))
    shapes = {n: tuple(p.shape) for n, p in module.named_parameters()}
    assert list(shapes)[:5] == [
        "patch_embed.proj.weight",
        "blocks.0.attn.qkv.weight",
        "blocks.0.attn.proj.weight",
        "blocks.0.mlp.fc1.weight",
        "blocks.0.mlp.fc2.weight",
    ]
    assert shapes["patch_embed.proj.weight"] == (64, 1, 4, 4) and shapes["blocks.3.attn.qkv.weight"] == (192, 64)
    assert shapes["blocks.0.mlp.fc1.weight"] == (256, 64) and shapes["head.weight"] == (10, 64)
    assert sum(p.numel() for p in module.parameters()) == 198_272
    assert tuple(module.pos_embed.shape) == (49, 64) and "pos_embed" not in module.state_dict()  # fixed, not state
    assert torch.unique(module.pos_embed, dim=0).shape[0] == 49  # every patch position is told apart
    assert not any(isinstance(m, nn.LayerNorm) and m.elementwise_affine for m in module.modules())
    assert module(torch.randn(2, 1, 28, 28)).shape == (2, 10)
    wide = build_model(spec_of("vit:p4-d64-l4-h4-m2", ((3, 32, 32), 100)))
    assert tuple(wide.get_parameter("blocks.0.mlp.fc1.weight").shape) == (128, 64)
    assert tuple(wide.pos_embed.shape) == (64, 64) and tuple(wide.head.weight.shape) == (100, 64)


def test_mlp_variants_layout():
    plain = build_model(parse_model("mlp:64-16-16-16-10"))
    res = build_model(parse_model("mlp:64-16-16-16-10+res+norm=batch+bias"))
    assert names(res) == names(build_model(parse_model("mlp:64-16-16-16-10+bias")))  # norms add no parameter
    assert plain.norms is None and plain.skips == frozenset()
    assert res.skips == {1, 2} and [type(m) for m in res.norms] == [nn.BatchNorm1d] * 3
    assert build_model(parse_model("mlp:64-32-16-16-10+res")).skips == {2}  # only where widths agree


@pytest.mark.parametrize("text", sorted({*EXAMPLES.values(), *MLP_VARIANTS}))
def test_every_model_builds_on_the_meta_device(text):
    spec = spec_of(text)
    with torch.device("meta"):
        meta = build_model(spec)
    cpu = build_model(spec)
    assert all(p.is_meta for p in meta.parameters())
    assert {n: p.shape for n, p in meta.named_parameters()} == {n: p.shape for n, p in cpu.named_parameters()}


def test_registry_is_covered_by_examples():
    assert set(MODELS.names()) == set(EXAMPLES)


# ---------------------------------------------------------------- masked forward vs plain PyTorch


@pytest.mark.parametrize("text", sorted({*(EXAMPLES[n] for n in IMAGE_MODELS), *MLP_VARIANTS}))
def test_masked_forward_equals_the_plain_model_holding_w_times_m(text):
    net = net_of(text, seed=3)
    g = torch.Generator().manual_seed(1)
    x = torch.randn(6, 1, 8, 8, generator=g)
    masks = {n: torch.rand(w.shape, generator=g) < 0.6 for n, w in net.weights.items()}
    net.calibration = torch.randn(40, 1, 8, 8, generator=g)
    net.calibrate(masks)
    running = net(x, masks)  # evaluation: running statistics
    batch = net.forward_with(x, net.masked(masks))  # training: batch statistics
    plain = net.module
    with torch.no_grad():
        for n, p in plain.named_parameters():
            p.mul_(masks[n])  # the plain model now holds W * M
        assert torch.equal(plain.eval()(x), running)
        assert torch.equal(plain.train()(x), batch)
    plain.eval()
    if net.batchnorms:
        assert not torch.equal(running, batch)  # the two kinds of statistics really differ


# ---------------------------------------------------------------- BatchNorm statistics


def test_recalibration_is_deterministic_cached_and_refreshed(monkeypatch):
    net = net_of("wrn:10-1")
    g = torch.Generator().manual_seed(0)
    net.calibration = torch.randn(50, 1, 8, 8, generator=g)
    masks = {n: torch.rand(w.shape, generator=g) < 0.5 for n, w in net.weights.items()}
    calls = []
    real = batchnorm.recalibrate
    monkeypatch.setattr(batchnorm, "recalibrate", lambda *a: (calls.append(1), real(*a)))

    def stats():
        return [b.clone() for m in net.batchnorms for b in (m.running_mean, m.running_var)]

    net.calibrate(masks)
    first = stats()
    assert any(float(s.abs().max()) > 0.01 for s in first[::2])  # no longer the initial zeros
    net.calibrate(masks)
    assert len(calls) == 1  # nothing changed: nothing recomputed
    net.load_weights(net.weights)
    net.calibrate(masks)
    assert len(calls) == 2 and all(torch.equal(a, b) for a, b in zip(first, stats()))  # same inputs, same bits
    masks[net.names[0]][0] ^= True  # an in-place edit of a mask counts as a change
    net.calibrate(masks)
    assert len(calls) == 3 and not all(torch.equal(a, b) for a, b in zip(first, stats()))
    net.calibrate(None)  # the dense network has statistics of its own
    assert len(calls) == 4


def test_recalibration_chunks_never_hold_one_example():
    bn = nn.BatchNorm1d(3, affine=False)
    x = torch.randn(5, 3)
    batchnorm.recalibrate([bn], bn, x, batch_size=1)  # 2 chunks of 3 and 2, not 5 of 1
    assert int(bn.num_batches_tracked) == 2
    with pytest.raises(UsageError, match="batch of 1"):
        batchnorm.recalibrate([bn], bn, x[:1], batch_size=500)


def extract(tmp_path: Path, model: str, method: str = "edge-popup", n_extract: int = 64, name: str = "t") -> Path:
    spec = RunSpec(
        model=spec_of(model),
        init=InitSpec(seed=1),
        data=DataSpec(name="digits", n_extract=n_extract, n_val=32, split_seed=1),
        method=MethodSpec(name=method, sparsity=0.7, epochs=1, batch_size=32),
        device="cpu",
    )
    out = tmp_path / f"{name}.safetensors"
    runs_extract.extract_ticket(spec, out=out)
    return out


@pytest.mark.parametrize("model", ["resnet20", "mlp:64-16-16-10+res+norm=batch"])
@pytest.mark.slow
def test_batchnorm_ticket_reevaluates_exactly_in_a_fresh_process(tmp_path, model):
    out = extract(tmp_path, model)
    tk = ticket_io.load(out)
    assert tk.model.batchnorm == batchnorm.RECORD
    env = {**__import__("os").environ, "PYTHONPATH": str(Path(runs_build.__file__).parents[2])}
    p = subprocess.run(
        [sys.executable, "-m", "ticketcli", "evaluate", str(out), "--json"],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert p.returncode == 0, p.stderr
    r = json.loads(p.stdout)
    assert r["reproduced"] and r["metrics"]["test"]["correct"] == tk.metrics.test.correct
    assert r["metrics"]["test"]["loss"] == tk.metrics.test.loss


@pytest.mark.parametrize("model", MLP_VARIANTS + ["vit:p4-d16-l2-h2-m2"])
def test_variants_extract_and_reevaluate(tmp_path, model):
    out = extract(tmp_path, model, method="augmented")
    tk = ticket_io.load(out)
    assert tk.model.recorded("batchnorm") == ("norm=batch" in model)
    r = runs_evaluate.evaluate_ticket(out, ReaderSpec(data=DataSpec(), device="cpu", policy=TRUSTED))
    assert r["reproduced"] and tk.model.spec == spec_of(model).to_string()


@pytest.mark.parametrize("name", METHODS.names())
def test_every_method_runs_on_a_batchnorm_network(tmp_path, name):
    spec = RunSpec(
        model=spec_of("mlp:64-16-16-10+norm=batch"),
        init=InitSpec(seed=2),
        data=DataSpec(name="digits", n_extract=96, n_val=32, split_seed=2),
        method=MethodSpec(
            name=name,
            sparsity=0.7,
            epochs=2,
            batch_size=48,
            options={
                k: v
                for k, v in dict(imp_rounds=2, synflow_rounds=5, regrow_every=1).items()
                if k in method_options(name)
            },
        ),
        device="cpu",
    )
    out = tmp_path / "t.safetensors"
    runs_extract.extract_ticket(spec, out=out)
    assert runs_evaluate.evaluate_ticket(out, ReaderSpec(data=DataSpec(), device="cpu", policy=TRUSTED))["reproduced"]


def test_grasp_differentiates_twice_through_the_vit(tmp_path):
    out = extract(tmp_path, "vit:p4-d16-l1-h2", method="grasp")
    assert runs_evaluate.evaluate_ticket(out, ReaderSpec(data=DataSpec(), device="cpu", policy=TRUSTED))["reproduced"]


def test_a_batch_of_one_example_is_refused(tmp_path):
    r = runner.invoke(
        app,
        [
            "extract",
            "--model",
            "mlp:64-16-16-10+norm=batch",
            "--out",
            str(tmp_path / "t.safetensors"),
            *QUICK,
            "--n-extract",
            "33",
        ],
    )
    assert "batch of 1 example" in one_line(r)


# ---------------------------------------------------------------- user factories with norm layers

USER_NORMS = """
import torch
from torch import nn


def with_batchnorm():
    return nn.Sequential(nn.Conv2d(1, 6, 3, padding=1), nn.BatchNorm2d(6), nn.ReLU(), nn.Flatten(),
                         nn.Linear(6 * 64, 16), nn.BatchNorm1d(16), nn.ReLU(), nn.Linear(16, 10))


def with_layernorm():
    return nn.Sequential(nn.Flatten(), nn.Linear(64, 16), nn.LayerNorm(16), nn.GELU(), nn.Linear(16, 10))
"""


@pytest.fixture
def norm_module(tmp_path, monkeypatch):
    name = f"usernorms_{tmp_path.name.replace('-', '_')}"
    (tmp_path / f"{name}.py").write_text(textwrap.dedent(USER_NORMS))
    monkeypatch.syspath_prepend(str(tmp_path))
    yield name
    sys.modules.pop(name, None)


def test_user_factory_with_batchnorm(tmp_path, norm_module):
    out = tmp_path / "t.safetensors"
    r = runner.invoke(app, ["extract", "--model", f"{norm_module}:with_batchnorm", "--out", str(out), *QUICK])
    assert r.exit_code == 0, r.output
    tk = ticket_io.load(out)
    assert list(tk.masks) == ["0.weight", "0.bias", "4.weight", "4.bias", "7.weight", "7.bias"]  # not BN's
    assert tk.model.batchnorm == batchnorm.RECORD
    o = runs_build.open_ticket(out, ReaderSpec(data=DataSpec(), device="cpu", policy=TRUSTED))
    assert torch.equal(o.weights["1.weight"], torch.ones(6)) and torch.equal(o.weights["5.bias"], torch.zeros(16))
    r = runs_evaluate.evaluate_ticket(out, ReaderSpec(data=DataSpec(), device="cpu", policy=TRUSTED))
    assert r["reproduced"]
    o.net.calibrate(o.masks)
    assert float(o.net.module[1].running_mean.abs().max()) > 0  # recalibrated, not the factory's zeros


def test_user_factory_with_layernorm(tmp_path, norm_module):
    out = tmp_path / "t.safetensors"
    r = runner.invoke(app, ["extract", "--model", f"{norm_module}:with_layernorm", "--out", str(out), *QUICK])
    assert r.exit_code == 0, r.output
    tk = ticket_io.load(out)
    assert list(tk.masks) == ["1.weight", "1.bias", "4.weight", "4.bias"] and not tk.model.recorded("batchnorm")
    assert tk.model.parameters["2.weight"] == (16,)  # LayerNorm's affine: recorded, frozen, unmasked
    r = runner.invoke(app, ["evaluate", str(out), "--json", "--trust-model-code"])
    assert r.exit_code == 0 and json.loads(r.stdout)["reproduced"] is True


def test_ticket_without_batchnorm_record_keeps_the_old_evaluation(tmp_path, norm_module, monkeypatch):
    """A BatchNorm ticket written before the convention: eval-mode BatchNorm on the factory's statistics."""
    real_build, real_record = runs_build.build_net, runs_record.model_record

    def legacy_build(*a):
        net, weights = real_build(*a)
        net.bn_statistics = "frozen"
        return net, weights

    monkeypatch.setattr(runs_build, "build_net", legacy_build)
    monkeypatch.setattr(
        runs_record, "model_record", lambda m, n: {k: v for k, v in real_record(m, n).items() if k != "batchnorm"}
    )
    out = tmp_path / "old.safetensors"
    assert (
        runner.invoke(app, ["extract", "--model", f"{norm_module}:with_batchnorm", "--out", str(out), *QUICK]).exit_code
        == 0
    )
    monkeypatch.undo()
    assert not ticket_io.load(out).model.recorded("batchnorm")
    r = runs_evaluate.evaluate_ticket(out, ReaderSpec(data=DataSpec(), device="cpu", policy=TRUSTED))
    assert r["reproduced"]
    o = runs_build.open_ticket(out, ReaderSpec(data=DataSpec(), device="cpu", policy=TRUSTED))
    assert o.net.bn_statistics == "frozen"


def test_foreign_batchnorm_record_is_refused(tmp_path):
    out = extract(tmp_path, "mlp:64-16-16-10+norm=batch")
    tk = ticket_io.load(out)
    tk.model = ModelRecord.of({**tk.model.to_json(), "batchnorm": {**batchnorm.RECORD, "statistics": "stored"}})
    ticket_io.save(tk, out, overwrite=True)
    err = one_line(runner.invoke(app, ["evaluate", str(out)]))
    assert "unsupported batchnorm record" in err
    plain = extract(tmp_path, "mlp:64-16-10", name="plain")
    tk = ticket_io.load(plain)
    tk.model = ModelRecord.of({**tk.model.to_json(), "batchnorm": batchnorm.RECORD})
    ticket_io.save(tk, plain, overwrite=True)
    assert "has no BatchNorm layer" in one_line(runner.invoke(app, ["evaluate", str(plain)]))


@pytest.mark.slow
def test_torchvision_factory_gets_the_dataset_classes(tmp_path):
    pytest.importorskip("torchvision")
    write_cifar(tmp_path)
    out = tmp_path / "tv.safetensors"
    data = ["--dataset", "cifar10", "--data-dir", str(tmp_path), "--n-extract", "40", "--n-val", "20"]
    r = runner.invoke(
        app,
        [
            "extract",
            "--model",
            "torchvision.models:resnet18",
            "--out",
            str(out),
            *data,
            "--epochs",
            "1",
            "--batch-size",
            "20",
            "--quiet",
            "--json",
        ],
    )
    assert r.exit_code == 0, r.output
    tk = ticket_io.load(out)
    assert tk.model.spec == "torchvision.models:resnet18@3x32x32-10" and tk.shapes["fc.weight"] == [10, 512]
    assert "bn1.weight" not in tk.masks and tk.model.batchnorm == batchnorm.RECORD
    r = runner.invoke(
        app, ["evaluate", str(out), "--data-dir", str(tmp_path), "--json", "--model", "torchvision.models:resnet18"]
    )
    assert r.exit_code == 0 and json.loads(r.stdout)["reproduced"] is True


# ---------------------------------------------------------------- spec strings and refusals


@pytest.mark.parametrize(
    "text",
    [
        "resnet20",
        "resnet18@3x32x32-10",
        "wrn:16-4",
        "wrn:28-10+bias",
        "vit:p4-d64-l4-h4",
        "vit:p4-d64-l4-h4-m2@3x32x32-10+bias",
        "mlp:784-256-256-10+res",
        "mlp:784-256-256-10+norm=layer",
        "mlp:784-256-256-10+res+norm=rms+bias",
        "torchvision.models:resnet18@3x32x32-10",
    ],
)
def test_new_spec_strings_round_trip(text):
    spec = parse_model(text)
    assert spec.to_string() == text and parse_model(spec.to_string()) == spec


def test_suffixes_print_in_canonical_order():
    spec = parse_model("mlp:64-16-16-10+bias+norm=batch+res")
    assert spec.to_string() == "mlp:64-16-16-10+res+norm=batch+bias"
    assert spec.to_dict() == {
        "spec": "mlp:64-16-16-10+res+norm=batch+bias",
        "arch": "mlp",
        "widths": [64, 16, 16, 10],
        "residual": True,
        "norm": "batch",
        "bias": True,
    }


@pytest.mark.parametrize(
    "text,needle",
    [
        ("wrn:12-1", "6n+4"),
        ("wrn:16", "depth-width"),
        ("vit:p4-d18-l1-h4", "multiple of its 4 heads"),
        ("vit:p4-d64", "p<patch>-d<width>"),
        ("vit:p0-d16-l1-h2", "positive"),
        ("conv6+res", "+res and +norm apply to mlp specs only"),
        ("resnet20+norm=layer", "+res and +norm apply to mlp specs only"),
        ("mlp:64-32-16-10+res", "+res adds identity skips only"),
        ("mlp:64-16-16-10+norm=group", "unknown suffix +norm=group"),
        ("mlp:64-16-16-10+res+res", "+res given twice"),
        ("resnet20:3", "takes no ':' arguments"),
    ],
)
def test_invalid_new_specs(text, needle):
    with pytest.raises(UsageError) as e:
        parse_model(text)
    assert needle in str(e.value)


def test_geometries_that_do_not_fit_are_refused_naming_both_shapes(tmp_path, norm_module):
    def err(model: str) -> str:
        return one_line(
            runner.invoke(app, ["extract", "--model", model, "--out", str(tmp_path / "t.safetensors"), *QUICK])
        )

    e = err("vit:p3-d16-l1-h2")
    assert "3x3 patches do not tile 8x8 inputs" in e and "(1, 8, 8)" in e
    assert "too small" in err("vgg:8-M-8-M-8-M-8-M")
    e = err("resnet20@3x32x32-10")
    assert "(3, 32, 32)" in e and "(1, 8, 8)" in e
    assert "does not take" in err(f"{norm_module}:with_layernorm@1x8x8-10")
    if __import__("importlib").util.find_spec("torchvision"):
        e = err("torchvision.models:resnet18")  # 3 input channels, digits has 1
        assert "does not accept digits inputs of shape (1, 8, 8)" in e and "channels" in e


# ---------------------------------------------------------------- drift on residual and normalised MLPs


def test_drift_measures_the_activation_not_the_skip_sum():
    net = net_of("mlp:8-6-6-3+res")
    x, y = torch.randn(32, 8, generator=torch.Generator().manual_seed(0)), torch.arange(32) % 3
    mlp = net.module
    forward = partial(mlp.forward_with)
    s = measure_traced(
        net.weights,
        None,
        x,
        y,
        forward=mlp_sites(net.weights, torch.relu, forward),
        exact_zeros=True,
        zero_threshold=0.0,
        loss_fn=torch.nn.functional.cross_entropy,
    )
    a0 = torch.relu(x @ net.weights["layers.0.weight"].T)
    a1 = torch.relu(a0 @ net.weights["layers.1.weight"].T)  # layer 1's activation; its output is a0 + a1
    assert s["layers"]["layers.1"]["sparsity"] == pytest.approx(float((a1 == 0).double().mean()))
    assert s["layers"]["layers.0"]["sparsity"] == pytest.approx(float((a0 == 0).double().mean()))
    logits = (a0 + a1) @ net.weights["layers.2.weight"].T
    assert s["loss"] == pytest.approx(float(torch.nn.functional.cross_entropy(logits, y)), rel=1e-6)


def test_drift_runs_on_normalised_residual_mlps():
    for model in ("mlp:64-16-16-10+res+norm=batch", "mlp:64-16-16-10+norm=rms"):
        r = runner.invoke(
            app,
            ["drift", "--dataset", "digits", "--model", model, "--steps", "4", "--log-every", "2", "--quiet", "--json"],
        )
        assert r.exit_code == 0, r.output
        out = json.loads(r.stdout)
        assert out["model"] == model and len(out["runs"][0]["steps"]) == 3


def test_train_weak_on_a_batchnorm_ticket(tmp_path):
    """Weights train with batch statistics; every evaluation recalibrates for the weights it measures."""
    from ticketcli.weak.run import WeakSpec, train_weak

    out = extract(tmp_path, "mlp:64-16-16-10+res+norm=batch")
    r = train_weak(out, ReaderSpec(device="cpu"), spec=WeakSpec(epochs=2, batch_size=32), dense_baseline=True)
    tk = ticket_io.load(out)
    assert r.masked.initial.test.correct == tk.metrics.test.correct  # rewound = the ticket
    assert r.weights_check.masked_nonzero_after == 0
    assert r.masked.final.test.correct != r.masked.initial.test.correct
    assert r.dense is not None and r.dense.initial.test.correct != r.masked.initial.test.correct


def test_drift_refuses_a_one_example_probe_for_batchnorm():
    r = runner.invoke(
        app,
        [
            "drift",
            "--dataset",
            "digits",
            "--model",
            "mlp:64-16-16-10+norm=batch",
            "--steps",
            "2",
            "--probe-size",
            "1",
            "--quiet",
        ],
    )
    assert "batch of 1 example" in one_line(r) and "--probe-size" in r.stderr
