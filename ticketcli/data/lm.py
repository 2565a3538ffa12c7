"""`--dataset text`: a corpus (data/text.py: `--text FILE`, or the fortunes files) as next-character prediction.

The text is cut into whole blocks of context + 1 characters (the tail dropped). A fixed permutation, the same for
every seed, holds out TEST_FRACTION of the blocks as the test set, so that tickets of different seeds are measured
on the same characters; the rest is the training pool, which datasets.draw_splits shuffles with the split seed into
extraction and validation blocks, as for an image dataset: by default 90% and 10% of the pool, at most the
registry's 6000 and 600 blocks. A block's input is its first `context` characters and
its targets are the `context` characters that follow each of them: x is (N, context) ids, y is (N, context).

The ticket records what the blocks were cut from (TextRecord): the text's sha256, its files, its length, its
vocabulary and the context. A reader redraws the splits from the same text only: another text (a different digest)
is refused in one line naming the difference."""

from __future__ import annotations

import torch

from ticketcli.contract.schema import JsonObject
from ticketcli.data.registry import DATASETS, Pools
from ticketcli.data.text import Corpus, block_count, load_corpus
from ticketcli.errors import UsageError
from ticketcli.seeding import generator
from ticketcli.specs.run import DataSpec
from ticketcli.specs.text import TextSpec

TEST_FRACTION = 0.1  # of the blocks, held out as the test set
VAL_FRACTION = 0.1  # of the remaining blocks, the default validation split
TEST_SEED = 20260103  # the fixed permutation that picks the test blocks (seed-independent, like digits' test set)


def corpus_of(spec: DataSpec) -> Corpus:
    """The text `spec` names (--text, or the fortunes files found in its search dirs), encoded."""
    return load_corpus(TextSpec(path=spec.text, search_dirs=spec.search_dirs))


def text_record(corpus: Corpus, context: int, blocks: int) -> JsonObject:
    """What a ticket records of its text: enough to refuse another one, and to say how they differ."""
    return {
        "sha256": corpus.sha256,
        "sources": list(corpus.sources),
        "characters": int(corpus.ids.numel()),
        "vocab": len(corpus.vocab),
        "context": context,
        "blocks": blocks,
    }


def load_text(spec: DataSpec) -> Pools:
    """The text's training pool and test set as (inputs, targets) blocks of spec.context characters."""
    if spec.context is None:
        raise UsageError("--dataset text needs a character-level model to set its block length (its context)")
    corpus = corpus_of(spec)
    c = spec.context
    n = block_count(corpus, c)
    if n < 3:
        raise UsageError(
            f"text of {corpus.ids.numel()} characters is too short for context {c}",
            hint=f"it needs at least {3 * (c + 1)} characters (an extraction, a validation and a test block)",
        )
    blocks = corpus.ids[: n * (c + 1)].reshape(n, c + 1).long()
    order = torch.randperm(n, generator=generator(TEST_SEED, "text-test"))
    n_test = min(n - 2, max(1, round(TEST_FRACTION * n)))
    test, pool = blocks[order[:n_test]], blocks[order[n_test:]]
    info = DATASETS.get("text")  # its default sizes, at most; a shorter text gives 90% / 10% of its pool
    n_val = min(info.n_val, len(pool) - 1, max(1, round(VAL_FRACTION * len(pool))))
    return Pools(
        pool[:, :-1].contiguous(),
        pool[:, 1:].contiguous(),
        test[:, :-1].contiguous(),
        test[:, 1:].contiguous(),
        source=", ".join(corpus.sources),
        sizes=(min(info.n_extract, len(pool) - n_val), n_val),
        record={"text": text_record(corpus, c, n)},
    )
