"""One rule for every file written as safetensors: its name ends in `.safetensors`. `ticket export` chooses the
format by the extension (anything else is a torch.save file), so a ticket (extract --out, Ticket.save) or
train-weak's weights under a `.pt` name would be read as the wrong format; they are refused in one line, before
any work, naming `ticket export` for the other formats."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

import ticketcli as tc
from ticketcli.cli.app import app
from ticketcli.errors import UsageError
from ticketcli.ticketfile import ticket as ticket_io

runner = CliRunner()
TINY = ["--dataset", "digits", "--n-extract", "200", "--n-val", "100", "--model", "mlp:64-16-10", "--epochs", "1"]


@pytest.fixture(scope="module")
def ticket(tmp_path_factory):
    out = tmp_path_factory.mktemp("t") / "t.safetensors"
    r = runner.invoke(app, ["extract", *TINY, "--out", str(out), "--quiet"])
    assert r.exit_code == 0, r.output
    return out


def one_line(r) -> str:
    lines = r.stderr.splitlines()
    assert r.exit_code == 2 and len(lines) == 1 and lines[0].startswith("error: "), r.output
    return lines[0]


@pytest.mark.parametrize("name", ["t.pt", "t.pth", "t.bin", "t", "t.safetensors.pt", "t.st"])
def test_extract_refuses_a_ticket_name_that_is_not_safetensors(name, tmp_path, monkeypatch):
    from ticketcli.runs import extract as runs_extract

    monkeypatch.setattr(runs_extract, "run_extraction", lambda *a, **k: pytest.fail("the run started"))
    r = runner.invoke(app, ["extract", *TINY, "--out", str(tmp_path / name)])
    line = one_line(r)
    assert "must end in .safetensors" in line and "ticket export" in line and "--format" in line
    assert not (tmp_path / name).exists()


def test_ticket_save_follows_the_same_rule(ticket, tmp_path):
    t = tc.load(ticket)
    with pytest.raises(UsageError, match=r"must end in \.safetensors") as e:
        t.save(tmp_path / "copy.pt")
    assert "ticket export" in (e.value.hint or "")
    with pytest.raises(UsageError):
        ticket_io.save(ticket_io.load(ticket), tmp_path / "copy.pth")
    assert not any(tmp_path.iterdir())
    assert t.save(tmp_path / "copy.safetensors").is_file()


def test_train_weak_refuses_a_weights_name_that_is_not_safetensors(ticket, tmp_path):
    r = runner.invoke(app, ["train-weak", str(ticket), "--epochs", "1", "--out", str(tmp_path / "w.pt")])
    assert "must end in .safetensors" in one_line(r)
    assert not (tmp_path / "w.pt").exists()


def test_export_still_writes_torch_save_under_other_names(ticket, tmp_path):
    r = runner.invoke(app, ["export", str(ticket), "--format", "masked", "--out", str(tmp_path / "t.pt"), "--quiet"])
    assert r.exit_code == 0, r.output
    import torch

    assert isinstance(torch.load(tmp_path / "t.pt", weights_only=True), dict)
