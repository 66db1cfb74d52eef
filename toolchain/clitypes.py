"""Click parameter types the two CLIs share: a choice whose names come from a registry loaded on first use, so that
`--version` and `--help` answer without importing numpy, onnx or libclang."""
from __future__ import annotations

from typing import Any, Callable, Iterable, Sequence

import click


class LazyChoice(click.Choice):
    """click.Choice whose choices are read from `load()` the first time a value is checked or help is shown."""

    def __init__(self, load: Callable[[], Iterable[str]], case_sensitive: bool = True) -> None:
        self._load = load
        self._loaded: tuple[str, ...] | None = None
        super().__init__((), case_sensitive)

    @property  # type: ignore[override]
    def choices(self) -> Sequence[Any]:
        if self._loaded is None:
            self._loaded = tuple(self._load())
        return self._loaded

    @choices.setter
    def choices(self, value: Sequence[Any]) -> None:
        """click.Choice.__init__ assigns the (empty) eager list: the loader stays the source."""
