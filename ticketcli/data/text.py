"""Character-level text corpora for GPT-nano: a plain UTF-8 file (`--text FILE`) or, by default, the Debian
`fortunes` files literature, science, computers and wisdom; encoded as ids into the text's own sorted character
set and cut into contiguous blocks that a seeded permutation assigns to training or validation.

A text file is untrusted input: only a regular file of at most MAX_TEXT_BYTES is read, and it must be UTF-8
without NUL bytes (a binary file), long enough for a training and a validation block, with at most MAX_VOCAB
distinct characters (the model's embedding and head grow with it). Anything else is one UsageError line.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from ticketcli.errors import UsageError
from ticketcli.files.bounded import read_regular_file
from ticketcli.seeding import generator
from ticketcli.specs.text import TextSpec

MAX_TEXT_BYTES = 8 << 20  # ids are int32: at most 32 MiB of them
MAX_VOCAB = 4096  # distinct characters
FORTUNES = ("literature", "science", "computers", "wisdom")
FORTUNES_SYSTEM_DIR = "/usr/share/games/fortunes"  # Debian's fortunes and fortunes-min


@dataclass(frozen=True)
class Corpus:
    ids: torch.Tensor  # (n,) int32 character ids
    vocab: str  # the characters, sorted by code point; id i is vocab[i]
    sources: tuple[str, ...]  # the files read
    sha256: str = ""  # of the text as encoded (UTF-8, after fortunes' separators are dropped)

    def decode(self, ids: torch.Tensor) -> str:
        return "".join(self.vocab[int(i)] for i in ids)


def fortunes_files(search_dirs: tuple[str, ...]) -> list[Path]:
    """The four fortunes files from the first of <dir>/fortunes (for each search dir), then the system copy,
    that has them all."""
    for folder in [*(Path(d) / "fortunes" for d in search_dirs), Path(FORTUNES_SYSTEM_DIR)]:
        files = [folder / name for name in FORTUNES]
        if all(f.is_file() for f in files):
            return files
    raise UsageError(
        f"no text given and the fortunes files ({', '.join(FORTUNES)}) were not found",
        hint="pass --text FILE, or install them: apt-get install fortunes fortunes-min "
        f"(they land in {FORTUNES_SYSTEM_DIR}), or put them in <--data-dir>/fortunes",
    )


def read_text(path: Path, limit: int = MAX_TEXT_BYTES) -> str:
    """A bounded regular file as UTF-8 text; binary or undecodable content is refused in one line."""
    raw = read_regular_file(path, limit, "text file")
    if b"\0" in raw:
        raise UsageError(f"text file {path} is binary (it contains NUL bytes)", hint="give a plain UTF-8 text file")
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise UsageError(f"text file {path} is not UTF-8 text ({e.reason} at byte {e.start})") from None


def load_corpus(spec: TextSpec) -> Corpus:
    """The text of spec (fortunes: the files joined, their '%' separator lines dropped), encoded."""
    if spec.path is not None:
        paths = [Path(spec.path)]
        text = read_text(paths[0])
    else:
        paths = fortunes_files(spec.search_dirs)
        parts, budget = [], MAX_TEXT_BYTES
        for p in paths:
            parts.append(read_text(p, budget))
            budget -= len(parts[-1].encode("utf-8"))
        text = re.sub(r"^%\n", "", "".join(parts), flags=re.MULTILINE)
    if not text:
        raise UsageError(f"text file {paths[0]} is empty")
    # one uint32 code point per character; np.unique gives the sorted character set and every id at once
    points = np.frombuffer(text.encode("utf-32-le"), dtype=np.uint32)
    chars, ids = np.unique(points, return_inverse=True)
    if len(chars) > MAX_VOCAB:
        raise UsageError(f"text {paths[0]} has {len(chars)} distinct characters, more than {MAX_VOCAB}")
    vocab = "".join(chr(int(c)) for c in chars)
    digest = hashlib.sha256(text.encode("utf-8")).hexdigest()
    return Corpus(torch.from_numpy(ids.astype(np.int32)), vocab, tuple(str(p) for p in paths), digest)


def block_count(corpus: Corpus, context: int) -> int:
    """How many whole blocks of context + 1 characters the text holds; fewer than two is refused."""
    n = corpus.ids.numel() // (context + 1)
    if n < 2:
        raise UsageError(
            f"text of {corpus.ids.numel()} characters is too short for context {context}",
            hint=f"it needs at least {2 * (context + 1)} characters (a training and a validation block)",
        )
    return n


def split_blocks(corpus: Corpus, context: int, val_fraction: float, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(train, validation) blocks of context + 1 consecutive characters, shapes (n_train, C+1) and (n_val, C+1):
    the text cut into whole blocks (the tail dropped), a permutation seeded by `seed` choosing round(val_fraction
    * blocks) (at least one) for validation. A block is an input (its first C characters) and its next-character
    targets (the last C), so training and validation never share a character position."""
    n = block_count(corpus, context)
    blocks = corpus.ids[: n * (context + 1)].reshape(n, context + 1)
    order = torch.randperm(n, generator=generator(seed, "text-split"))
    n_val = min(n - 1, max(1, round(val_fraction * n)))
    return blocks[order[n_val:]], blocks[order[:n_val]]
