"""How long work reports its progress: the CLI passes a rich bar, scripts pass nothing."""

from __future__ import annotations

from typing import Protocol


class Progress(Protocol):
    """Receives the steps of a long job (a record migration, a copy, an export)."""

    def begin(self, label: str, total: int | None) -> None:
        """A new stage starts; `total` items are expected (None if unknown)."""

    def advance(self, count: int) -> None:
        """`count` more items of the current stage are done."""

    def end(self) -> None:
        """The current stage is finished."""


class Silent:
    """Progress that reports nothing (the default, and `--quiet`)."""

    def begin(self, label: str, total: int | None) -> None:
        pass

    def advance(self, count: int) -> None:
        pass

    def end(self) -> None:
        pass
