"""Resource bombs cost milliseconds and a bounded amount of memory: a model spec of 10^12 or 10^13 parameters, a
5000-digit or 10-digit width, a 100k-character spec, or a model whose shapes differ from the ticket's, in a ticket
or on the command line, is refused with one line before anything real is built (shapes are worked out on the meta
device; --max-params, 2e9 by default, caps the size). Declared shapes the file does not hold allocate nothing,
inspect counts a 4 MiB mask in less memory than the file, and a ticket of thousands of masks stays bounded."""

from __future__ import annotations

import json

import numpy as np
import pytest
from harness import edit_metadata, encode, hand_ticket, run_ok, split, write_seed_ticket
from hostile import assert_clean, child, cli, snapshot

NINES = "9" * 5000
BIG_MLP = "mlp:784-1000000-1000000-1000000-10"  # 2e12 parameters
BIG_CONV = "conv4@1x100000x100000-10"  # 2e13 parameters (the flattened features alone are 8e10 wide)

TICKET_SPECS = {  # spec written into a real ticket (its shapes unchanged) -> what the one error line says
    "mlp-2e12": (BIG_MLP, "more than the limit"),
    "conv-2e13": (BIG_CONV, "more than the limit"),
    "5000-digit-width": ("mlp:" + NINES + "-10", "longer than 1000"),
    "10-digit-width": ("mlp:9999999999-10", "at most 9 digits"),
    "under-the-cap-wrong-shapes": ("mlp:64-40000-40000-10", "mask shapes do not match"),  # 6.4 GB if built
    "150-layer-vgg": ("vgg:" + "-".join(["512"] * 150) + "@3x32x32-10", "mask shapes do not match"),
    "too-many-pools": ("conv6@1x2x2-10", "too small"),
}
TICKET_READERS = {
    "evaluate": lambda t, out: ["evaluate", t, "--device", "cpu"],
    "train-weak": lambda t, out: ["train-weak", t, "--epochs", "1", "--device", "cpu", "--quiet", "--out", out],
    "export": lambda t, out: ["export", t, "--format", "masked", "--out", out],
    "drift": lambda t, out: ["drift", "--ticket", t, "--steps", "1", "--device", "cpu", "--quiet", "--plot", out],
}
CLI_SPECS = {  # --model on the command line -> what the one error line says
    "mlp-2e12": (BIG_MLP, "more than the limit"),
    "conv-2e13": (BIG_CONV, "more than the limit"),
    "5000-digit-width": ("mlp:64-" + NINES + "-10", "characters"),  # the text range or the spec cap, by command
    "10-digit-width": ("mlp:64-1234567890-10", "at most 9 digits"),
    "100k-characters": ("mlp:" + "-".join(["64"] * 35_000), "characters"),
    "50-layers-of-1e5": ("mlp:64-" + "-".join(["100000"] * 50) + "-10", "more than the limit"),
}
QUICK = ["--dataset", "digits", "--n-extract", "64", "--n-val", "32", "--epochs", "1", "--quiet"]
CLI_COMMANDS = {
    "extract": lambda spec, out: ["extract", "--model", spec, "--out", out, *QUICK],
    "sweep-k": lambda spec, out: [
        "sweep-k",
        "--model",
        spec,
        "--seeds",
        "0",
        "--layerwise",
        "0",
        "--densities",
        "0.5",
        "--plot",
        out,
        *QUICK,
    ],
    "drift": lambda spec, out: [
        "drift",
        "--model",
        spec,
        "--dataset",
        "digits",
        "--steps",
        "1",
        "--quiet",
        "--plot",
        out,
    ],
}


@pytest.fixture(scope="module")
def seed(tmp_path_factory) -> bytes:
    return write_seed_ticket(tmp_path_factory.mktemp("bombs") / "seed.safetensors")


def with_spec(raw: bytes, spec: str) -> bytes:
    header, _ = split(raw)
    model = {**json.loads(header["__metadata__"]["model"]), "spec": spec}
    return edit_metadata(raw, model=json.dumps(model))


@pytest.mark.parametrize("reader", list(TICKET_READERS))
@pytest.mark.parametrize("case", list(TICKET_SPECS))
def test_absurd_spec_in_a_ticket(seed, tmp_path, reader, case):
    spec, needle = TICKET_SPECS[case]
    if reader == "drift" and spec.startswith(("conv", "vgg")):
        # drift refuses architectures without activation sites before looking at their size
        needle = "drift measures models with activation sites"
    path, out = tmp_path / "t.safetensors", tmp_path / "out.safetensors"
    path.write_bytes(with_spec(seed, spec))
    run = cli(*TICKET_READERS[reader](str(path), str(out)))
    assert_clean(run, 2, contains=needle, unchanged=snapshot(out), folder=tmp_path)


@pytest.mark.slow
def test_under_the_cap_model_is_not_built_in_a_real_process(seed, tmp_path):
    """1.6e9 parameters (6.4 GB of float32) whose shapes are not the ticket's: refused from the meta device, so the
    child's whole resident set stays at an interpreter's."""
    path = tmp_path / "t.safetensors"
    path.write_bytes(with_spec(seed, "mlp:64-40000-40000-10"))
    assert_clean(child("evaluate", str(path), "--device", "cpu", timeout=120), 2, contains="mask shapes do not match")


@pytest.mark.parametrize("command", list(CLI_COMMANDS))
@pytest.mark.parametrize("case", list(CLI_SPECS))
def test_absurd_spec_on_the_command_line(tmp_path, command, case):
    spec, needle = CLI_SPECS[case]
    if command == "drift" and spec.startswith("conv"):
        needle = "drift measures models with activation sites"
    out = tmp_path / "out.safetensors"
    run = cli(*CLI_COMMANDS[command](spec, str(out)))
    assert_clean(run, 2, contains=needle, unchanged=snapshot(out), folder=tmp_path)


@pytest.mark.parametrize(
    "args,needle",
    [
        (
            ["extract", "--model", "mlp:64-32-10", "--max-params", "1000", *QUICK],
            "2,368 parameters, more than the limit of 1,000",
        ),
        (["extract", "--max-params", "0", *QUICK], "--max-params must be >= 1"),
        (["sweep-k", "--max-params", "10", "--seeds", "0", *QUICK], "more than the limit of 10"),
        (
            ["drift", "--max-params", "10", "--dataset", "digits", "--steps", "1", "--quiet"],
            "more than the limit of 10",
        ),
    ],
    ids=["extract", "extract-zero", "sweep-k", "drift"],
)
def test_max_params_flag(tmp_path, args, needle):
    assert_clean(
        cli(*args, *(["--out", str(tmp_path / "t.safetensors")] if args[0] == "extract" else [])),
        2,
        contains=needle,
        folder=tmp_path,
    )


def test_max_params_from_a_config_file(tmp_path):
    config = tmp_path / "run.toml"
    config.write_text('model = "mlp:64-32-10"\nmax_params = 100\n')
    run = cli("extract", "--config", str(config), "--out", str(tmp_path / "t.safetensors"), *QUICK)
    assert_clean(run, 2, contains="more than the limit of 100")


@pytest.mark.parametrize("reader", ["evaluate", "export"])
def test_max_params_on_a_ticket(seed, tmp_path, reader):
    path, out = tmp_path / "t.safetensors", tmp_path / "out.safetensors"
    path.write_bytes(seed)
    run = cli(*TICKET_READERS[reader](str(path), str(out)), "--max-params", "100")
    assert_clean(run, 2, contains="985 parameters, more than the limit of 100", unchanged=snapshot(out))


# ---- declared sizes and many or big masks ---------------------------------------------------------------------


@pytest.mark.parametrize("reader", ["inspect", "evaluate"])
@pytest.mark.parametrize("where", ["metadata-shapes", "tensor-entry"])
def test_huge_declared_shapes_allocate_nothing(seed, tmp_path, reader, where):
    header, body = split(seed)
    if where == "metadata-shapes":  # 10^12 elements claimed; the tensor still has its few bytes
        shapes = {**json.loads(header["__metadata__"]["shapes"]), "layers.0.weight": [10**6, 10**6]}
        payload, needle = edit_metadata(seed, shapes=json.dumps(shapes)), "impossibly large"
    else:  # a consistent tensor entry of 10^12 bytes the file does not hold
        header["mask/layers.0.weight"] = {"dtype": "U8", "shape": [10**12], "data_offsets": [0, 10**12]}
        payload, needle = encode(header, body), "data_offsets"
    path = tmp_path / "t.safetensors"
    path.write_bytes(payload)
    assert_clean(
        cli(reader, str(path), *(["--device", "cpu"] if reader == "evaluate" else [])), 2, contains=needle, peak=8 << 20
    )


MANY = 5000  # masks; tracemalloc slows parsing tenfold, so the 100k case is benchmarks/inspect_memory.py's


@pytest.fixture(scope="module")
def many(seed, tmp_path_factory):
    rng = np.random.default_rng(0)
    path = tmp_path_factory.mktemp("many") / "many.safetensors"
    path.write_bytes(
        hand_ticket(
            seed,
            "mlp:64-13-10+bias",
            {f"layers.{i}.weight": [8] for i in range(MANY)},
            lambda name, n: rng.integers(0, 256, n, dtype=np.uint8).tobytes(),
        )
    )
    return path


@pytest.mark.slow
def test_many_masks_inspect_in_bounded_memory(many):
    run = cli("inspect", "--json", str(many))
    assert run.exit_code == 0, run.stderr
    result = json.loads(run.stdout)
    assert len(result["layers"]) == MANY and result["integrity"] == "ok"
    assert run.peak_bytes < 32 << 20, run.peak_bytes  # the parsed header's Python objects (~2 KiB a mask)


def test_many_masks_table_is_cut_short(many):
    out = run_ok("inspect", str(many)).stdout
    assert f"and {MANY - 500} more masks (--json lists every one)" in out


@pytest.mark.parametrize("reader", list(TICKET_READERS))
@pytest.mark.slow
def test_many_masks_are_refused_by_the_model_check(many, tmp_path, reader):
    run = cli(*TICKET_READERS[reader](str(many), str(tmp_path / "out.safetensors")))
    # refused from the header, before a mask is read: 40,000 declared bits against the model's 985 parameters
    assert_clean(run, 2, contains="mask shapes do not match model mlp:64-13-10+bias (the masks hold 40,000 weights")


def test_a_4_mib_mask_is_counted_in_less_memory_than_the_file(seed, tmp_path):
    """One 33.5M-bit mask: inspect reads and counts it a chunk at a time (the old reader unpacked it: 72 MiB)."""
    rng = np.random.default_rng(1)
    path = tmp_path / "big.safetensors"
    path.write_bytes(
        hand_ticket(
            seed,
            "mlp:8192-4096",
            {"layers.0.weight": [4096, 8192]},
            lambda name, n: rng.integers(0, 256, n, dtype=np.uint8).tobytes(),
        )
    )
    data = split(path.read_bytes())[1]
    run = cli("inspect", "--json", str(path))
    assert run.exit_code == 0, run.stderr
    mask = json.loads(run.stdout)["layers"][0]
    assert mask["kept"] == int(np.unpackbits(np.frombuffer(data, np.uint8)).sum()) and mask["total"] == 4096 * 8192
    assert run.peak_bytes < path.stat().st_size, run.peak_bytes


@pytest.mark.parametrize("stored", ["/proc/self/pagemap", "/proc/self/mem", "/dev/zero", "/"])
def test_a_recorded_checkpoint_path_cannot_point_at_an_endless_file(seed, tmp_path, stored):
    """A checkpoint path in a ticket is followed only to a plain file of a checkpoint's size (/proc/self/pagemap
    reports size 0 and reads for hundreds of GB)."""
    path = tmp_path / "t.safetensors"
    path.write_bytes(edit_metadata(seed, checkpoint=json.dumps({"path": stored, "sha256": "a" * 64})))
    assert_clean(cli("evaluate", str(path), "--device", "cpu"), 2, contains="--weights FILE")
