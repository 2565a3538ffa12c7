"""The Python API is the command line without flags: what `tc.extract` returns and `Ticket.save` writes,
`ticket evaluate --json` re-measures to the same numbers, and `Ticket.evaluate` prints those same numbers; options
are checked with the CLI's own messages. Only public names (`import ticketcli as tc`) are used here."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import warm
from helpers import checkout_pythonpath, in_keywords, load_digits
from torch.utils.data import DataLoader, TensorDataset

import ticketcli as tc

REPO = Path(__file__).resolve().parent.parent
QUICK = dict(method="augmented", sparsity=0.5, epochs=2, seed=0, progress=False, device="cpu")


def cli(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    """`python -m ticketcli ARGS` from this checkout, as a user's shell would run it (a warm child: the subject is
    what the command computes, not its start-up)."""
    env = {**os.environ, "PYTHONPATH": checkout_pythonpath(dict(os.environ))}
    return subprocess.run(
        [*warm.client(env), "-m", "ticketcli", *args], capture_output=True, text=True, env=env, cwd=cwd, timeout=300
    )


@pytest.fixture(scope="module")
def ticket() -> tc.Ticket:
    return tc.extract("mlp:64-16-10", "digits", **QUICK)


def digits_tensors() -> tuple[torch.Tensor, torch.Tensor]:
    d = load_digits()
    return torch.tensor(d.data, dtype=torch.float32) / 16, torch.tensor(d.target)


@pytest.mark.slow
def test_import_is_torch_free_and_public_names_resolve():
    code = (
        "import sys, ticketcli as tc\n"
        "assert 'torch' not in sys.modules, 'import ticketcli imported torch'\n"
        "assert {'load', 'extract', 'apply_masks', 'Ticket'} <= set(dir(tc)), dir(tc)\n"
        "assert callable(tc.load) and 'augmented' in tc.list_methods() and 'torch' in sys.modules\n"
        "print(tc.__version__)\n"
    )
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == tc.__version__
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        tc.nope  # noqa: B018


@pytest.mark.slow
def test_round_trip_extract_save_cli_evaluate_gives_identical_numbers(ticket, tmp_path):
    path = ticket.save(tmp_path / "t.safetensors")
    r = cli("evaluate", str(path), "--json", "--device", "cpu")
    assert r.returncode == 0, r.stderr
    printed = json.loads(r.stdout)
    mine = ticket.evaluate(device="cpu")
    again = tc.load(path).evaluate(device="cpu")
    assert printed == {**mine, "ticket": printed["ticket"]} and mine["schema"] == "ticket.evaluate/2"
    for split in ("test", "val"):
        assert printed["metrics"][split] == mine["metrics"][split] == again["metrics"][split]  # exactly, on the CPU
        assert mine["metrics"][split]["accuracy"] == ticket.metrics.accuracy(split)
    assert mine["reproduced"] and printed["reproduced"]
    assert again == {**mine, "ticket": str(path)}  # the same document, naming the file once it has one


def test_the_packages_docstring_example_runs(ticket, tmp_path, monkeypatch, capsys):
    """The example at the top of ticketcli/__init__.py runs as written, next to a ticket of that name, and prints the
    re-measured test accuracy."""
    example = [line.strip() for line in (tc.__doc__ or "").splitlines() if line.startswith("    ")]
    assert example, "the package docstring has no indented example"
    ticket.save(tmp_path / "ticket.safetensors")
    monkeypatch.chdir(tmp_path)
    exec("\n".join(example), {"tc": tc})
    printed = float(capsys.readouterr().out)
    if not torch.cuda.is_available():  # re-measured on the CPU it was extracted on: exactly the stored accuracy
        assert printed == ticket.metrics.test.accuracy
    assert 0 <= printed <= 1


def test_ticket_properties(ticket, tmp_path):
    assert ticket.method == "augmented" and ticket.model == "mlp:64-16-10" and ticket.seed == 0
    assert ticket.dataset == "digits"
    masks = ticket.masks
    assert list(masks) == ["layers.0.weight", "layers.1.weight"]
    assert all(m.dtype == torch.bool for m in masks.values())
    kept = sum(int(m.sum()) for m in masks.values())
    total = sum(m.numel() for m in masks.values())
    assert ticket.sparsity == pytest.approx(1 - kept / total)
    assert ticket.metadata["method"]["sparsity"] == 0.5 and ticket.metadata["integrity"] == "ok"
    loaded = tc.load(ticket.save(tmp_path / "t.safetensors"))
    assert loaded.path == tmp_path / "t.safetensors" == ticket.path
    assert all(torch.equal(loaded.masks[n], masks[n]) for n in masks)
    assert loaded.metadata["weights_sha256"] == ticket.metadata["weights_sha256"]
    inspected = json.loads(cli("inspect", str(loaded.path), "--json").stdout)
    assert inspected["masks_sha256"] == loaded.metadata["masks_sha256"]


@pytest.mark.slow
def test_same_settings_same_masks_as_the_cli(ticket, tmp_path):
    """`ticket extract` with the same options writes the very masks extract() returns."""
    out = tmp_path / "cli.safetensors"
    flags = ["--model", "mlp:64-16-10", "--dataset", "digits", "--method", "augmented", "--sparsity", "0.5"]
    r = cli("extract", *flags, "--epochs", "2", "--seed", "0", "--device", "cpu", "--out", str(out), "--quiet")
    assert r.returncode == 0, r.stderr
    theirs = tc.load(out)
    assert all(torch.equal(theirs.masks[n], m) for n, m in ticket.masks.items())


@pytest.mark.parametrize(
    ("options", "flags"),
    [
        (dict(sparsity=1.5), ["--sparsity", "1.5"]),
        (dict(method="edge-popup", aux_width=2), ["--method", "edge-popup", "--aux-width", "2"]),
        (dict(lr=-1.0), ["--lr=-1"]),
        (dict(betas="0.9"), ["--betas", "0.9"]),
    ],
)
@pytest.mark.slow
def test_bad_options_raise_the_cli_message(options, flags, tmp_path):
    with pytest.raises(tc.UsageError) as caught:
        tc.extract("mlp:64-16-10", "digits", **{**QUICK, **options})
    r = cli(
        "extract", "--model", "mlp:64-16-10", "--dataset", "digits", *flags, "--out", str(tmp_path / "t.safetensors")
    )
    assert r.returncode == 2
    hint = f" (hint: {caught.value.hint})" if caught.value.hint else ""  # the CLI's line carries the hint too
    # the same message, naming the keyword where the command line names the flag: sparsity= for --sparsity
    assert in_keywords(r.stderr.splitlines()[0]) == f"error: {caught.value}{hint}"


def test_unknown_option_names_the_valid_ones():
    with pytest.raises(tc.UsageError, match="unknown method 'no-such-method'; choose one of: augmented"):
        tc.extract("mlp:64-16-10", "digits", method="no-such-method")  # (typer refuses the flag before resolve)
    with pytest.raises(tc.UsageError, match="unknown keyword 'learning_rate'") as caught:
        tc.extract("mlp:64-16-10", "digits", learning_rate=0.1)
    assert "weight_decay" in caught.value.hint
    assert "weight_decay" in tc.extract_options() and "lr" in tc.extract_options()


def test_progress_callback_sees_every_epoch():
    seen: list[dict] = []
    tc.extract("mlp:64-16-10", "digits", **{**QUICK, "epochs": 3, "progress": seen.append})
    assert [s["epoch"] for s in seen] == [1, 2, 3] and all(0 <= s["accuracy"] <= 1 for s in seen)


def test_every_in_memory_form_of_the_same_data_gives_the_same_ticket():
    """Tensors, a Dataset and a DataLoader (any batch size) of the same examples: the same split, the same masks."""
    x, y = digits_tensors()
    forms = [(x, y), TensorDataset(x, y), DataLoader(TensorDataset(x, y), batch_size=100)]
    tickets = [tc.extract("mlp:64-16-10", data, **QUICK) for data in forms]
    first = tickets[0]
    assert first.dataset == "in-memory" and first.metadata["data"]["n_test"] == len(y) // 5
    for t in tickets[1:]:
        assert all(torch.equal(t.masks[n], m) for n, m in first.masks.items())
        assert t.metrics.test == first.metrics.test
    evaluated = first.evaluate((x, y), device="cpu")  # the same split is drawn again from the seed
    assert evaluated["reproduced"] and evaluated["metrics"]["test"]["correct"] == first.metrics.test.correct


def test_ready_splits_are_used_as_given():
    x, y = digits_tensors()
    splits = {"extract": (x[:1000], y[:1000]), "val": (x[1000:1400], y[1000:1400]), "test": (x[1400:], y[1400:])}
    t = tc.extract("mlp:64-16-10", splits, **QUICK)
    assert t.metadata["data"]["n_extract"] == 1000 and t.metadata["data"]["n_test"] == len(y) - 1400
    assert t.evaluate(splits, device="cpu")["reproduced"]
    with pytest.raises(tc.UsageError, match="not a split layout"):
        tc.extract("mlp:64-16-10", {"train": (x, y)}, **QUICK)
    with pytest.raises(tc.UsageError, match="x must hold floats"):
        tc.extract("mlp:64-16-10", (x, y.float()), **QUICK)


@pytest.mark.slow
def test_a_ticket_of_in_memory_data_is_refused_by_the_cli_without_a_traceback(tmp_path):
    x, y = digits_tensors()
    path = tc.extract("mlp:64-16-10", (x, y), **QUICK).save(tmp_path / "mem.safetensors")
    r = cli("evaluate", str(path))
    assert r.returncode == 2 and "extracted from in-memory data" in r.stderr and "Traceback" not in r.stderr
    assert cli("inspect", str(path), "--json").returncode == 0


def test_a_users_module_is_extracted_and_rebuilt_from_the_seed():
    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.body = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(64, 12), torch.nn.ReLU())
            self.out = torch.nn.Linear(12, 10)

        def forward(self, x):
            return self.out(self.body(x))

    mine = Net()
    before = {n: p.clone() for n, p in mine.state_dict().items()}
    t = tc.extract(mine, "digits", **QUICK)
    assert all(torch.equal(before[n], p) for n, p in mine.state_dict().items())  # the caller's module untouched
    assert (
        t.path is None
        and t.model.endswith(":Net")
        and list(t.masks) == ["body.1.weight", "body.1.bias", "out.weight", "out.bias"]
    )
    assert t.evaluate(module=Net(), device="cpu")["reproduced"]
    net = t.build("cpu", module=Net())
    assert isinstance(net, Net) and bool((net.out.weight[~t.masks["out.weight"]] == 0).all())
    with pytest.raises(tc.UsageError, match="names the model factory"):
        t.build("cpu")  # no module given: a factory a ticket names is never imported on its own
