"""Resumable state of a long run, written atomically next to its output every N epochs (`<out>.ckpt`).

A checkpoint holds the run's identity (everything that decides its result: specs, weights fingerprint, device,
torch version) and the method's state at an epoch boundary (for score methods: scores incl. auxiliary, Adam
state, the generator state, epoch, and for iterated the round and cumulative mask). Resuming restores that state
exactly, so the masks come out bit-identical to an uninterrupted run; a checkpoint of a different run is refused.
TopKSelector's warm start is not saved: it only changes speed, never the selected entries.
"""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import torch

from ticketcli.errors import UsageError
from ticketcli.ticket import write_atomic

FORMAT = "ticket-checkpoint/1"


def checkpoint_path(out: str | Path) -> Path:
    out = Path(out)
    return out.with_name(out.name + ".ckpt")


class Checkpointer:
    """Saves every `every` epochs (never when None); `restore()` returns the saved state when resuming."""

    def __init__(self, path: Path, *, every: int | None, identity: dict[str, Any], resume: bool):
        self.path, self.every, self.resume = Path(path), every, resume
        self.identity = json.loads(json.dumps(identity))  # plain JSON values, compared as such

    def due(self, epoch: int) -> bool:
        """Save after this (1-based, completed) epoch?"""
        return self.every is not None and epoch % self.every == 0

    def save(self, state: dict[str, Any]) -> None:
        buf = io.BytesIO()
        torch.save({"format": FORMAT, "identity": json.dumps(self.identity, sort_keys=True), "state": state}, buf)
        write_atomic(self.path, buf.getvalue(), overwrite=True)

    def restore(self) -> dict[str, Any] | None:
        """The saved state (CPU tensors) if resuming and a checkpoint exists, checked to belong to this run."""
        if not self.resume or not self.path.is_file():
            return None
        try:
            saved = torch.load(self.path, map_location="cpu", weights_only=True)
            identity = json.loads(saved["identity"]) if saved.get("format") == FORMAT else None
        except Exception as e:  # a torn or foreign file raises many types
            raise UsageError(f"cannot read checkpoint {self.path}: {str(e).splitlines()[0][:160] if str(e) else e!r}",
                             hint="delete it to start from scratch") from None
        if identity is None:
            raise UsageError(f"{self.path} is not a ticket checkpoint", hint="delete it to start from scratch")
        if identity != self.identity:
            changed = sorted(k for k in set(identity) | set(self.identity) if identity.get(k) != self.identity.get(k))
            detail = "; ".join(_diff(k, identity.get(k), self.identity.get(k)) for k in changed)
            raise UsageError(f"{self.path} belongs to a different run ({detail})",
                             hint="resume with the original options, or delete the checkpoint to start over")
        return saved["state"]

    def remove(self) -> None:
        self.path.unlink(missing_ok=True)


def _diff(key: str, old: Any, new: Any) -> str:
    if isinstance(old, dict) and isinstance(new, dict):
        fields = sorted(f for f in set(old) | set(new) if old.get(f) != new.get(f))
        return ", ".join(f"{key}.{f}: {old.get(f)!r} -> {new.get(f)!r}" for f in fields)
    return f"{key}: {old!r} -> {new!r}"


def describe(path: Path) -> str | None:
    """'checkpoint X holds epoch E (round R)' for an interrupt message, or None without one."""
    if not path.is_file():
        return None
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)["state"]
        at = f"epoch {state['epoch']}" + (f" of round {state['round']}" if "round" in state else "")
    except Exception:
        at = "an unreadable state"
    return f"checkpoint {path} holds {at}: rerun the same command with --resume to continue"
