"""How every command prints an error: one summary line, and the detail below it, never a traceback."""
from __future__ import annotations


def whole_message(exc: BaseException) -> str:
    """An error's whole text: the first line as the summary, the detail (which threads wait where, the sites of a
    sanitizer report) below it, indented."""
    lines = [ln.rstrip() for ln in str(exc).splitlines() if ln.strip()] or [type(exc).__name__]
    return "\n".join([lines[0]] + ["  " + ln.strip() for ln in lines[1:]])
