"""Input values a kernel uses as indices: the range that keeps them inside the array they index.

A histogram kernel reads bin numbers (or letters: `a[i] - 'a'`) from an integer input buffer and indexes a bin
array with them (`atomicAdd(&bins[a[i] / 4], 1)`, `atomicAdd(H + bin, 1)` through a local `bin = A[i]`). A launch
spec's random integers (-1000..1000) then index far outside the bins: memcheck stops the legacy run, although the
program itself fills the input with values in range. `index_ranges` reads the kernel's text for such uses and gives
each input buffer the [low, high) under which every such index stays inside its array (the spec's `low`/`high`).

The index expression may combine the value with constants, macros, scalar arguments and thread/block indices by
+, -, *, / and %: the bounds come from a search over the value, with the thread/block indices at their smallest
(lower bound) and largest (upper bound) and any other name 0; an expression that does not grow with the value (or
whose range is empty) is left alone.
"""
from __future__ import annotations

import re
from collections.abc import Callable

from converter.slice import KernelParam
from toolchain.cxx import closing_bracket, split_top_level

_INT_ELEMS = {"int", "unsigned int", "unsigned", "char", "signed char", "unsigned char", "short", "unsigned short",
              "long", "unsigned long", "long long", "unsigned long long", "int32_t", "uint32_t", "int8_t", "uint8_t",
              "int16_t", "uint16_t", "int64_t", "uint64_t", "size_t", "uint"}
_ASSIGN = re.compile(r"(?<![\w.\]>])([A-Za-z_]\w*)\s*(?<![=!<>+\-*/%&|^])=(?!=)\s*([^;{}]+);")
_ARRAY_DECL = re.compile(r"(?:__shared__\s+)?\b(?:const\s+)?(?:unsigned\s+)?[A-Za-z_]\w*\s+([A-Za-z_]\w*)\s*"
                         r"\[([^\[\]]+)\]\s*(?:=[^;]*)?;")
_ATOMIC_PTR = re.compile(r"\batomic\w+\s*\(\s*")
_CHAR = re.compile(r"'(\\?.)'")
_SPAN = 1 << 31


def kernel_body(text: str, name: str) -> str | None:
    """The body of the __global__ function `name` in text (the last definition: a declaration comes first)."""
    best = None
    for m in re.finditer(rf"__global__[^;{{}}]*?\b{re.escape(name)}\s*\(", text):
        close = closing_bracket(text, m.end() - 1, "(", ")")
        rest = text[close:close + 200] if close > 0 else ""
        brace = re.match(r"[^;{]*\{", rest)
        if brace is None:
            continue
        start = close + brace.end() - 1
        end = closing_bracket(text, start, "{", "}")
        if end > 0:
            best = text[start:end]
    return best


def _subscripts(text: str) -> list[tuple[str, str]]:
    """(array name, index text) of every `name[...]` in text, nested ones included."""
    out = []
    for m in re.finditer(r"\b([A-Za-z_]\w*)\s*\[", text):
        end = closing_bracket(text, m.end() - 1, "[", "]")
        if end > 0:
            out.append((m.group(1), text[m.end():end - 1]))
    return out


def _pointer_sums(text: str, arrays: set[str]) -> list[tuple[str, str]]:
    """(array, offset text) of an atomic's address `bins + e` (pointer arithmetic on a known array)."""
    out = []
    for m in _ATOMIC_PTR.finditer(text):
        end = closing_bracket(text, m.start() + m.group(0).index("("), "(", ")")
        args = split_top_level(text[m.end():end - 1]) if end > 0 else []
        first = args[0] if args else ""
        pm = re.fullmatch(r"\s*\(?\s*([A-Za-z_]\w*)\s*\+\s*(.+?)\)?\s*", first, re.S)
        if pm and pm.group(1) in arrays:
            out.append((pm.group(1), pm.group(2)))
    return out


def _integer_input(p: KernelParam, body: str) -> bool:
    elem = " ".join(re.sub(r"\b(const|volatile|__restrict__|__restrict)\b", " ", p.elem or "").split())
    if not p.pointer or elem not in _INT_ELEMS:
        return False
    written = re.search(rf"\b{re.escape(p.name)}\s*\[[^\]]*\]\s*(?:[+\-*/%&|^]?=(?!=)|\+\+|--)", body) or \
        re.search(rf"\batomic\w+\s*\(\s*&?\s*\(?\s*{re.escape(p.name)}\b", body)
    return not written


def index_ranges(text: str, kernel: str, params: list[KernelParam], sizes: dict[str, int],
                 value: Callable[[str], float | None], grid: list[int], block: list[int]) -> dict[str, tuple[int, int]]:
    """{input buffer: (low, high)} for the integer input buffers of `kernel` whose values index an array (a buffer
    argument of `sizes` elements or a fixed-size array the kernel declares); `value` gives a name's value (a
    macro, a scalar argument) or None."""
    body = kernel_body(text, kernel)
    if body is None:
        return {}
    inputs = [p.name for p in params if p.name and _integer_input(p, body)]
    if not inputs:
        return {}
    lengths = dict(sizes)
    for m in _ARRAY_DECL.finditer(body):
        n = _eval(m.group(2), value, {})
        if n is not None and n > 0:
            lengths.setdefault(m.group(1), int(n))
    fixed = _single_assignments(body)
    reads = re.compile(rf"\b({'|'.join(map(re.escape, inputs))})\s*\[")
    out: dict[str, tuple[int, int]] = {}
    for src in inputs:
        derived = _derived(body, src)
        derived.update({k: v for k, v in fixed.items() if k not in derived})
        uses = [(a, e) for a, e in _subscripts(body) + _pointer_sums(body, set(lengths)) if a in lengths and a != src]
        for array, index in uses:
            expr = _substitute(index, src, derived)
            if expr is None or reads.search(expr.replace("__v", "")):
                continue
            rng = _solve(expr, lengths[array], value, grid, block)
            if rng is not None:
                lo, hi = out.get(src, rng)
                out[src] = (max(lo, rng[0]), min(hi, rng[1]))
    return {k: v for k, v in out.items() if v[0] < v[1]}


def _single_assignments(body: str) -> dict[str, str]:
    """Locals assigned once, with that expression (`int bin_start = blockIdx.x * BINS;`, a loop's start), other
    locals inlined a few levels: an index's other terms at their values for the first and the last thread."""
    count: dict[str, int] = {}
    first: dict[str, str] = {}
    for m in _ASSIGN.finditer(body):
        count[m.group(1)] = count.get(m.group(1), 0) + 1
        first.setdefault(m.group(1), m.group(2))
    out = {k: v for k, v in first.items() if count[k] == 1 and not re.search(rf"\b{re.escape(k)}\b", v)}
    for _ in range(3):
        out = {k: re.sub(r"\b[A-Za-z_]\w*\b", lambda m: f"({out[m.group(0)]})" if m.group(0) in out
                         and m.group(0) != k else m.group(0), v) for k, v in out.items()}
    return out


def _derived(body: str, src: str) -> dict[str, str]:
    """Locals assigned (at least once) an expression that reads `src[...]` (directly or through another such
    local), each with the first such expression, in terms of `__v` (the value read)."""
    out: dict[str, str] = {}
    for _ in range(3):  # a chain of locals: `curr = A[i]; ... last = curr;`
        for m in _ASSIGN.finditer(body):
            name, rhs = m.group(1), m.group(2)
            if name in out or name == src:
                continue
            e = _substitute(rhs, src, out)
            if e is not None:
                out[name] = e
    return out


def _substitute(expr: str, src: str, derived: dict[str, str]) -> str | None:
    """expr with each `src[...]` and each derived local replaced by its expression in `__v`; None when it reads
    neither."""
    parts, i = [], 0
    for m in re.finditer(rf"\b{re.escape(src)}\s*\[", expr):
        if m.start() < i:
            continue  # inside a read replaced already
        end = closing_bracket(expr, m.end() - 1, "[", "]")
        if end < 0:
            return None
        parts += [expr[i:m.start()], "(__v)"]
        i = end
    e = "".join(parts) + expr[i:]
    e = re.sub(r"\b[A-Za-z_]\w*\b", lambda m: f"({derived[m.group(0)]})" if m.group(0) in derived else m.group(0), e)
    return e if "__v" in e else None


def _eval(expr: str, value: Callable[[str], float | None], names: dict[str, int]) -> float | None:
    """A C integer expression's value: character literals, casts dropped, names from `names`, then `value`, else 0
    for a thread's own locals (a loop counter)."""
    e = _CHAR.sub(lambda m: str(ord(m.group(1)[-1]) if not m.group(1).startswith("\\") else 0), expr)
    e = re.sub(r"\(\s*(?:const\s+)?(?:unsigned\s+)?(?:int|char|short|long|size_t|u?int\d+_t)\s*\)", " ", e)
    e = re.sub(r"(\d)[uUlL]+\b", r"\1", e)
    if not re.fullmatch(r"[\w\s.+\-*/%()]*", e):
        return None
    vals: dict[str, int] = {}
    for n in set(re.findall(r"\b[A-Za-z_]\w*(?:\.[xyz])?\b", e)):
        v = names.get(n)
        if v is None:
            w = value(n)
            v = int(w) if w is not None and float(w).is_integer() else 0
        vals[n.replace(".", "__")] = v
    code = re.sub(r"\b([A-Za-z_]\w*)\.([xyz])\b", r"\1__\2", e)
    code = re.sub(r"(?<!/)/(?!/)", "//", code)
    try:
        r = eval(code, {"__builtins__": {}}, vals)  # noqa: S307 - digits, names and + - * / % only (checked above)
    except Exception:  # noqa: BLE001 - not an expression this reads (a division by a name that is 0 here)
        return None
    return r if isinstance(r, int) else None


def _solve(expr: str, length: int, value: Callable[[str], float | None], grid: list[int],
           block: list[int]) -> tuple[int, int] | None:
    """[low, high) of __v under which expr stays in [0, length): expr at the smallest thread/block indices must be
    >= 0 at low, at the largest <= length - 1 at high - 1 (searched by bisection: expr must grow with __v)."""
    lows = {f"{d}.{c}": 0 for d in ("threadIdx", "blockIdx") for c in "xyz"}
    highs = {f"threadIdx.{c}": max(1, b) - 1 for c, b in zip("xyz", block)}
    highs.update({f"blockIdx.{c}": max(1, g) - 1 for c, g in zip("xyz", grid)})
    dims = {f"blockDim.{c}": b for c, b in zip("xyz", block)} | {f"gridDim.{c}": g for c, g in zip("xyz", grid)}
    lows.update(dims)
    highs.update(dims)

    def at(v: int, names: dict[str, int]) -> int | None:
        r = _eval(expr, value, {**names, "__v": v})
        return None if r is None else int(r)
    probes = [at(v, lows) for v in (-_SPAN, -1000, 0, 1000, _SPAN - 1)]
    if any(p is None for p in probes) or any(b < a for a, b in zip(probes, probes[1:])) or probes[0] == probes[-1]:
        return None  # not an index that grows with the value

    def first(pred: Callable[[int], bool]) -> int:
        lo, hi = -_SPAN, _SPAN  # smallest v in [lo, hi) with pred(v) (pred monotone), hi if none
        while lo < hi:
            mid = (lo + hi) // 2
            if pred(mid):
                hi = mid
            else:
                lo = mid + 1
        return lo
    low = first(lambda v: (at(v, lows) or 0) >= 0)
    high = first(lambda v: (at(v, highs) or 0) > length - 1)
    return (low, high) if low < high else None
