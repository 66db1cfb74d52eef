"""A bound on what a source's macros expand to, checked on the text before a parser or compiler expands them: a
"macro bomb" (`#define A1 A0 A0`, `#define A2 A1 A1`, ... each doubling) makes a preprocessor run out of memory or
time on a file of a few hundred bytes."""
from __future__ import annotations

import re
from typing import Iterable

MAX_EXPANSION = 2_000_000  # tokens one use of a macro may expand to (a real macro is at most a few thousand)

_CONTINUATION = re.compile(r"\\\r?\n")
_DEFINE = re.compile(r"^[ \t]*#[ \t]*define[ \t]+([A-Za-z_]\w*)(\([^)\n]*\))?([^\n]*)$", re.M)
_TOKEN = re.compile(r"[A-Za-z_]\w*|\d[\w.]*|\"(?:\\.|[^\"\\\n])*\"|'(?:\\.|[^'\\\n])*'|\S")
_IDENT = re.compile(r"[A-Za-z_]\w*")


def expansion_bomb(sources: Iterable[tuple[str, str]], limit: int = MAX_EXPANSION) -> str | None:
    """`file:line:1: error: ...` for the first macro, among the #defines of `sources` ((file, text) pairs), that
    expands past `limit` tokens and is used outside the #define lines; None when there is none. Parameters count
    as one token each and a name defined twice takes its larger body: an over-estimate never misses a bomb."""
    bodies: dict[str, list[str]] = {}
    where: dict[str, tuple[str, int]] = {}
    used: set[str] = set()
    for file, text in sources:
        joined = _CONTINUATION.sub(" ", text)
        for m in _DEFINE.finditer(joined):
            name, body = m.group(1), _TOKEN.findall(m.group(3))
            if len(body) >= len(bodies.get(name, [])):
                bodies[name] = body
                where[name] = (file, text.count("\n", 0, _offset(text, joined, m.start())) + 1)
        used.update(_IDENT.findall(_DEFINE.sub("", joined)))
    sizes: dict[str, int] = {}
    for name in sorted(set(bodies) & used, key=lambda n: where[n]):
        if _size(name, bodies, sizes, limit) > limit:
            file, line = where[name]
            return (f"{file}:{line}:1: error: macro '{name}' expands to more than {limit:,} tokens (a macro bomb?); "
                    f"refusing to preprocess it")
    return None


def _size(root: str, bodies: dict[str, list[str]], sizes: dict[str, int], limit: int) -> int:
    """Tokens `root` expands to (memoised, capped past `limit`; a macro reached again while being measured counts as
    one token, as the preprocessor leaves a self-reference unexpanded). Iterative: a chain of thousands of macros
    is no deeper for it."""
    stack = [root]
    busy: set[str] = set()
    while stack:
        name = stack[-1]
        if name in sizes:
            stack.pop()
            continue
        busy.add(name)
        pending = [t for t in bodies[name] if t in bodies and t not in sizes and t not in busy]
        if pending:
            stack.extend(dict.fromkeys(pending))
            continue
        total = 0
        for tok in bodies[name]:
            total = min(total + (sizes.get(tok, 1) if tok in bodies else 1), limit + 1)
        sizes[name] = total
        busy.discard(name)
        stack.pop()
    return sizes[root]


def _offset(text: str, joined: str, at: int) -> int:
    """The offset in `text` of offset `at` of `joined` (continuations removed): good enough for a line number."""
    if len(text) == len(joined):
        return at
    removed = 0
    for m in _CONTINUATION.finditer(text):
        if m.start() - removed >= at:
            break
        removed += len(m.group(0)) - 1
    return at + removed
