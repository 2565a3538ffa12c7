"""Every registered model (registry-driven), spec strings, user factories and checkpoints for them."""

from __future__ import annotations

import json
import math

import pytest
import torch
from helpers import DIGITS, EXAMPLES, IMAGE_MODELS, one_line, write_user_module
from safetensors.torch import save_file
from typer.testing import CliRunner

from ticketcli.cli.app import app
from ticketcli.errors import TicketFileError, UsageError
from ticketcli.models.build import build_model
from ticketcli.models.init import RELU_GAIN, init_weights
from ticketcli.models.masked import MaskedNet
from ticketcli.models.registry import MODELS, parse_model
from ticketcli.runs import build as runs_build
from ticketcli.runs import evaluate as runs_evaluate
from ticketcli.runs import extract as runs_extract
from ticketcli.seeding import fingerprint
from ticketcli.specs.run import DataSpec, InitSpec, MethodSpec, ModelPolicy, ModelSpec, ReaderSpec, RunSpec
from ticketcli.ticketfile import ticket as ticket_io
from ticketcli.ticketfile.record import ModelRecord

runner = CliRunner()
TRUSTED = ModelPolicy(trust_model_code=True)  # the user opted in to importing the factory a ticket names


def example(name: str) -> ModelSpec:
    return parse_model(EXAMPLES[name]).with_data(*DIGITS)


def test_every_family_declares_examples_that_parse_as_it_and_round_trip():
    for name in MODELS.names():
        assert MODELS.get(name).examples, f"{name} declares no example spec"
        for text in MODELS.get(name).examples:
            spec = parse_model(text)
            assert spec.arch == name and parse_model(spec.to_string()) == spec, text


@pytest.mark.parametrize("name", IMAGE_MODELS)
def test_builds_forward_shape_and_fast_path(name):
    spec = example(name)
    module = build_model(spec)
    assert all(not p.requires_grad for p in module.parameters())
    net = MaskedNet(module, spec)
    net.load_weights(init_weights(module, InitSpec(seed=1)))
    assert net.names == [n for n, _ in module.named_parameters()]  # built-in models: every parameter is masked
    x = torch.randn(3, 1, 8, 8)
    out = net(x)
    assert out.shape == (3, 10)
    masks = {n: torch.rand(w.shape) < 0.5 for n, w in net.weights.items()}
    masked = {n: net.weights[n] * masks[n] for n in net.names}
    # the fast path, functional_call and a module that holds W * M all agree exactly
    assert torch.equal(net(x, masks), torch.func.functional_call(module, masked, (x,)))
    net.load_weights({**net.weights, **masked})
    assert torch.equal(net(x), torch.func.functional_call(module, masked, (x,)))


@pytest.mark.parametrize("name", MODELS.names())
def test_init_is_deterministic_and_uses_conv_fan_in(name):
    module = build_model(example(name))
    a, b = init_weights(module, InitSpec(seed=4)), init_weights(module, InitSpec(seed=4))
    c = init_weights(module, InitSpec(seed=5))
    assert fingerprint(a) == fingerprint(b) != fingerprint(c)
    for n, w in a.items():
        fan = math.prod(w.shape[1:])  # in_channels * kh * kw for a conv, in_features for a linear
        bound = RELU_GAIN / math.sqrt(0.5 * fan)
        assert float(w.abs().max()) <= bound and float(w.abs().max()) > 0.9 * bound, n


@pytest.mark.parametrize("name", IMAGE_MODELS)
@pytest.mark.slow
def test_extract_evaluate_round_trip(name, tmp_path):
    spec = RunSpec(
        model=example(name),
        init=InitSpec(seed=2),
        data=DataSpec(name="digits", n_extract=32, n_val=32, split_seed=2),
        method=MethodSpec(name="edge-popup", sparsity=0.5, epochs=1, batch_size=32),
        device="cpu",
    )
    out = tmp_path / "t.safetensors"
    s = runs_extract.extract_ticket(spec, out=out)
    assert s["model"] == example(name).to_string()
    r = runs_evaluate.evaluate_ticket(out, ReaderSpec(data=DataSpec(), device="cpu"))
    assert r.reproduced and r.test.correct == s.metrics.test.correct


@pytest.mark.parametrize(
    "text",
    [
        "mlp:784-256-256-256-10",
        "mlp:64-128-10+bias",
        "conv6",
        "conv2+bias",
        "conv4@3x32x32-10",
        "lenet300@1x28x28-10+bias",
        "vgg:64-64-M-128-128-M-256-256-M",
        "vgg:8-M@3x32x32-100+bias",
        "my_pkg.my_module:build_net",
        "mod:f",
    ],
)
def test_spec_strings_round_trip(text):
    spec = parse_model(text)
    assert spec.to_string() == text and parse_model(spec.to_string()) == spec


def test_paper_mlp_spec_is_unchanged():
    spec = parse_model("mlp:784-256-256-256-10")
    assert spec == ModelSpec() and spec.to_dict() == {
        "spec": "mlp:784-256-256-256-10",
        "arch": "mlp",
        "widths": [784, 256, 256, 256, 10],
        "bias": False,
    }
    assert parse_model("conv6").with_data((3, 32, 32), 10).to_string() == "conv6@3x32x32-10"


@pytest.mark.parametrize(
    "text",
    [
        "mlp",
        "mlp:784",
        "mlp:784-0-10",
        "vgg",
        "vgg:M-64",
        "vgg:64-X",
        "conv6:64",
        "mlp:784-10@1x28x28-10",
        "conv6@0x28x28-10",
        "Conv6",
        "a.b:c:d",
    ],
)
def test_invalid_spec_strings(text):
    with pytest.raises(UsageError):
        parse_model(text)


def test_conv_family_layout():
    module = build_model(parse_model("conv6@3x32x32-10"))
    convs = [m for m in module.features if isinstance(m, torch.nn.Conv2d)]
    assert [m.out_channels for m in convs] == [64, 64, 128, 128, 256, 256]
    assert all(m.bias is None and m.kernel_size == (3, 3) for m in convs)
    linears = [m for m in module.classifier if isinstance(m, torch.nn.Linear)]
    assert [(m.in_features, m.out_features) for m in linears] == [(256 * 4 * 4, 256), (256, 256), (256, 10)]
    assert not any(isinstance(m, torch.nn.BatchNorm2d) for m in module.modules())
    lenet = build_model(parse_model("lenet300@1x28x28-10"))
    assert [tuple(p.shape) for p in lenet.parameters()] == [(300, 784), (100, 300), (10, 100)]


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


def test_user_factory_masks_only_linear_and_conv(tmp_path, user_module):
    out = tmp_path / "t.safetensors"
    r = runner.invoke(app, ["extract", "--model", f"{user_module}:build_net", "--out", str(out), *QUICK])
    assert r.exit_code == 0, r.output
    tk = ticket_io.load(out)
    assert list(tk.masks) == ["conv.weight", "conv.bias", "fc.weight"]
    assert tk.model.factory == f"{user_module}:build_net" and tk.model.arch == "user"
    assert tk.model.to_json()["parameters"] == {
        "conv.weight": [4, 1, 3, 3],
        "conv.bias": [4],
        "bn.weight": [4],
        "bn.bias": [4],
        "scale": [],
        "fc.weight": [10, 64],
    }
    with pytest.raises(UsageError, match="would import and run"):  # a ticket alone never imports the factory
        runs_build.rebuild(tk, out, None)
    net, weights = runs_build.rebuild(tk, out, None, TRUSTED)
    assert float(weights["scale"]) == 2.0 and torch.equal(weights["bn.weight"], torch.ones(4))  # frozen as built
    r = runner.invoke(app, ["evaluate", str(out), "--json", "--model", f"{user_module}:build_net"])
    assert r.exit_code == 0 and json.loads(r.stdout)["reproduced"] is True

    # the user's code changes: names or shapes differ -> refused, naming what changed
    write_user_module(tmp_path, user_module, width=5)
    err = one_line(runner.invoke(app, ["evaluate", str(out), "--trust-model-code"]))
    assert "no longer matches" in err and "conv.weight [4, 1, 3, 3] -> [5, 1, 3, 3]" in err


@pytest.mark.parametrize(
    "model,needle",
    [
        ("no_such_module_xyz:build_net", "cannot import no_such_module_xyz"),
        ("{mod}:missing", "has no function 'missing'"),
        ("{mod}:not_a_module", "returned int, not an nn.Module"),
    ],
)
def test_user_factory_errors(tmp_path, user_module, model, needle):
    r = runner.invoke(
        app, ["extract", "--model", model.format(mod=user_module), "--out", str(tmp_path / "t.safetensors"), *QUICK]
    )
    assert needle in one_line(r)


def test_user_model_input_mismatch_names_both_shapes(tmp_path, user_module):
    (tmp_path / f"{user_module}_big.py").write_text(
        "from torch import nn\ndef build_net():\n    return nn.Sequential(nn.Flatten(), nn.Linear(784, 10))\n"
    )
    r = runner.invoke(
        app, ["extract", "--model", f"{user_module}_big:build_net", "--out", str(tmp_path / "t.safetensors"), *QUICK]
    )
    err = one_line(r)
    assert "(1, 8, 8)" in err and "784" in err and "digits" in err


def test_class_count_mismatch(tmp_path):
    r = runner.invoke(app, ["extract", "--model", "conv2@1x8x8-7", "--out", str(tmp_path / "t.safetensors"), *QUICK])
    assert "7" in one_line(r) and "10 classes" in r.stderr


def test_user_model_checkpoint_needs_every_parameter(tmp_path, user_module):
    module = build_model(parse_model(f"{user_module}:build_net"))
    state = {n: t + 0.25 for n, t in module.state_dict().items() if t.is_floating_point()}  # params + bn stats
    ckpt = tmp_path / "user.safetensors"
    save_file(state, str(ckpt))
    out = tmp_path / "t.safetensors"
    r = runner.invoke(
        app, ["extract", "--model", f"{user_module}:build_net", "--weights", str(ckpt), "--out", str(out), *QUICK]
    )
    assert r.exit_code == 0, r.output
    tk = ticket_io.load(out)
    net, weights = runs_build.rebuild(tk, out, str(ckpt), TRUSTED)
    assert float(weights["scale"]) == 2.25  # the frozen, unmasked parameter came from the file
    assert torch.allclose(net.module.bn.running_mean, torch.full((4,), 0.25))  # and so did the buffer
    r = runner.invoke(app, ["evaluate", str(out), "--weights", str(ckpt), "--json", "--trust-model-code"])
    assert r.exit_code == 0 and json.loads(r.stdout)["reproduced"] is True

    partial = tmp_path / "partial.safetensors"
    save_file(
        {k: v for k, v in state.items() if k not in ("scale", "fc.weight")} | {"extra": torch.zeros(1)}, str(partial)
    )
    err = one_line(
        runner.invoke(
            app,
            [
                "extract",
                "--model",
                f"{user_module}:build_net",
                "--weights",
                str(partial),
                "--out",
                str(tmp_path / "u.safetensors"),
                *QUICK,
            ],
        )
    )
    assert "missing: fc.weight, scale" in err and "unexpected: extra" in err


@pytest.mark.slow
def test_conv_checkpoint_round_trip_and_sha_check(tmp_path):
    spec = parse_model("conv2@1x8x8-10")
    module = build_model(spec)
    ckpt = tmp_path / "conv.pt"
    torch.save({n: t * 0.5 for n, t in init_weights(module, InitSpec(seed=9)).items()}, ckpt)
    out = tmp_path / "t.safetensors"
    r = runner.invoke(app, ["extract", "--model", "conv2", "--weights", str(ckpt), "--out", str(out), *QUICK])
    assert r.exit_code == 0, r.output
    tk = ticket_io.load(out)
    assert tk.checkpoint.sha256 and tk.model.spec == "conv2@1x8x8-10"
    r = runner.invoke(app, ["evaluate", str(out), "--weights", str(ckpt), "--json"])
    assert r.exit_code == 0 and json.loads(r.stdout)["reproduced"] is True
    torch.save({n: t * 0.25 for n, t in init_weights(module, InitSpec(seed=9)).items()}, tmp_path / "other.pt")
    err = one_line(runner.invoke(app, ["evaluate", str(out), "--weights", str(tmp_path / "other.pt")]))
    assert "sha256 differs" in err
    export = ["export", str(out), "--format", "masked", "--out", str(tmp_path / "net.pt")]
    assert "sha256 differs" in one_line(runner.invoke(app, [*export, "--weights", str(tmp_path / "other.pt")]))
    assert runner.invoke(app, [*export, "--weights", str(ckpt)]).exit_code == 0
    assert torch.equal(
        torch.load(tmp_path / "net.pt", weights_only=True)["features.0.weight"],
        runs_build.rebuild(tk, out, str(ckpt))[0].weights["features.0.weight"] * tk.masks["features.0.weight"],
    )
    bad = tmp_path / "bad.pt"
    torch.save({"features.0.weight": torch.zeros(64, 3, 3, 3)}, bad)
    err = one_line(
        runner.invoke(
            app,
            ["extract", "--model", "conv2", "--weights", str(bad), "--out", str(tmp_path / "u.safetensors"), *QUICK],
        )
    )
    assert "missing: classifier.1.weight" in err and "wrong shape: features.0.weight" in err


def test_factory_ticket_without_parameters_record_is_refused(tmp_path, user_module):
    out = tmp_path / "t.safetensors"
    assert (
        runner.invoke(app, ["extract", "--model", f"{user_module}:build_net", "--out", str(out), *QUICK]).exit_code == 0
    )
    tk = ticket_io.load(out)
    tk.model = ModelRecord.of({k: v for k, v in tk.model.to_json().items() if k != "parameters"})
    ticket_io.save(tk, out, overwrite=True)
    with pytest.raises(TicketFileError, match="parameters"):
        runs_build.rebuild(ticket_io.load(out), out, None, TRUSTED)
