"""Every reader of a JSON file the project wrote (a drift run's settings, its measurements and its state, a sweep's
claims, an extraction checkpoint's identity) refuses a deeply nested text by its own limit, whatever the
interpreter's recursion limit.

json.loads recurses once per level, bounded only by `sys.getrecursionlimit()`; a library in the same process may
raise it, and then a 300,000-deep text overflows the C stack: the process dies by SIGSEGV instead of saying one
line. The readers run here in one child process with the limit raised to a million, so a reader that parses before
checking the depth kills the child, and the test names the reader that was running."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

DEPTH = 300_000  # past what the C stack holds at one C frame per level (json.loads crashes here with a raised limit)

CHILD = textwrap.dedent(
    """
    import hashlib, io, json, sys
    from pathlib import Path

    import torch
    from safetensors.torch import save as st_save

    from ticketcli.drift import rundir, state
    from ticketcli.errors import UsageError
    from ticketcli.files.checkpoint import Checkpointer
    from ticketcli.sweep.claims import Claims, claim_path

    folder, depth = Path(sys.argv[1]), int(sys.argv[2])
    deep = "[" * depth + "]" * depth
    sys.setrecursionlimit(1_000_000)  # as a library in the same process may

    def report(reader, outcome):
        print(json.dumps({"reader": reader, "outcome": outcome}), flush=True)

    def refused(reader, call):
        print(json.dumps({"reader": reader, "outcome": "running"}), flush=True)
        try:
            got = call()
        except UsageError as e:
            report(reader, "refused: " + str(e))
        else:
            report(reader, "returned " + repr(got)[:200])

    run = folder / "run"
    run.mkdir()
    (run / rundir.SETTINGS).write_text('{"format": "%s", "deep": %s}' % (rundir.FORMAT, deep))
    refused("run settings", lambda: rundir.open_settings(run))

    log = run / rundir.MEASUREMENTS
    data = b'{"step": 0}\\n' + ('{"deep": %s}\\n' % deep).encode()
    log.write_bytes(data)
    m = rundir.Measurements(log)
    refused("measurements", lambda: m.replay(2, len(data), hashlib.sha256(data).hexdigest()))

    expected = state.Expected()
    expected.add("w", torch.zeros(2))
    path = folder / "state.safetensors"
    path.write_bytes(st_save({"w": torch.zeros(2)}, metadata={"state": '{"deep": %s}' % deep}))
    refused("drift state", lambda: state.decode(path, expected))

    sweep = folder / "sweep"
    sweep.mkdir()
    claims = Claims(sweep)
    claim_path(sweep, "seed0-edge-popup").write_text('{"pid": 1, "deep": %s}' % deep)
    refused("sweep claim", lambda: claims.owner("seed0-edge-popup"))

    ckpt = folder / "t.safetensors.ckpt"
    buf = io.BytesIO()
    torch.save({"format": "ticket-checkpoint/1", "identity": deep, "state": {}}, buf)
    ckpt.write_bytes(buf.getvalue())
    refused("checkpoint", lambda: Checkpointer(ckpt, every=1, identity={"seed": 0}, resume=True).restore())
    """
)


def test_every_json_reader_refuses_deep_nesting_whatever_the_recursion_limit(tmp_path):
    from ticketcli.files import checkpoint

    child = CHILD.replace("ticket-checkpoint/1", checkpoint.FORMAT)
    p = subprocess.run(
        [sys.executable, "-c", child, str(tmp_path), str(DEPTH)],
        capture_output=True,
        text=True,
        timeout=240,
        cwd=tmp_path,
    )
    lines = [json.loads(line) for line in p.stdout.splitlines()]
    outcomes = {d["reader"]: d["outcome"] for d in lines}
    crashed = [r for r, o in outcomes.items() if o == "running"]
    assert p.returncode == 0 and not crashed, (p.returncode, crashed, p.stderr[-2000:])
    assert set(outcomes) == {"run settings", "measurements", "drift state", "sweep claim", "checkpoint"}
    for reader in ("run settings", "measurements", "drift state", "checkpoint"):
        assert outcomes[reader].startswith("refused: "), (reader, outcomes[reader])
        assert "\n" not in outcomes[reader]
    assert outcomes["sweep claim"] == "returned None"  # not a claim a sweep wrote: the run is free, taken over


def test_the_limit_is_exact_and_read_before_parsing():
    """A text nested exactly MAX_JSON_DEPTH deep is parsed, one level more is TooDeep (a ValueError, which every
    reader already turns into its one line), and brackets inside strings do not count."""
    from ticketcli.files.nesting import MAX_JSON_DEPTH, TooDeep, shallow_json

    at = "[" * MAX_JSON_DEPTH + "]" * MAX_JSON_DEPTH
    assert shallow_json(at) == json.loads(at)
    assert shallow_json(at.encode()) == json.loads(at)
    assert shallow_json(json.dumps({"text": "[" * 1000})) == {"text": "[" * 1000}
    for text in ("[" + at + "]", '{"a": ' + at.replace("[]", "[{}]") + "}"):
        try:
            shallow_json(text)
        except TooDeep as e:
            assert isinstance(e, ValueError) and e.limit == MAX_JSON_DEPTH
        else:
            raise AssertionError(f"{text[:40]}... was parsed")
