"""Seeds, generators and fingerprints: every random stream of a run is derived from its one seed, and weights and
files are identified by sha256. Nothing here knows about models or specs."""

from __future__ import annotations

import hashlib
import os

import torch


def derive_seed(seed: int, tag: str) -> int:
    """An independent 63-bit seed for one purpose ('split', 'scores', 'batches', ...) derived from the run seed."""
    digest = hashlib.sha256(f"{seed}:{tag}".encode()).digest()
    return int.from_bytes(digest[:8], "little") & (2**63 - 1)


def generator(seed: int, tag: str) -> torch.Generator:
    """A CPU generator for one purpose, seeded with derive_seed(seed, tag): never the global RNG."""
    return torch.Generator().manual_seed(derive_seed(seed, tag))


def fingerprint(weights: dict[str, torch.Tensor]) -> str:
    """sha256 over the parameters' bytes (float32, C order) in order."""
    h = hashlib.sha256()
    for w in weights.values():
        h.update(w.detach().to("cpu", torch.float32).contiguous().numpy().tobytes())
    return h.hexdigest()


def file_sha256(path: str | os.PathLike[str]) -> str:
    """sha256 of a file's bytes, read in 1 MiB chunks (checkpoints identify the weights they hold by it)."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()
