"""The base of every command's typed result: a frozen dataclass whose attributes the tables read and whose
`to_document()` is the command's `--json` document (docs/json.md). Each command defines its own subclass beside the
workflow that produces it; this module only fixes the shape they share. Torch-free: it imports the JSON contract's
schema names and nothing else of the package.

A result also reads like the document it prints (`result["metrics"]["test"]["accuracy"]`): the Python API returned
plain dicts before the results were typed, and docs/api.md promises that access."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any, ClassVar

from ticketcli.contract.schema import SCHEMAS, JsonObject


class Result(Mapping[str, Any]):
    """Subclass as `@dataclass(frozen=True) class XResult(Result)`, set COMMAND (a key of contract.SCHEMAS) and
    write `body()`: the document less its `schema`, which is added here."""

    COMMAND: ClassVar[str]

    def body(self) -> JsonObject:
        raise NotImplementedError(f"{type(self).__name__} does not define body()")

    def to_document(self) -> JsonObject:
        """The `--json` document: `schema` first, then the body."""
        return {"schema": SCHEMAS[self.COMMAND], **{k: v for k, v in self.body().items() if k != "schema"}}

    # read-only mapping access over the document
    def __getitem__(self, key: str) -> Any:
        return self.to_document()[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self.to_document())

    def __len__(self) -> int:
        return len(self.to_document())
