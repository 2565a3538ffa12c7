"""Keeping a drift run in its run dir (`--run-dir`, `--resume`): each measurement appended to measurements.jsonl as
it is taken, the resumable state written atomically every N steps and at the end of each seed, and on a resume
the measurements so far replayed into the series and the state put back, so that the run goes on exactly as if it
had never stopped (same weights, optimiser moments, buffers, data order, random streams, centering statistics).

`add_measurement` is the one way a measurement enters a seed's series, live or replayed, so both build the same
objects in the same order."""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from ticketcli.contract.schema import JsonObject
from ticketcli.drift import state as st
from ticketcli.drift.control import SHARES, ActivationControl, _units
from ticketcli.drift.inputs import Inputs, TextInputs
from ticketcli.drift.rundir import MEASUREMENTS, RESTART, SETTINGS, STATE, Measurements
from ticketcli.errors import UsageError
from ticketcli.files.atomic import Owned, write_owned
from ticketcli.models.masked import MaskedNet
from ticketcli.train import WeightTrainer

RECORD, LAYER_RECORD = 1 << 10, 4 << 10  # bytes of a measurement record at most: its own fields, and per layer


def add_measurement(series: JsonObject, step: int, m: JsonObject, text: bool) -> None:
    """One measurement (its layers' statistics with the drift already computed) appended to a seed's series; a
    measurement whose layers or statistics differ from the series' (a replayed record of another run) is refused."""
    layers = series["layers"]
    if layers and set(m["layers"]) != set(layers):
        raise UsageError("measurements.jsonl's records do not match this run's layers", hint=RESTART)
    series["steps"].append(step)
    series["loss"].append(m["loss"])
    series["accuracy"].append(m["accuracy"])
    if text:  # the probe is validation text: its loss in nats per character, and perplexity
        series.setdefault("perplexity", []).append(m["perplexity"])
    for layer, s in m["layers"].items():
        out = layers.setdefault(layer, {})
        if step == 0:
            out["initial_std"] = s["weight_std"]
        known = {k for k, v in out.items() if isinstance(v, list)}
        if known and known != set(s):
            raise UsageError(f"measurements.jsonl's records of {layer} do not match this run's", hint=RESTART)
        for k, v in s.items():
            out.setdefault(k, []).append(v)


def _number(v: Any) -> bool:
    return v is None or (isinstance(v, (int, float)) and not isinstance(v, bool))


def check_record(rec: JsonObject, seed: int, step: int, text: bool, path: Path) -> JsonObject:
    """A replayed record, checked to be this seed's measurement at this step with values of the right kinds."""
    layers = rec.get("layers")
    ok = (
        rec.get("seed") == seed
        and rec.get("step") == step
        and all(_number(rec.get(k)) for k in ("loss", "accuracy", *(("perplexity",) if text else ())))
        and isinstance(layers, dict)
        and all(
            isinstance(s, dict) and s and all(isinstance(k, str) and _number(v) for k, v in s.items())
            for s in layers.values()
        )
        and (not layers or step != 0 or all("weight_std" in s for s in layers.values()))
    )
    if not ok:
        raise UsageError(f"{path}: the record of seed {seed} step {step} is missing or malformed", hint=RESTART)
    return rec


def _summary(s: Any, control: ActivationControl | None) -> bool:
    """A finished seed's activation-control summary as ActivationControl.summary makes it (None without control)."""
    if control is None or s is None:
        return control is None and s is None
    sites = s.get("sites") if isinstance(s, dict) else None
    overall = s.get("overall") if isinstance(s, dict) else None
    return (
        isinstance(sites, dict)
        and isinstance(overall, dict)
        and all(k in overall and _number(overall[k]) for k in SHARES)
        and all(
            isinstance(v, dict) and all(k in v and _number(v[k]) for k in (*SHARES, "centering_mean"))
            for v in sites.values()
        )
        and "target" in s
        and _number(s["target"])
        and (s.get("statistics_updates") is None or type(s.get("statistics_updates")) is int)
        and isinstance(s.get("frozen"), bool)
    )


def _generator(inputs: Inputs | TextInputs) -> torch.Generator:
    epochs = getattr(inputs, "epochs", None)
    return epochs.g if epochs is not None else inputs.g  # type: ignore[union-attr]


@dataclass(frozen=True)
class Live:
    """What a seed trains with, as the keeper saves and restores it."""

    net: MaskedNet
    trainer: WeightTrainer
    inputs: Inputs | TextInputs
    control: ActivationControl | None
    forward: Callable[..., torch.Tensor]  # the run's own (controlled) forward pass


class RunKeeper:
    """One run dir for the seeds of one run, in order (begin() once per seed, from drift_one)."""

    def __init__(self, folder: Path, every: int, logged: list[int], *, seeds: int, resume: bool):
        self.folder, self.every, self.logged, self.seeds = folder, every, logged, seeds
        self.state_path = folder / STATE
        self.measurements = Measurements(folder / MEASUREMENTS)
        self.resume = resume
        self.index = -1  # the seed being run
        self.owned: Owned | None = None  # the state file this run wrote last, or resumed from
        self.finished: list[Any] = []  # per finished seed: its activation control summary (None without control)
        self.at: tuple[int, int] | None = None  # (seed index, step) of the restored state
        self.saved: tuple[dict[str, torch.Tensor], JsonObject] | None = None
        self.replayed: list[JsonObject] = []
        self.settings_sha = hashlib.sha256((folder / SETTINGS).read_bytes()).hexdigest()
        self.live: Live | None = None
        # --log-to: told each measurement (seed, step, record) once a checkpoint keeps it, so that a resume, which
        # goes on from the checkpoint, logs each step once; `unsent` holds those taken since the last checkpoint
        self.on_kept: Callable[[int, int, JsonObject], None] | None = None
        self.unsent: list[tuple[int, int, JsonObject]] = []

    def note(self) -> str:
        """Where the run can continue from, for the interrupt's line."""
        if self.owned is None and self.at is None:
            return f"{self.folder} holds no checkpoint yet: ticket drift --resume {self.folder} starts it over"
        return f"{self.folder} keeps the measurements; ticket drift --resume {self.folder} continues the run"

    def begin(self, seed: int, live: Live, series: JsonObject) -> tuple[int, Any] | None:
        """Set up one seed: None for a fresh start, else (the step it continues after, the control summary of a
        seed already finished or None) with its measurements replayed into `series` and its state restored."""
        self.index += 1
        self.live = live
        if self.index == 0 and self.resume:
            self._load(live)
        if self.at is None or self.index > self.at[0]:
            return None
        last = self.at[1] if self.index == self.at[0] else self.logged[-1]
        for step in [s for s in self.logged if s <= last]:
            if not self.replayed:
                raise UsageError(f"{self.folder / MEASUREMENTS} ends before seed {seed} step {step}", hint=RESTART)
            rec = check_record(self.replayed.pop(0), seed, step, live.inputs.text, self.folder / MEASUREMENTS)
            add_measurement(series, step, rec, live.inputs.text)
        if self.index == self.at[0] and self.replayed:
            raise UsageError(f"{self.folder / MEASUREMENTS} holds records past its checkpoint", hint=RESTART)
        if self.index < len(self.finished):
            return last, self.finished[self.index]
        assert self.saved is not None
        self._restore(live, *self.saved)
        self.saved = None
        return last, None

    def _expected(self, live: Live) -> st.Expected:
        net, trainer, inputs, control = live.net, live.trainer, live.inputs, live.control
        e = st.Expected()
        for n, p in trainer.params.items():
            e.add(f"param.{n}", p)
        for n, b in net.module.named_buffers():
            e.add(f"buffer.{n}", b)
        st.expect_optimizer(e, trainer.opt, list(trainer.params.values()))
        e.add("rng.inputs", _generator(inputs).get_state())
        e.add("rng.torch", torch.get_rng_state())
        epochs = getattr(inputs, "epochs", None)
        if epochs is not None:
            e.add("order", (torch.int64, (epochs.n,)), optional=True)
        if control is not None and control.spec.mode == "percentile":
            for site, units in _site_units(live.forward, trainer, inputs, control).items():
                e.add(f"control.{site}", (torch.float32, (units,)), optional=True)
        return e

    def _load(self, live: Live) -> None:
        """Read the state (if any) and replay measurements.jsonl up to it; without a state the run starts over."""
        path = self.state_path
        if not path.exists() and not path.is_symlink():
            self.measurements.truncate(0)
            return
        if path.is_symlink():
            raise UsageError(f"{path} is a symlink; a run dir holds its own files")
        # the settings bound what the run dir can hold: a record per seed and logged step, each a few numbers per
        # layer (a layer holds a weight tensor at least), so a larger file is refused before it is read
        most = self.seeds * len(self.logged)
        limit = self.measurements.bound(most, RECORD + LAYER_RECORD * len(live.trainer.params), self.seeds)
        before = path.lstat()
        tensors, meta = st.decode(path, self._expected(live))
        st.check(meta.get("settings_sha256") == self.settings_sha, path, "it was written for other settings")
        m: Any = meta  # hostile JSON: each value checked below before it is used
        index, step, finished = m.get("seed_index"), m.get("step"), m.get("finished")
        st.check(st.whole(index, 0, self.seeds - 1), path, f"its seed index is not one of this run's {self.seeds}")
        st.check(st.whole(step, 1, self.logged[-1]), path, "its position is not a step")
        st.check(isinstance(finished, list) and len(finished) in (index, index + 1), path, "bad finished seeds")
        st.check(len(finished) == index or step == self.logged[-1], path, "a finished seed stops early")
        st.check(
            all(_summary(f, live.control) for f in finished), path, "a finished seed's control summary is malformed"
        )
        pos = m.get("measurements")
        st.check(isinstance(pos, dict), path, "it does not say where measurements.jsonl stood")
        records, size, sha = pos.get("records"), pos.get("bytes"), pos.get("sha256")
        st.check(st.whole(records) and st.whole(size) and isinstance(sha, str), path, "bad measurements position")
        st.check(
            records <= most and size <= limit,
            path,
            f"it vouches for {records} records, {size} bytes of measurements, more than this run's settings allow "
            f"({most} records, {limit} bytes)",
        )
        self.replayed = self.measurements.replay(records, size, sha)
        self.at, self.finished, self.saved = (int(index), int(step)), list(finished), (tensors, meta)
        self.owned = Owned.of(path, before)

    def _restore(self, live: Live, tensors: dict[str, torch.Tensor], meta: JsonObject) -> None:
        net, trainer, inputs, control = live.net, live.trainer, live.inputs, live.control
        path, device = self.state_path, trainer.net.device
        with torch.no_grad():
            for n, p in trainer.params.items():
                p.copy_(tensors[f"param.{n}"].to(device))
            for n, b in net.module.named_buffers():
                b.copy_(tensors[f"buffer.{n}"].to(b.device))
        try:
            st.load_optimizer(trainer.opt, {k: v.to(device) for k, v in tensors.items() if k.startswith("opt.")}, path)
            _generator(inputs).set_state(tensors["rng.inputs"])
            torch.set_rng_state(tensors["rng.torch"])
        except (RuntimeError, ValueError, KeyError) as e:
            raise UsageError(f"{path} does not hold a state this run can resume ({e!s:.120})", hint=st.DELETE) from None
        epochs = getattr(inputs, "epochs", None)
        if epochs is not None:
            order, pos = tensors.get("order"), meta.get("epoch_pos")
            st.check(order is not None and st.whole(pos, 0, epochs.n + epochs.batch_size), path, "no data order")
            assert order is not None
            st.check(bool((order.sort().values == torch.arange(epochs.n)).all()), path, "the data order is no order")
            epochs.order, epochs.pos = order.to(epochs.device), pos
        if control is not None:
            updates: Any = meta.get("control_updates")
            st.check(st.whole(updates), path, "bad count of statistics updates")
            control.updates = int(updates)
            control.quantiles = {
                k.removeprefix("control."): v.to(device) for k, v in tensors.items() if k.startswith("control.")
            }

    def record(self, seed: int, step: int, m: JsonObject, text: bool) -> None:
        """Append one measurement (as add_measurement takes it) to measurements.jsonl."""
        self.measurements.append({"seed": seed, "step": step, **m})
        if self.on_kept is not None:
            self.unsent.append((seed, step, m))

    def after_step(self, step: int) -> None:
        """Save the state after this step when it is due (the last step is saved by finish())."""
        if step % self.every == 0 and step != self.logged[-1]:
            self._save(step)

    def finish(self, summary: Any) -> None:
        """The seed is done: its control summary (None without control) is kept and the state saved."""
        self.finished.append(summary)
        self._save(self.logged[-1])

    def _save(self, step: int) -> None:
        assert self.live is not None
        trainer, inputs, control = self.live.trainer, self.live.inputs, self.live.control
        tensors: dict[str, torch.Tensor] = {f"param.{n}": p for n, p in trainer.params.items()}
        tensors |= {f"buffer.{n}": b for n, b in trainer.net.module.named_buffers()}
        tensors |= st.optimizer_tensors(trainer.opt)
        tensors |= {"rng.inputs": _generator(inputs).get_state(), "rng.torch": torch.get_rng_state()}
        meta: JsonObject = {
            "seed_index": self.index,
            "step": step,
            "finished": self.finished,
            "measurements": self.measurements.position(),
            "settings_sha256": self.settings_sha,
        }
        epochs = getattr(inputs, "epochs", None)
        if epochs is not None and epochs.order.numel():
            tensors["order"], meta["epoch_pos"] = epochs.order, epochs.pos
        if control is not None:
            meta["control_updates"] = control.updates
            tensors |= {f"control.{k}": q for k, q in control.quantiles.items()}
        self.owned = write_owned(self.state_path, st.encode(tensors, meta), owned=self.owned)
        sent, self.unsent, on_kept = self.unsent, [], self.on_kept
        if on_kept is not None:
            for kept in sent:
                on_kept(*kept)

    def close(self) -> None:
        self.measurements.close()


def _site_units(
    forward: Callable[..., torch.Tensor],
    trainer: WeightTrainer,
    inputs: Inputs | TextInputs,
    control: ActivationControl,
) -> dict[str, int]:
    """Units per activation site (what a centering statistic's length must be): one pass on two probe examples
    through the run's own controlled forward, recording each site without updating anything."""
    record: dict[str, tuple[torch.Tensor, torch.Tensor, torch.Tensor]] = {}
    control.record = record
    try:
        with torch.no_grad():
            forward(inputs.probe[0][:2], trainer.effective())
    finally:
        control.record = None
    return {name: _units(h).shape[1] for name, (h, _, _) in record.items()}
