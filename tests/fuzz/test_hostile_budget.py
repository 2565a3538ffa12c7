"""A budget computed from the spec, before anything is built: a model whose buffers or activations (not its
parameters) need gigabytes, a depth of 10^8 blocks, or masks declaring billions of bits are refused with one line
(exit 2) in well under a second and a bounded amount of memory, from a flag, a TOML config, a ticket's metadata
or the Python API. A property test draws specs of every model family with extreme numbers: each is refused
within a second or fits its budget (the estimate then equals the built model's own counts)."""

from __future__ import annotations

import json
import math
import time
from pathlib import Path

import pytest
from harness import edit_metadata, encode, split
from hostile import assert_clean, child, cli, snapshot
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import ticketcli as tc
from ticketcli.errors import TicketCliError, UsageError
from ticketcli.models import registry
from ticketcli.models.budget import Budget
from ticketcli.models.build import build_model, planned_shapes
from ticketcli.models.registry import MODELS, parse_model
from ticketcli.runs import extract as runs_extract
from ticketcli.settings.resolve import build_extract_spec, merge_settings

QUICK = ["--dataset", "digits", "--n-extract", "64", "--n-val", "32", "--epochs", "1", "--quiet"]
SMALL_VIT = "vit:p4-d8-l1-h2@1x8x8-10"  # 976 parameters
BIG_GEOMETRY = "vit:p4-d8-l1-h2@1x40000x40000-10"  # the same 976 parameters; a 3.2 GB position embedding
LONG_CONTEXT = "gpt-nano:l1-d2-h1-c20000"  # under 100 parameters with a small vocabulary; 4e8 scores per example
DEEP = {  # 10^8 blocks: one Python module each if anything built them
    "vit": "vit:p4-d8-l99999999-h2",
    "wrn": "wrn:999999994-1",
    "gpt-nano": "gpt-nano:l99999999-d2-h1-c8",
}
DEPTH_NEEDLE = "a built-in model may have"
MEMORY_NEEDLE = "of memory"
READERS = {
    "evaluate": lambda t, out: ["evaluate", t, "--device", "cpu"],
    "train-weak": lambda t, out: ["train-weak", t, "--epochs", "1", "--device", "cpu", "--quiet", "--out", out],
    "export": lambda t, out: ["export", t, "--format", "masked", "--out", out],
    "drift": lambda t, out: ["drift", "--ticket", t, "--steps", "1", "--device", "cpu", "--quiet", "--plot", out],
}
REFUSAL_SECONDS = 5.0  # generous: a refusal costs milliseconds past start-up (the machine may be loaded)


@pytest.fixture(scope="module")
def vit_ticket(tmp_path_factory) -> bytes:
    """A real ticket of a small ViT on digits."""
    path = tmp_path_factory.mktemp("vit") / "vit.safetensors"
    spec = build_extract_spec(
        merge_settings(
            {"method": "random", "dataset": "digits", "model": SMALL_VIT, "n_extract": 64, "n_val": 32}, None
        )
    )
    runs_extract.extract_ticket(spec, out=path, overwrite=True)
    return path.read_bytes()


def with_spec(raw: bytes, spec: str) -> bytes:
    header, _ = split(raw)
    model = {**json.loads(header["__metadata__"]["model"]), "spec": spec}
    return edit_metadata(raw, model=json.dumps(model))


def timed_clean(run, needle: str, **kw) -> None:
    assert_clean(run, 2, contains=needle, **kw)
    assert run.seconds < REFUSAL_SECONDS, run.seconds


# ---- buffers and activations, not parameters ------------------------------------------------------------------


@pytest.mark.parametrize("reader", list(READERS))
def test_a_geometry_bomb_in_a_ticket_is_refused_by_every_reader(vit_ticket, tmp_path, reader):
    """Shapes, masks_sha256 and the weights fingerprint all match (the geometry sizes only a buffer)."""
    path, out = tmp_path / "t.safetensors", tmp_path / "out.safetensors"
    path.write_bytes(with_spec(vit_ticket, BIG_GEOMETRY))
    run = cli(*READERS[reader](str(path), str(out)))
    timed_clean(run, MEMORY_NEEDLE, unchanged=snapshot(out), folder=tmp_path)
    assert "--max-memory" in run.stderr


def test_a_geometry_bomb_in_a_ticket_through_the_api(vit_ticket, tmp_path):
    path = tmp_path / "t.safetensors"
    path.write_bytes(with_spec(vit_ticket, BIG_GEOMETRY))
    ticket = tc.load(path)
    for use in (ticket.evaluate, ticket.build):
        with pytest.raises(tc.TicketFileError, match=MEMORY_NEEDLE):
            use()


def test_the_small_ticket_itself_evaluates(vit_ticket, tmp_path):
    """The refusals above are the geometry's doing: the ticket as written is fine."""
    path = tmp_path / "t.safetensors"
    path.write_bytes(vit_ticket)
    run = cli("evaluate", str(path), "--device", "cpu", "--json")
    assert run.exit_code == 0, run.stderr


@pytest.mark.parametrize("where", ["flag", "config"])
def test_a_geometry_bomb_under_max_params_from_a_flag_or_config(tmp_path, where):
    out = tmp_path / "t.safetensors"
    if where == "flag":
        args = ["--model", BIG_GEOMETRY, "--max-params", "1000"]
    else:
        config = tmp_path / "run.toml"
        config.write_text(f'model = "{BIG_GEOMETRY}"\nmax_params = 1000\n')
        args = ["--config", str(config)]
    run = cli("extract", *args, "--out", str(out), *QUICK)
    timed_clean(run, MEMORY_NEEDLE, unchanged=snapshot(out), folder=tmp_path)


def test_a_lower_max_memory_refuses_a_model_that_fits_by_default(tmp_path):
    run = cli(
        "extract",
        "--model",
        "mlp:64-4096-4096-10",
        "--max-memory",
        "64M",
        "--out",
        str(tmp_path / "t.safetensors"),
        *QUICK,
    )
    timed_clean(run, "more than the limit of 64.0 MiB")


@pytest.mark.parametrize("value", ["lots", "0", "-8G", "1K"])
def test_a_bad_max_memory_is_one_line(tmp_path, value):
    run = cli("extract", "--max-memory", value, "--out", str(tmp_path / "t.safetensors"), *QUICK)
    timed_clean(run, "--max-memory")


def test_a_long_context_gpt_is_refused_before_training(tmp_path):
    """Under 100 parameters, but its T^2 attention scores at once: refused from the spec."""
    text = tmp_path / "text.txt"
    text.write_text("abcdefgh " * 5000)  # 45000 characters: two blocks of the 20001 the context needs
    run = cli("drift", "--model", LONG_CONTEXT, "--text", str(text), "--steps", "1", "--quiet", "--device", "cpu")
    timed_clean(run, MEMORY_NEEDLE)


def test_the_api_extract_refuses_a_geometry_bomb():
    with pytest.raises(UsageError, match=MEMORY_NEEDLE):
        tc.extract(BIG_GEOMETRY, "digits", max_params=1000, progress=False)
    with pytest.raises(UsageError, match="more than the limit of 1.0 MiB"):
        tc.extract("mlp:64-16-10", "digits", max_memory="1M", progress=False)


# ---- depth ----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("family", list(DEEP))
@pytest.mark.parametrize("where", ["flag", "config", "ticket"])
def test_depth_is_bounded_before_any_build(seed_ticket_bytes, tmp_path, family, where):
    spec, out = DEEP[family], tmp_path / "out.safetensors"
    if where == "flag":
        run = cli("extract", "--model", spec, "--out", str(out), *QUICK)
    elif where == "config":
        config = tmp_path / "run.toml"
        config.write_text(f'model = "{spec}"\n')
        run = cli("extract", "--config", str(config), "--out", str(out), *QUICK)
    else:
        path = tmp_path / "t.safetensors"
        path.write_bytes(with_spec(seed_ticket_bytes, spec if family == "gpt-nano" else spec + "@1x8x8-10"))
        run = cli("evaluate", str(path), "--device", "cpu")
    timed_clean(run, DEPTH_NEEDLE, unchanged=snapshot(out), folder=tmp_path)


@pytest.mark.slow
def test_depth_bomb_in_a_real_process_stays_small(seed_ticket_bytes, tmp_path):
    """A whole child: its resident peak is an interpreter's with torch, not gigabytes of modules."""
    path = tmp_path / "t.safetensors"
    path.write_bytes(with_spec(seed_ticket_bytes, DEEP["wrn"] + "@1x8x8-10"))
    assert_clean(child("evaluate", str(path), "--device", "cpu", timeout=120), 2, contains=DEPTH_NEEDLE)


@pytest.fixture(scope="module")
def seed_ticket_bytes(ticket: Path) -> bytes:
    return ticket.read_bytes()


# ---- masks that declare far more bits than the model ----------------------------------------------------------


def sparse_mask_ticket(raw: bytes, path: Path, total: int = 1 << 30) -> int:
    """A ticket file of `total` bytes (sparse: nothing but its header is written) whose single all-zero mask fills
    the rest: 8.6e9 bits for 1 GiB. Returns the declared bit count."""
    header, _ = split(raw)
    meta = header["__metadata__"]
    nbytes = total - 8 - 4096  # the header is padded below to exactly 4096 bytes
    bits = 8 * nbytes
    head = {
        "__metadata__": {**meta, "shapes": json.dumps({"layers.0.weight": [bits]})},
        "mask/layers.0.weight": {"dtype": "U8", "shape": [nbytes], "data_offsets": [0, nbytes]},
    }
    text = json.dumps(head, separators=(",", ":"))
    assert len(text) <= 4096
    prefix = encode(text + " " * (4096 - len(text)), b"")
    with open(path, "wb") as f:
        f.write(prefix)
        f.truncate(total)
    assert path.stat().st_size == total
    return bits


@pytest.mark.parametrize("reader", ["evaluate", "train-weak", "export"])
@pytest.mark.parametrize("max_params", [None, "10000000000"])
def test_masks_declaring_billions_of_bits_are_refused_from_the_header(seed_ticket_bytes, tmp_path, reader, max_params):
    """Refused before a mask byte is read: by --max-params (2e9 by default), or, with the limit raised, by the
    parameters of the model the ticket names."""
    path, out = tmp_path / "t.safetensors", tmp_path / "out.safetensors"
    bits = sparse_mask_ticket(seed_ticket_bytes, path)
    assert bits > 8.5e9
    extra = [] if max_params is None else ["--max-params", max_params]
    run = cli(*READERS[reader](str(path), str(out)), *extra)
    needle = "more than the limit of 2,000,000,000" if max_params is None else "mask shapes do not match"
    timed_clean(run, needle, unchanged=snapshot(out), folder=tmp_path, peak=16 << 20)


def test_masks_declaring_billions_of_bits_through_the_api(seed_ticket_bytes, tmp_path):
    path = tmp_path / "t.safetensors"
    sparse_mask_ticket(seed_ticket_bytes, path)
    t0 = time.perf_counter()
    with pytest.raises(tc.TicketFileError, match="more than the limit"):
        tc.load(path)
    assert time.perf_counter() - t0 < REFUSAL_SECONDS


# ---- the property: every family, extreme numbers ---------------------------------------------------------------

SMALL = st.integers(1, 16)
EXTREME = st.one_of(st.integers(17, 10**9 - 1), st.sampled_from([10**4, 10**5, 10**6, 10**8, 10**9 - 1]))
LIMITS = Budget(max_params=10**6, max_memory=64 << 20, train_batch=64)


@st.composite
def extreme_specs(draw) -> str:
    """A syntactically valid spec of any registered family whose numbers are small except some (none, one or
    all) drawn up to 9 digits: one extreme number at a time shows which one the budget must catch."""
    wild = draw(st.sampled_from(["none", "one", "all"]))
    pick, seen = draw(st.integers(0, 7)), [0]

    def n() -> int:
        seen[0] += 1
        extreme = wild == "all" or (wild == "one" and seen[0] - 1 == pick)
        return draw(EXTREME if extreme else SMALL)

    arch = draw(st.sampled_from(sorted(MODELS.names())))
    geometry = f"@{n()}x{n()}x{n()}-{n()}"
    if arch == "mlp":
        return "mlp:" + "-".join(str(n()) for _ in range(draw(st.integers(2, 5))))
    if arch == "vgg":
        return "vgg:" + "-".join([str(n())] + [draw(st.sampled_from(["M", str(n())])) for _ in range(3)]) + geometry
    if arch == "wrn":
        return f"wrn:{6 * n() + 4}-{n()}{geometry}"
    if arch == "vit":
        heads = n()
        return f"vit:p{n()}-d{4 * heads * draw(st.integers(1, 4))}-l{n()}-h{heads}-m{n()}{geometry}"
    if arch == "gpt-nano":
        heads = n()
        return f"gpt-nano:l{n()}-d{2 * heads * draw(st.integers(1, 4))}-h{heads}-c{n()}-m{n()}-v{n()}"
    return arch + geometry


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(extreme_specs())
def test_every_family_with_extreme_numbers_is_refused_fast_or_fits(text):
    t0 = time.perf_counter()
    try:
        spec = parse_model(text)
        planned_shapes(spec, LIMITS)
    except TicketCliError as e:
        assert time.perf_counter() - t0 < 1.0, (text, time.perf_counter() - t0)
        assert "\n" not in str(e)
        return
    est = registry.estimate(spec)
    assert est is not None
    assert est.params <= LIMITS.max_params
    assert est.memory_bytes(LIMITS.train_batch, LIMITS.eval_batch) <= (LIMITS.max_memory or 0)
    module = build_model(spec)  # the real thing: its counts are the estimate's
    assert sum(p.numel() for p in module.parameters()) == est.params
    assert sum(b.numel() * b.element_size() for b in module.buffers()) == est.buffer_bytes
    assert math.isfinite(est.saved)
