"""Kernel symbols back to (name, template arguments), through the C++ runtime's own demangler (`cxxfilt`)."""
from __future__ import annotations

import re

import cxxfilt

from .cxx import split_top_level

_LITERAL_CAST = re.compile(r"\((?:unsigned |signed )?(?:char|short|int|long|long long)\)(-?\d+)")
_INT_SUFFIX = re.compile(r"\b(-?\d+)(?:u|l|ul|ll|ull)\b")


def _matching_open(text: str, close: int, pair: str) -> int:
    """Index of the bracket that opens the one closing at `close`."""
    depth = 0
    for i in range(close, -1, -1):
        if text[i] == pair[1]:
            depth += 1
        elif text[i] == pair[0]:
            depth -= 1
            if depth == 0:
                return i
    return -1


def demangle_entry(sym: str) -> tuple[str, str | None]:
    """(unqualified name, template arguments as C++ text) of a kernel symbol.

    `_ZN2ns4tileILi8ELb1EEEvPf` -> ('tile', '8, true'); '' without template arguments; an unmangled (extern "C")
    symbol is its own name. Integer literals lose their casts and suffixes ('(unsigned char)3', '7u' -> '3', '7'),
    so the text compares equal to toolchain.cxx.template_args_text of the launch's arguments."""
    if not sym.startswith("_Z"):
        return sym, ""
    try:
        text = cxxfilt.demangle(sym)
    except cxxfilt.InvalidName:
        return sym, None
    if text.endswith(")"):
        text = text[:_matching_open(text, len(text) - 1, "()")].rstrip()
    args = ""
    if text.endswith(">"):
        start = _matching_open(text, len(text) - 1, "<>")
        args = ", ".join(_INT_SUFFIX.sub(r"\1", _LITERAL_CAST.sub(r"\1", a))
                         for a in split_top_level(text[start + 1:-1]))
        text = text[:start]
    name = text.split("::")[-1].split()[-1]
    return name, args
