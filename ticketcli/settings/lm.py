"""`--dataset text` at resolution: the character-level model it needs (gpt-nano:l2-d64-h4-c64 when --model is left
out), its `-v` filled in from the text's own characters, and the text and block length the data spec carries;
every model/dataset mismatch refused in one line. The text is read here (data/lm.py, with torch) only when the
dataset is text."""

from __future__ import annotations

from os.path import abspath
from typing import Any

from ticketcli.data.registry import DatasetInfo
from ticketcli.errors import UsageError
from ticketcli.models.registry import parse_model, text_model
from ticketcli.specs.run import ModelSpec

DEFAULT_TEXT_MODEL = "gpt-nano:l2-d64-h4-c64"  # --dataset text without --model


def text_model_spec(
    info: DatasetInfo, model: ModelSpec | None, text: Any, search_dirs: tuple[str, ...], *, bias: bool
) -> tuple[ModelSpec, dict[str, Any]]:
    """(the model, the DataSpec fields for the text) of a run on `info`, which is text or has a character-level
    model: for an image dataset, --text and the character-level model are refused."""
    if not info.text:
        if text is not None:
            raise UsageError(f"--text is read with --dataset text, not {info.name}", hint="add --dataset text")
        if model is not None and text_model(model.arch):
            raise UsageError(
                f"{model.arch} is a character-level language model: it takes character ids, not {info.name} images",
                hint="pass --dataset text (the fortunes files, or --text FILE)",
            )
        raise UsageError(f"--dataset {info.name} has no text")  # the caller asks only for text or a text model
    model = parse_model(DEFAULT_TEXT_MODEL, bias=bias) if model is None else model
    if not text_model(model.arch):
        raise UsageError(
            f"--dataset text is next-character prediction for a character-level model, not {model.to_string()[:80]}",
            hint=f"use --model {DEFAULT_TEXT_MODEL}",
        )
    from ticketcli.data.lm import corpus_of  # reads the text (torch): only for a text run
    from ticketcli.models.gpt import gpt_numbers, with_vocab
    from ticketcli.specs.run import DataSpec

    path = None if text is None else abspath(str(text))
    corpus = corpus_of(DataSpec(name=info.name, search_dirs=search_dirs, text=path))
    model = with_vocab(model, len(corpus.vocab))
    return model, {"text": path, "context": gpt_numbers(model)["c"]}
