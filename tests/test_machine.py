"""created_by records the torch build, the CPU kind and the BLAS (machine.py); a ticket's record is bounded and
checked when read back, and `evaluate` names what differs when a CPU ticket does not reproduce exactly."""

from __future__ import annotations

import json

import pytest
import torch
from safetensors import safe_open
from safetensors.torch import save_file
from typer.testing import CliRunner

from ticketcli.cli.app import app
from ticketcli.errors import TicketFileError
from ticketcli.runtime import machine
from ticketcli.ticketfile import ticket as ticket_io
from ticketcli.version import __version__

MKL = (
    "  - Intel(R) oneAPI Math Kernel Library Version 2024.2-Product Build 20240605 for Intel(R) 64 architecture\n"
    "  - Build settings: BLAS_INFO=mkl, BUILD_TYPE=Release, LAPACK_INFO=mkl, TORCH_VERSION=2.14.1,\n"
)
OPENBLAS = "  - Build settings: BLAS_INFO=open, BUILD_TYPE=Release, LAPACK_INFO=open, TORCH_VERSION=2.14.1,\n"


def test_the_record_describes_this_process():
    r = machine.record()
    assert set(r) == set(machine.MACHINE_KEYS)
    assert r["torch"] == torch.__version__
    assert r["cpu_isa"] == torch.backends.cpu.get_cpu_capability()
    assert r["blas"] == machine.blas_of(torch.__config__.show())
    assert all(isinstance(v, str) and 0 < len(v) <= machine.MAX_VALUE for v in r.values())
    assert machine.created_by_problem({"ticketcli": __version__, **r}) is None  # what is written can be read


@pytest.mark.parametrize(
    "config, blas", [(MKL, "mkl 2024.2"), (OPENBLAS, "open"), ("no build settings at all", "unknown")]
)
def test_the_blas_is_parsed_compactly(config, blas):
    assert machine.blas_of(config) == blas


def test_cpuinfo_reads_the_first_processor_and_a_bounded_prefix(tmp_path):
    path = tmp_path / "cpuinfo"
    first = "processor\t: 0\nvendor_id\t: GenuineIntel\nmodel name\t: Intel(R) Xeon(R) Gold 6248\n\n"
    second = "processor\t: 1\nvendor_id\t: AuthenticAMD\nmodel name\t: AMD EPYC\n\n"
    path.write_bytes((first + second).encode() + b"\xff\x00" * (1 << 20) + b"model name: late\n")
    info = machine._cpuinfo(path)
    assert info == {"vendor_id": "GenuineIntel", "model name": "Intel(R) Xeon(R) Gold 6248"}
    assert machine._cpuinfo(tmp_path / "missing") == {}


def test_differences_name_each_key_and_print_hostile_text_safely():
    here = {"torch": "2.14.1", "torch_git": "abc", "cpu_vendor": "AuthenticAMD", "cpu_model": "AMD EPYC"}
    here |= {"cpu_isa": "AVX2", "blas": "mkl 2024.2"}
    assert machine.differences(dict(here), here) == []
    theirs = {**here, "cpu_isa": "AVX512", "cpu_model": "Xeon\x1b[2J\u202e"}
    del theirs["blas"]  # an older ticket, or one written without it
    out = machine.differences(theirs, here)
    assert out == [
        "cpu_model Xeon?[2J? (ticket) vs AMD EPYC (here)",
        "cpu_isa AVX512 (ticket) vs AVX2 (here)",
        "blas not recorded (here mkl 2024.2)",
    ]


@pytest.mark.parametrize(
    "created_by, needle",
    [
        ({"torch": 7}, "created_by.torch"),
        ({"cpu_model": "x" * 5000}, "created_by.cpu_model"),
        ({"blas": {"name": "mkl"}}, "created_by.blas"),
        ({f"k{i}": "v" for i in range(40)}, "more than 32 entries"),
    ],
)
def test_a_hostile_created_by_is_refused(created_by, needle):
    assert needle in str(machine.created_by_problem(created_by))


@pytest.fixture(scope="module")
def ticket_path(tmp_path_factory):
    out = tmp_path_factory.mktemp("machine") / "t.safetensors"
    r = CliRunner().invoke(
        app,
        ["extract", "--dataset", "digits", "--model", "mlp:64-16-10", "--epochs", "1", "--quiet", "--out", str(out)],
    )
    assert r.exit_code == 0, r.output
    return out


def rewritten(src, dst, **fields):
    with safe_open(str(src), "pt") as f:
        meta = f.metadata()
        tensors = {k: f.get_tensor(k) for k in f.keys()}
    save_file(tensors, str(dst), metadata={**meta, **{k: json.dumps(v) for k, v in fields.items()}})
    return dst


def test_a_ticket_records_the_machine(ticket_path):
    assert ticket_io.load(ticket_path).created_by.to_json() == {"ticketcli": __version__, **machine.record()}


def test_a_ticket_with_a_hostile_created_by_is_one_line_exit_2(ticket_path, tmp_path):
    bad = rewritten(ticket_path, tmp_path / "bad.safetensors", created_by={"torch": "x" * 10_000})
    with pytest.raises(TicketFileError, match="created_by.torch"):
        ticket_io.load(bad)
    r = CliRunner().invoke(app, ["evaluate", str(bad), "--device", "cpu"])
    assert r.exit_code == 2 and r.stderr.count("error:") == 1 and "Traceback" not in r.output


def test_evaluate_names_what_differs_when_a_cpu_ticket_does_not_reproduce(ticket_path, tmp_path):
    tk = ticket_io.load(ticket_path)
    metrics = tk.metrics.to_json()
    metrics["test"]["correct"] += 1  # as if another machine had measured one more correct prediction
    here = machine.record()  # the other machine's CPU is one that this machine's is not, whichever this one is
    vendor = "GenuineIntel" if here["cpu_vendor"] != "GenuineIntel" else "AuthenticAMD"
    isa = "AVX512" if here["cpu_isa"] != "AVX512" else "AVX2"
    other = {**tk.created_by.to_json(), "cpu_isa": isa, "cpu_vendor": vendor}
    path = rewritten(ticket_path, tmp_path / "other.safetensors", metrics=metrics, created_by=other)
    r = CliRunner().invoke(app, ["evaluate", str(path), "--device", "cpu"], env={"COLUMNS": "400"})
    assert r.exit_code == 0, r.output
    assert "did not reproduce exactly here; it differs from this machine in" in r.stderr
    assert f"cpu_vendor {vendor} (ticket) vs {here['cpu_vendor']} (here)" in r.stderr
    assert f"cpu_isa {isa} (ticket) vs {here['cpu_isa']} (here)" in r.stderr
    assert "blas" not in r.stderr and "torch" not in r.stderr.split("differs")[1]  # only what differs
    same = rewritten(ticket_path, tmp_path / "same.safetensors", metrics=metrics)
    r = CliRunner().invoke(app, ["evaluate", str(same), "--device", "cpu"], env={"COLUMNS": "400"})
    assert "although it records this torch build, CPU kind and BLAS" in r.stderr
