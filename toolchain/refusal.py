"""Typed refusals: why a binding, a library call or a tool cannot do what was asked, in one line.

A check deep in a chain of helpers raises `Refused`; the one place that answers "can this run?" catches it and
hands back a `Refusal` value (or None: it can). No caller tells a result from a reason by its type being str."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, TypeVar

T = TypeVar("T")


@dataclass(frozen=True)
class Refusal:
    """Why something cannot be done: a one-line reason, and who refuses ('Conv/direct', 'library'; '' when the
    caller names it)."""

    reason: str
    by: str = ""

    def __str__(self) -> str:
        return self.reason


class Refused(ValueError):
    """Raised by a check that cannot go on; the caller that asks "can this run?" catches it once."""

    def __init__(self, reason: str, by: str = "") -> None:
        super().__init__(reason)
        self.refusal = Refusal(reason, by)

    @property
    def reason(self) -> str:
        """The one-line reason."""
        return self.refusal.reason


def attempt(make: Callable[[], T]) -> T | Refusal:
    """`make()`'s result, or the Refusal it raised (for callers that keep the outcome as a value)."""
    try:
        return make()
    except Refused as exc:
        return exc.refusal
