"""`ticket export`: every format, loaded by plain torch code in a subprocess that never imports ticketcli,
reproduces the ticket's logits exactly."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file
from typer.testing import CliRunner

from ticketcli.cli.app import app
from ticketcli.export.run import STATE_FORMATS, export_ticket
from ticketcli.models.registry import parse_model
from ticketcli.runs import build as runs_build
from ticketcli.runs import extract as runs_extract
from ticketcli.specs.run import DataSpec, InitSpec, MethodSpec, ModelPolicy, ReaderSpec, RunSpec
from ticketcli.ticketfile import ticket as ticket_io

runner = CliRunner()

# The same architectures written by hand in plain PyTorch (names must match the tool's).
PLAIN_MLP = """
def build():
    class MLP(nn.Module):
        def __init__(self):
            super().__init__()
            self.layers = nn.ModuleList([nn.Linear(64, 16, bias=True), nn.Linear(16, 10, bias=True)])
        def forward(self, x):
            return self.layers[1](torch.relu(self.layers[0](x.flatten(1))))
    return MLP()
"""
PLAIN_VGG = """
def build():
    class VGG(nn.Module):
        def __init__(self):
            super().__init__()
            self.features = nn.Sequential(nn.Conv2d(1, 8, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                                          nn.Conv2d(8, 16, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2))
            self.classifier = nn.Sequential(nn.Flatten(), nn.Linear(16 * 2 * 2, 10))
        def forward(self, x):
            return self.classifier(self.features(x))
    return VGG()
"""
PLAIN_USER = """
def build():
    sys.path.insert(0, {dir!r})
    return importlib.import_module({mod!r}).build_net().eval()
"""

# Loads every export with torch, torch.nn.utils.prune and safetensors only; prints the max |difference|.
LOADER = textwrap.dedent("""
    import importlib, json, math, sys
    import torch
    from torch import nn
    from torch.nn.utils import prune
    from safetensors.torch import load_file

    cfg = json.loads(sys.argv[1])
    exec(cfg["build"])

    def load(p):
        return load_file(p) if p.endswith(".safetensors") else torch.load(p, weights_only=True)

    x, expected = torch.load(cfg["x"], weights_only=True), torch.load(cfg["logits"], weights_only=True)
    out = {}
    with torch.no_grad():
        m = build(); m.load_state_dict(load(cfg["masked"])); out["masked"] = m(x)

        m = build(); sd = load(cfg["prune"])
        for k in sd:
            if k.endswith("_mask"):
                owner, _, attr = k[: -len("_mask")].rpartition(".")
                prune.identity(m.get_submodule(owner), attr)
        m.load_state_dict(sd); out["prune"] = m(x)

        sd = load(cfg["csr"]); dense = {}
        for k, v in sd.items():
            if k.endswith(".crow_indices"):
                n = k[: -len(".crow_indices")]
                shape = sd[n + ".shape"].tolist()  # the README's recipe: the (shape[0], rest) view, biases too
                dense[n] = torch.sparse_csr_tensor(v.long(), sd[n + ".col_indices"].long(), sd[n + ".values"],
                                                   size=(shape[0], math.prod(shape[1:]))).to_dense().reshape(shape)
            elif not k.endswith((".col_indices", ".values", ".shape")):
                dense[k] = v
        m = build(); m.load_state_dict(dense); out["csr"] = m(x)

        m = build(); m.load_state_dict(load(cfg["dense"]))
        masks = load(cfg["masks"])
        for n, p in m.named_parameters():
            if n in masks:
                assert masks[n].dtype == torch.bool
                p.mul_(masks[n])
        out["masks"] = m(x)
    assert "ticketcli" not in sys.modules
    print(json.dumps({k: [bool(torch.equal(v, expected)), float((v - expected).abs().max())]
                      for k, v in out.items()}))
""")


def make_ticket(tmp_path: Path, model: str) -> Path:
    spec = RunSpec(
        model=parse_model(model).with_data((1, 8, 8), 10),
        init=InitSpec(seed=3),
        data=DataSpec(name="digits", n_extract=64, n_val=32, split_seed=3),
        method=MethodSpec(name="augmented", sparsity=0.7, epochs=1, batch_size=32),
        device="cpu",
    )
    out = tmp_path / "ticket.safetensors"
    runs_extract.extract_ticket(spec, out=out)
    return out


@pytest.mark.parametrize("model", ["mlp:64-16-10+bias", "vgg:8-M-16-M+bias", "user"])
@pytest.mark.slow
def test_every_format_reproduces_the_ticket_logits_in_plain_torch(tmp_path, model, request):
    if model == "user":
        mod = request.getfixturevalue("user_module")
        model, build = f"{mod}:build_net", PLAIN_USER.format(dir=str(tmp_path), mod=mod)
    else:
        build = PLAIN_MLP if model.startswith("mlp") else PLAIN_VGG
    ticket = make_ticket(tmp_path, model)
    tk = ticket_io.load(ticket)
    net = runs_build.open_ticket(
        ticket, ReaderSpec(data=DataSpec(), device="cpu", policy=ModelPolicy(trust_model_code=True))
    ).net
    net.calibrate(tk.masks)  # BatchNorm (the user model's): the statistics evaluate and export use
    x = torch.randn(16, 1, 8, 8, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        logits = net(x, tk.masks)
    torch.save(x, tmp_path / "x.pt")
    torch.save(logits, tmp_path / "logits.pt")
    torch.save(net.module.state_dict(), tmp_path / "dense.pt")  # the user's own (unmasked) checkpoint
    cfg = {
        "build": build,
        "x": str(tmp_path / "x.pt"),
        "logits": str(tmp_path / "logits.pt"),
        "dense": str(tmp_path / "dense.pt"),
    }
    for fmt, suffix in zip(STATE_FORMATS, (".safetensors", ".pt", ".safetensors", ".safetensors")):
        out = tmp_path / f"{fmt}{suffix}"
        r = runner.invoke(
            app, ["export", str(ticket), "--format", fmt, "--out", str(out), "--json", "--trust-model-code"]
        )
        assert r.exit_code == 0, r.output
        assert json.loads(r.stdout)["file_bytes"] == out.stat().st_size
        cfg[fmt] = str(out)
    p = subprocess.run(
        [sys.executable, "-c", LOADER, json.dumps(cfg)], capture_output=True, text=True, cwd=tmp_path, timeout=300
    )
    assert p.returncode == 0, p.stderr
    result = json.loads(p.stdout)
    assert result == {fmt: [True, 0.0] for fmt in STATE_FORMATS}, result


def test_export_contents_and_sizes(tmp_path):
    ticket = make_ticket(tmp_path, "vgg:8-M-16-M+bias")
    tk = ticket_io.load(ticket)
    r = runner.invoke(
        app, ["export", str(ticket), "--format", "csr", "--out", str(tmp_path / "c.safetensors"), "--json"]
    )
    s = json.loads(r.stdout)
    layers = {la["name"]: la for la in s["layers"]}
    sd = load_file(str(tmp_path / "c.safetensors"))
    for n, m in tk.masks.items():
        assert layers[n]["nnz"] == int(m.sum()) == sd[f"{n}.values"].numel()
        assert sd[f"{n}.crow_indices"].dtype == torch.int32 and sd[f"{n}.shape"].tolist() == list(m.shape)
        assert layers[n]["dense_bytes"] == 4 * m.numel()
    assert s["sparsity"]["kept"] == sum(int(m.sum()) for m in tk.masks.values())
    assert s["csr_payload_bytes"] < s["dense_float32_bytes"]  # 30% density: values + int32 columns < dense

    r = runner.invoke(app, ["export", str(ticket), "--format", "masks", "--out", str(tmp_path / "m.safetensors")])
    assert r.exit_code == 0 and "masks export" in r.stdout
    masks = load_file(str(tmp_path / "m.safetensors"))
    assert list(masks) == sorted(tk.masks) and all(torch.equal(masks[n], tk.masks[n]) for n in tk.masks)

    runner.invoke(app, ["export", str(ticket), "--format", "prune", "--out", str(tmp_path / "p.pt")])
    sd = torch.load(tmp_path / "p.pt", weights_only=True)
    assert sorted(sd) == sorted([f"{n}_orig" for n in tk.masks] + [f"{n}_mask" for n in tk.masks])


# The csr loading recipe as docs/guide/export.md gives it: its block, from `sd = load_file(...)` to the state dict
# (the model it loads into is the test's), run against the exported file.
EXPORT_GUIDE = Path(__file__).resolve().parents[1] / "docs" / "guide" / "export.md"


def csr_block() -> str:
    """The guide's Python block that loads the csr file, whole."""
    import re

    blocks = re.findall(r"```python\n(.*?)```", EXPORT_GUIDE.read_text(), re.S)
    (block,) = [b for b in blocks if 'load_file("csr.safetensors")' in b]
    return block


def csr_recipe() -> str:
    lines = csr_block().splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("sd = load_file("))
    end = next(i for i, line in enumerate(lines) if line.startswith("model.load_state_dict(state)"))
    return "\n".join(lines[start:end]).replace('load_file("csr.safetensors")', "load_file(path)")


@pytest.mark.parametrize("model", ["mlp:64-16-10+bias", "vgg:8-M-16-M+bias"])
def test_readme_csr_recipe_restores_masked_weights_and_biases(tmp_path, model):
    """Every masked tensor, 1-D biases included, comes back from the csr file as exactly W * M."""
    import math

    ticket = make_ticket(tmp_path, model)
    tk = ticket_io.load(ticket)
    assert any(len(shape) == 1 for shape in tk.shapes.values())  # the model has masked biases
    out = tmp_path / "c.safetensors"
    assert runner.invoke(app, ["export", str(ticket), "--format", "csr", "--out", str(out)]).exit_code == 0
    scope = {"load_file": load_file, "torch": torch, "math": math, "path": str(out)}
    exec(csr_recipe(), scope)
    net, _ = runs_build.rebuild(tk, ticket, None)
    expected = {n: t * tk.masks[n].to(t.dtype) if n in tk.masks else t for n, t in net.module.state_dict().items()}
    assert sorted(scope["state"]) == sorted(expected)
    for n, t in expected.items():
        assert torch.equal(scope["state"][n], t), n
    sd = load_file(str(out))
    for n, shape in tk.shapes.items():  # the (shape[0], rest) view: one CSR row per output unit, biases too
        assert sd[f"{n}.crow_indices"].numel() == shape[0] + 1


def test_the_guides_csr_recipe_runs_without_a_warning(tmp_path):
    """The whole block, in a fresh interpreter (torch warns about sparse tensors once per process) with every warning
    an error: it loads the ticket's module and the csr file the guide's commands write."""
    ticket = make_ticket(tmp_path, "mlp:64-16-10+bias")
    r = runner.invoke(app, ["export", str(ticket), "--format", "csr", "--out", str(tmp_path / "csr.safetensors")])
    assert r.exit_code == 0, r.output
    p = subprocess.run(
        [sys.executable, "-W", "error", "-c", csr_block()], capture_output=True, text=True, cwd=tmp_path, timeout=300
    )
    assert p.returncode == 0 and p.stderr == "", p.stderr[-3000:]


@pytest.mark.slow
def test_export_refuses_overwrite_bad_format_and_wrong_checkpoint(tmp_path):
    ticket = make_ticket(tmp_path, "mlp:64-16-10")
    out = tmp_path / "net.safetensors"
    out.write_bytes(b"keep me")
    r = runner.invoke(app, ["export", str(ticket), "--format", "masked", "--out", str(out)])
    assert r.exit_code == 2 and "already exists" in r.stderr and out.read_bytes() == b"keep me"
    assert (
        runner.invoke(app, ["export", str(ticket), "--format", "masked", "--out", str(out), "--force"]).exit_code == 0
    )
    r = runner.invoke(app, ["export", str(ticket), "--format", "dense", "--out", str(out), "--force"])
    assert r.exit_code == 2 and "Traceback" not in r.output
    r = runner.invoke(
        app, ["export", str(ticket), "--format", "masked", "--out", str(out), "--force", "--weights", str(out)]
    )
    assert r.exit_code == 2 and "takes no --weights" in r.stderr


@pytest.mark.slow
def test_batchnorm_export_reads_and_rebuilds_the_ticket_once(tmp_path, request, monkeypatch):
    """A BatchNorm network needs its extraction split for the running statistics: export takes it from the ticket
    it already read, not from a second read and rebuild (the statistics are those evaluate computes)."""
    ticket = make_ticket(tmp_path, f"{request.getfixturevalue('user_module')}:build_net")
    calls = {"load": 0, "rebuild": 0}
    load, rebuild = ticket_io.load, runs_build.rebuild

    def counted(name, fn):
        def wrapper(*args, **kwargs):
            calls[name] += 1
            return fn(*args, **kwargs)

        return wrapper

    monkeypatch.setattr(ticket_io, "load", counted("load", load))
    monkeypatch.setattr(runs_build, "rebuild", counted("rebuild", rebuild))
    policy = ModelPolicy(trust_model_code=True)
    export_ticket(ticket, fmt="masked", out=tmp_path / "m.safetensors", reader=ReaderSpec(policy=policy))
    assert calls == {"load": 1, "rebuild": 1}
    opened = runs_build.open_ticket(ticket, ReaderSpec(data=DataSpec(), device="cpu", policy=policy))
    assert opened.net.batchnorms
    opened.net.calibrate(opened.masks)
    exported = load_file(str(tmp_path / "m.safetensors"))
    stats = {n: t for n, t in opened.net.module.state_dict().items() if "running" in n}
    assert stats and all(torch.equal(exported[n], t) for n, t in stats.items())
