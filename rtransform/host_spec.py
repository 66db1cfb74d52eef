"""`rtransform spec FILE --kernel K --from-host`: a launch spec read from the host code that launches the kernel.

The launch site (`K<<<grid, block, smem, stream>>>(args)`, `K<T, 64><<<...>>>`, `cudaLaunchKernel((void*)K, grid,
block, args, smem, stream)`) gives the grid, block, dynamic shared memory, template arguments and the argument
expressions; each pointer argument's `cudaMalloc(&p, bytes)` gives its buffer size, a `cudaMemcpy(p, ...,
cudaMemcpyHostToDevice)` (or a const pointee) makes it an input; the names these expressions use are looked up in
the launching function (`int n = 1 << 20;`, `dim3 grid(...)`, `grid.x = ...`), the file's constants (`#define`,
`const int`), and, for a launcher function's parameters, the arguments of its calls. Names that stay unknown
(sizes read from argv or a file) get a small default; sizes too large for the CPU emulator are scaled down. Every
such choice is a note in the spec's header, and `--set NAME=VALUE` gives any name its value (the source's size,
or another).

Public API:
    spec_from_host(text, filename, kernel, flags=None, host_texts=None, overrides=None) -> HostSpec
    HostSpecError: no launch of the kernel in the host code (the caller falls back to the skeleton)
"""
from __future__ import annotations

import dataclasses
import keyword
import math
import os
import re
from dataclasses import dataclass, field

import numpy as np
import yaml

from converter.flags import CompileFlags
from converter.slice import KernelParam, slice_source
from rtransform.index_ranges import index_ranges
from rtransform.spec import C_TYPE_DTYPES, LAUNCH_CLOSE, LAUNCH_OPEN, record_layout
from toolchain.cxx import closing_bracket

DEFAULT_SIZE = 1024       # an unknown size-like name (read at run time)
SCALAR_SIZE_DEFAULT = 128  # an unknown name only a size-named integer argument uses (a GEMM's K): whole tiles up to 128
MAX_THREADS = 1 << 14     # the CPU emulator runs every thread as a fiber: specs stay small
MAX_ELEMENTS = 1 << 22    # per buffer
SMEM_UNDERIVED = 48 * 1024  # dynamic shared memory whose expression is not derived (`n * sizeof(T)`, T a parameter)
SIZEOF = {"char": 1, "unsigned char": 1, "signed char": 1, "bool": 1, "short": 2, "unsigned short": 2, "int": 4,
          "unsigned": 4, "unsigned int": 4, "float": 4, "long": 8, "unsigned long": 8, "long long": 8,
          "unsigned long long": 8, "double": 8, "size_t": 8, "int8_t": 1, "uint8_t": 1, "int16_t": 2,
          "uint16_t": 2, "int32_t": 4, "uint32_t": 4, "int64_t": 8, "uint64_t": 8, "half": 2, "__half": 2,
          "__nv_bfloat16": 2, "float2": 8, "float4": 16, "int2": 8, "int4": 16, "double2": 16, "uint4": 16,
          "uchar4": 4, "char4": 4, "float3": 12, "int3": 12, "uint2": 8, "half2": 4, "__half2": 4, "uint": 4,
          "ushort": 2, "uchar": 1}
_LANES = {"2": 2, "3": 3, "4": 4}


class HostSpecError(Exception):
    """No usable launch of the kernel in the host code; str() says why."""


@dataclass
class HostSpec:
    yaml: str
    notes: list[str] = field(default_factory=list)
    site: str = ""


# ---- the host code's text ---------------------------------------------------------------------------------------
_COMMENTS = re.compile(r"//[^\n]*|/\*.*?\*/", re.S)


def strip_comments(text: str) -> str:
    """Comments blanked (lengths kept, so offsets stay)."""
    return _COMMENTS.sub(lambda m: re.sub(r"[^\n]", " ", m.group(0)), text)


_DIRECTIVE_LINE = re.compile(r"^[ \t]*#[^\n]*$", re.M)


def _split_args(s: str) -> list[str]:
    """Top-level comma-separated parts (brackets and template angle brackets respected loosely). Preprocessor lines
    inside the list (`#ifdef TESTING` around some arguments) are not arguments: dropped, every branch's arguments
    kept (the count is checked against the kernel's parameters)."""
    out, depth, cur = [], 0, ""
    for ch in _DIRECTIVE_LINE.sub("", s):
        if ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
        if ch == "," and depth == 0:
            out.append(cur.strip())
            cur = ""
        else:
            cur += ch
    return out + [cur.strip()] if cur.strip() else out


@dataclass
class Site:
    """One launch of the kernel."""
    file: str
    text: str          # the file's text, comments blanked
    at: int            # offset of the launch
    targs: list[str]
    grid: str
    block: str
    smem: str
    args: list[str]


def launch_sites(texts: dict[str, str], name: str) -> list[Site]:
    """`name<...><<<g, b, s, st>>>(args)` and `cudaLaunchKernel(name, g, b, args, s, st)` in the texts."""
    out = []
    chevron = re.compile(rf"\b{re.escape(name)}\s*(<(?:[^<>;{{}}]|<[^<>;{{}}]*>)*>)?\s*{LAUNCH_OPEN}")
    for file, raw in texts.items():
        text = strip_comments(raw)
        for m in chevron.finditer(text):
            shut = re.compile(LAUNCH_CLOSE).search(text, m.end())
            if shut is None:
                continue
            end = shut.start()
            cfg = _split_args(text[m.end():end])
            p = text.find("(", end)
            close = closing_bracket(text, p) if p >= 0 and not text[shut.end():p].strip() else -1
            if len(cfg) < 2 or close < 0:
                continue
            targs = _split_args(m.group(1)[1:-1]) if m.group(1) else []
            out.append(Site(file, text, m.start(), targs, cfg[0], cfg[1], cfg[2] if len(cfg) > 2 else "0",
                            _split_args(text[p + 1:close - 1])))
        for m in re.finditer(r"\bcudaLaunch(?:Cooperative)?Kernel\s*(?:<[^>]*>)?\s*\(", text):
            close = closing_bracket(text, m.end() - 1)
            parts = _split_args(text[m.end():close - 1]) if close > 0 else []
            if len(parts) < 4 or not re.search(rf"\b{re.escape(name)}\b", parts[0]):
                continue
            targs = []
            tm = re.search(rf"\b{re.escape(name)}\s*<(.*)>", parts[0])
            if tm:
                targs = _split_args(tm.group(1))
            out.append(Site(file, text, m.start(), targs, parts[1], parts[2], parts[4] if len(parts) > 4 else "0",
                            _args_array(text, m.start(), parts[3])))
    return out


def _args_array(text: str, at: int, expr: str) -> list[str]:
    """The argument expressions of `void *args[] = {&a, &b}` named by cudaLaunchKernel's args operand."""
    name = expr.strip().lstrip("(").split(")")[-1].strip()
    m = None
    for m in re.finditer(rf"\b{re.escape(name)}\s*\[\s*\w*\s*\]\s*=\s*\{{([^}}]*)\}}", text[:at]):
        pass
    if m is None:
        return []
    return [re.sub(r"^\(\s*void\s*\*\s*\)\s*", "", a).lstrip("&").strip() for a in _split_args(m.group(1))]


# ---- names and their values -------------------------------------------------------------------------------------
_FUNC_HEAD = re.compile(r"(?:^|[;}\n])\s*(?:template\s*<[^{};]*>\s*)?(?:extern\s*\"C\"\s*)?"
                        r"(?:[\w:<>,\*&\s]+?)\b(\w+)\s*"
                        r"\(([^()]*(?:\([^()]*\)[^()]*)*)\)\s*(?:const\s*)?\{", re.S)


def _enclosing_function(text: str, at: int) -> tuple[str, list[str], int, int] | None:
    """(name, parameter names, body start, body end) of the function around offset `at`."""
    best = None
    for m in _FUNC_HEAD.finditer(text, 0, at):
        body = m.end() - 1
        end = closing_bracket(text, body, "{", "}")
        if body < at < end and m.group(1) not in ("if", "for", "while", "switch", "catch", "return"):
            best = (m.group(1), [_param_name(p) for p in _split_args(m.group(2))], body, end)
    return best


def _param_name(p: str) -> str:
    p = p.split("=")[0].strip()
    m = re.search(r"(\w+)\s*(\[[^\]]*\])?$", p)
    return m.group(1) if m else ""


_ASSIGN = re.compile(r"(?<![\.\w>\]\[])\b([A-Za-z_]\w*)\s*=(?!=)\s*([^;]+);")
_DIM3_DECL = re.compile(r"\bdim3\s+(\w[^;]*);")  # `dim3 g(a, b), t(64);`, `dim3 g = {a}`, `dim3 g, t;`
_DIM3_DECLARATOR = re.compile(r"\s*(\w+)\s*(?:=\s*(?:dim3\s*)?)?(?:[\({](.*)[\)}]|(.*?))\s*", re.S)
_DIM3_SET = re.compile(r"(?<![\w.>])(\w+)\s*=\s*dim3\s*[\({]([^;]*)[\)}]\s*;")  # `threads = dim3(512, 1);`
_POINTER_CAST = re.compile(r"\(\s*[\w\s:<>]+\*+\s*\)")
_BUILTINS = ("min", "max", "ceil", "floor", "__cdiv")
# a cast to a floating type (`ceil((float) M / tile)`): the expression divides as floats, not as integers
_FLOAT_CAST = re.compile(r"\(\s*(?:const\s+)?(?:float|double)\s*\)|\bstatic_cast\s*<\s*(?:float|double)\s*>")
_CEIL_DIV = re.compile(r"\b(?:i?[dD]iv_?[uU]p|DIV_?UP|[cC]eil_?[dD]iv|CEIL_?DIV|cdiv|div_round_up|DivRoundUp)\s*\(")
_RUNTIME_VALUE = re.compile(r"\b(argv|atoi|atol|atof|strtol|strtoul|stoi|stol|getenv|getCmdLine\w*|scanf|rand)\b")
# C names that are Python keywords (rodinia's `int in`), renamed for the evaluator; the operators it uses stay
_PY_KEYWORDS = frozenset(keyword.kwlist) - {"if", "else", "and", "or", "not", "True", "False"}
_RUN_TIME_CALL = re.compile(r"^\s*(?:\(\s*\w+\s*\)\s*)?(?:(?!(?:min|max|ceil|floor|sizeof|dim3)\s*\()"
                            r"[A-Za-z_][\w:.]*\s*\(|\w+\s*(?:->|\[))")  # a call's value, a member or element read
_FIELD = re.compile(r"\b(\w+)\.(\w+)\s*=(?!=)\s*([^;=]+);")  # `grid.x = n / 256;`, `A.width = 64;`
_MEMBER_READ = re.compile(r"\b[A-Za-z_]\w*(?:\s*(?:\.|->)\s*[A-Za-z_]\w*|\s*\[\s*\w+\s*\])+")
_DEFINE = re.compile(r"^[ \t]*#[ \t]*define[ \t]+(\w+)[ \t]+([^\n\\]+)$", re.M)
_MACRO = re.compile(r"^[ \t]*#[ \t]*define[ \t]+(\w+)\(([\w\s,]*)\)[ \t]+([^\n\\]+)$", re.M)
_MALLOC = re.compile(r"\bcuda(?:Malloc|MallocManaged|MallocPitch)\s*\(")


AllocHelpers = dict[str, tuple[list[str], list[str], str]]  # name -> (template params, params, bytes)


def allocations(text: str, helpers: AllocHelpers | None = None) -> list[tuple[str, str]]:
    """(pointer name, bytes expression) of each `cudaMalloc(&p, bytes)` / `cudaMalloc((void **)&p, bytes)`, and of
    each `p = alloc<float>(n)` of a helper that returns what it allocates, in source order."""
    return [(name, size) for _, name, size in allocation_sites(text, helpers)]


def allocation_sites(text: str, helpers: AllocHelpers | None = None) -> list[tuple[int, str, str]]:
    """allocations() with the offset of each in text."""
    out = []
    for m in _MALLOC.finditer(text):
        close = closing_bracket(text, m.end() - 1)
        parts = _split_args(text[m.end():close - 1]) if close > 0 else []
        ptr = re.search(r"&\s*(\w+)\s*\)?\s*$", parts[0]) if len(parts) >= 2 else None
        if ptr and "Pitch" in m.group(0):  # cudaMallocPitch(&p, &pitch, width bytes, rows): rows of the pitch
            if len(parts) == 4:
                out.append((m.start(), ptr.group(1), f"({parts[2]}) * ({parts[3]})"))
        elif ptr:
            out.append((m.start(), ptr.group(1), parts[1]))
    for name, (tparams, pnames, size) in (helpers or {}).items():
        for c in re.finditer(rf"(?<![\w.>])(\w+)\s*=\s*{re.escape(name)}\s*(?:<([^<>;]*)>)?\s*\(", text):
            close = closing_bracket(text, c.end() - 1)
            if close < 0:
                continue
            sub = {p: f"({a})" for p, a in zip(pnames, _split_args(text[c.end():close - 1]))}
            sub.update(zip(tparams, (a.strip() for a in _split_args(c.group(2) or ""))))
            out.append((c.start(), c.group(1), re.sub(r"\b\w+\b", lambda w: sub.get(w.group(0), w.group(0)), size)))
    return sorted(out, key=lambda o: o[0])


def alloc_helpers(texts: list[str]) -> AllocHelpers:
    """Functions that return the one buffer they cudaMalloc (`template <class T> T *alloc(int n) { T *t;
    cudaMalloc((void **)&t, sizeof(T) * n); return t; }`): their allocations are read at each call."""
    out: AllocHelpers = {}
    for raw in texts:
        text = strip_comments(raw)
        for m in _FUNC_HEAD.finditer(text):
            end = closing_bracket(text, m.end() - 1, "{", "}")
            inner = text[m.end() - 1:end] if end > 0 else ""
            found, ret = allocations(inner), re.search(r"\breturn\s+(\w+)\s*;", inner)
            if len(found) != 1 or ret is None or found[0][0] != ret.group(1):
                continue
            tm = re.search(r"template\s*<([^{};]*)>", m.group(0))
            tparams = [_param_name(p) for p in _split_args(tm.group(1))] if tm else []
            out.setdefault(m.group(1), (tparams, [_param_name(p) for p in _split_args(m.group(2))], found[0][1]))
    return out
_MEMSET0 = re.compile(r"\bcudaMemset(?:Async)?\s*\(\s*(\w+)\s*,\s*0\s*,")


@dataclass
class Env:
    """Names -> C expressions, evaluated on demand; overrides win; unknowns are recorded."""
    exprs: dict[str, str] = field(default_factory=dict)
    overrides: dict[str, int] = field(default_factory=dict)
    macros: dict[str, tuple[list[str], str]] = field(default_factory=dict)  # function-like #defines
    types: dict[str, str] = field(default_factory=dict)      # typedef / using aliases of the files
    scaled: dict[str, int] = field(default_factory=dict)
    original: dict[str, int] = field(default_factory=dict)   # a scaled name's value before scaling
    unknown: set[str] = field(default_factory=set)
    used: set[str] = field(default_factory=set)              # names the launch's sizes were computed from
    block_names: set[str] = field(default_factory=set)       # those the block size was (never scaled)
    grid_names: set[str] = field(default_factory=set)        # those the grid size was (beside the block's)
    frozen: set[str] = field(default_factory=set)            # names the device code uses (never scaled)
    records: dict[str, int] = field(default_factory=dict)    # sizeof of the structs the kernel's parameters name

    def value(self, name: str, stack: tuple[str, ...] = ()) -> float | None:
        self.used.add(name)
        if name in self.overrides:
            return self.overrides[name]
        if name in self.scaled:
            return self.scaled[name]
        if name in self.exprs and name not in stack:
            v = evaluate(self.exprs[name], self, stack + (name,))
            if v is None and _RUN_TIME_CALL.search(_unwrapped(expand_macros(self.exprs[name], self.macros))):
                self.unknown.add(name)  # `workers = omp_get_num_threads()`, `n = atoi(argv[1])`: read at run time
            return v
        self.unknown.add(name)  # never defined, or only through itself (a caller's `M` passed as `M`)
        return None


def _unwrapped(expr: str) -> str:
    """expr without the parentheses around all of it (a caller's `atoi(argv[2])` inlined as `(atoi(argv[2]))`)."""
    e = expr.strip()
    while e.startswith("(") and closing_bracket(e, 0) == len(e):
        e = e[1:-1].strip()
    return e


def _c_to_python(expr: str) -> str:
    e = expr.strip()
    e = re.sub(r"\bsizeof\s*\(\s*([\w\s]+?)\s*\)", lambda m: str(SIZEOF.get(" ".join(m.group(1).split()), 0) or
                                                                  f"__sizeof_{m.group(1)}"), e)
    e = re.sub(r"\bstatic_cast\s*<[^>]*>", "", e)
    e = re.sub(r"\(\s*(?:const\s+)?(?:unsigned\s+)?(?:int|long|long\s+long|size_t|float|double|unsigned|int64_t|"
               r"uint32_t|uint64_t|int32_t|uint|ushort|short|char)\s*\)", "", e)
    e = re.sub(r"\bstd::", "", e)
    e = re.sub(r"(\d+(?:\.\d*)?)[uUlLfF]+\b", r"\1", e)
    e = e.replace("&&", " and ").replace("||", " or ").replace("!=", " != ")
    e = re.sub(r"!(?!=)", " not ", e)
    if "?" in e:
        m = re.fullmatch(r"(.+?)\?(.+):(.+)", e)
        if m:
            e = f"(({m.group(2)}) if ({m.group(1)}) else ({m.group(3)}))"
    return e


def _sizeof(name: str, env: Env) -> str:
    """`sizeof(T)` through the file's aliases; a struct a kernel parameter names becomes its size (libclang's)."""
    alias = _type_alias(name, env)
    size = env.records.get(alias) or env.records.get(name)
    return str(size) if size else f"sizeof({alias})"


def _type_alias(name: str, env: Env) -> str:
    """A type name through the file's typedefs and type macros (`typedef float ft;`, `#define DATA_TYPE float`)."""
    for _ in range(4):
        alias = env.types.get(name) or (env.exprs.get(name, "").strip() or None)
        if alias is None or alias == name:
            break
        name = alias
    return name


_TYPEDEF = re.compile(r"\btypedef\s+((?:unsigned\s+|signed\s+|long\s+|short\s+)*\w+)\s+(\w+)\s*;|"
                      r"\busing\s+(\w+)\s*=\s*((?:unsigned\s+|signed\s+|long\s+)*\w+)\s*;")


def expand_macros(expr: str, macros: dict[str, tuple[list[str], str]]) -> str:
    """Function-like macros (`CEIL_DIV(M, 32)`) expanded, a few levels deep."""
    for _ in range(6):
        m = next((m for m in re.finditer(r"\b(\w+)\s*\(", expr) if m.group(1) in macros), None)
        if m is None:
            return expr
        close = closing_bracket(expr, m.end() - 1)
        if close < 0:
            return expr
        params, body = macros[m.group(1)]
        args = _split_args(expr[m.end():close - 1])
        sub = dict(zip(params, args))
        text = re.sub(r"\b\w+\b", lambda w: f"({sub[w.group(0)]})" if w.group(0) in sub else w.group(0), body)
        expr = expr[:m.start()] + f"({text})" + expr[close:]
    return expr


def evaluate(expr: str, env: Env, stack: tuple[str, ...] = ()) -> float | None:
    """The value of a C integer/float expression over known names, or None (unknown names go to env.unknown)."""
    expr = " ".join(expr.split())  # an expression over several lines (Python would read the line break)
    expr = re.sub(r"\bsizeof\s*\(\s*(?:struct|class|union)\s+(\w+)\s*\)", r"sizeof(\1)", expr)  # C's `struct S`
    expr = re.sub(r"\bsizeof\s*\(\s*(\w+)\s*\)", lambda m: _sizeof(m.group(1), env), expr)
    expr = _CEIL_DIV.sub("__cdiv(", expr)  # the samples' iDivUp, divUp, ceil_div helper functions
    e = _c_to_python(expand_macros(expr, env.macros))
    refs: dict[str, str] = {}  # `props.multiProcessorCount`, `net->input_n`, `dims[1]`: names of their own

    def ref(m: re.Match) -> str:
        if re.fullmatch(r"\w+\.[xyz]", m.group(0)):
            return m.group(0)  # a dim3 field (below)
        refs[f"__ref{len(refs)}"] = re.sub(r"\s+", "", m.group(0))
        return f"__ref{len(refs) - 1}"
    e = _MEMBER_READ.sub(ref, e)
    if re.search(r"\b(sizeof|__sizeof_\w*|new|this)\b|->|\[", e):
        return None  # the size of a type this table lacks, another element read: not a host constant
    e = re.sub(r"\b([A-Za-z_]\w*)\.([xyz])\b", r"\1__dot_\2", e)  # dim3 fields: `grid.x`
    if not re.fullmatch(r"[\w\s\.\+\-\*/%\(\)<>=,!]*(?:if|else|and|or|not|[\w\s\.\+\-\*/%\(\)<>=,!])*", e):
        return None
    if any(m.group(1) not in (*_BUILTINS, "if", "else", "and", "or", "not")  # `c ? (a) : (b)` is no call
           for m in re.finditer(r"\b([A-Za-z_]\w*)\s*\(", e)):
        return None  # a call of a function (not a macro this file defines): no value here
    e = re.sub(r"\b[A-Za-z_]\w*\b", lambda m: f"__kw_{m.group(0)}" if m.group(0) in _PY_KEYWORDS else m.group(0), e)
    names = set(re.findall(r"\b[A-Za-z_]\w*\b", e)) - {"if", "else", "and", "or", "not", "min", "max", "ceil", "__cdiv",
                                                         "floor", "true", "false", "True", "False"}
    vals: dict[str, float] = {}
    for n in names:
        v = env.value(refs.get(n) or re.sub(r"__dot_([xyz])$", r".\1", n.removeprefix("__kw_")), stack)
        if v is None:
            return None
        vals[n] = v
    ints = all(float(v).is_integer() for v in vals.values()) and "." not in re.sub(r"\b\w+\b", "", e) \
        and not _FLOAT_CAST.search(expr)
    code = re.sub(r"(?<![/])/(?![/])", "//", e) if ints else e
    try:
        v = eval(code, {"__builtins__": {}, "min": min, "max": max, "ceil": math.ceil, "floor": math.floor,  # noqa: S307
                        "__cdiv": lambda a, b: -(-a // b),
                        "true": 1, "false": 0, "True": 1, "False": 0}, vals)
    except Exception:  # noqa: BLE001 - not an expression this evaluator understands
        return None
    return v if isinstance(v, (int, float)) and not isinstance(v, bool) else (int(v) if isinstance(v, bool) else None)


def file_env(text: str) -> dict[str, str]:
    """File-scope constants: `#define N 1024`, `const int N = ...;` (the first definition of a name wins)."""
    out: dict[str, str] = {}
    for m in _DEFINE.finditer(text):
        body = m.group(2).strip()
        if re.fullmatch(r"[\w\s\.\+\-\*/%\(\)<>]+", body):
            out.setdefault(m.group(1), body)
    _assignments(_file_scope(text), out, first=True)
    return out


def _file_scope(text: str) -> str:
    """The text outside every brace (file-scope declarations), pieces joined by ';'."""
    pieces, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        if ch == "{":
            if depth == 0:
                pieces.append(text[start:i])
            depth += 1
        elif ch == "}":
            depth = max(0, depth - 1)
            if depth == 0:
                start = i + 1
    pieces.append(text[start:] if depth == 0 else "")
    return ";\n".join(pieces)


def _assignments(text: str, out: dict[str, str], first: bool = False) -> None:
    """`name = expr;` (and `const int a = 1, b = a * 2;`: each declarator) into out."""
    for m in _ASSIGN.finditer(text):
        parts = _split_args(m.group(2))
        pairs = [(m.group(1), parts[0])]
        for extra in parts[1:]:
            d = re.fullmatch(r"\s*\**\s*([A-Za-z_]\w*)\s*=(?!=)\s*(.+)", extra, re.S)
            if d:
                pairs.append((d.group(1), d.group(2)))
        pairs = [p for name, expr in pairs for p in _chained(name, expr)]
        for name, expr in pairs:
            expr = _balanced_prefix(expr).strip()
            if name in out and _RUNTIME_VALUE.search(expr):
                continue  # `n = atoi(argv[1])` under an option: the value the program has without it stays
            # a parenthesised start is a value (`(1 << 14) + 7`, `(N + (t - 1) / t)`), unless a pointer cast or a
            # comma expression
            if expr.startswith(("{", "new ", "\"", "dim3")) or _POINTER_CAST.match(expr) or \
                    re.match(r"\(\s*[^()]*,", expr):
                continue  # an initialiser list, an allocation, a string, a dim3 (dim3_env reads those)
            if first:
                out.setdefault(name, expr)
            else:
                out[name] = expr


def _largest_smem(site: Site, env: Env) -> float | None:
    """The launch's dynamic shared-memory size; a name the launching function assigns more than once (cuda-samples
    reduction sets `smemSize` in one switch case for reduce7 and in another for the rest: the last one before the
    launch is not always the launch's) is the largest of its values, so the kernel never indexes past it."""
    v = evaluate(site.smem, env)
    fn = _enclosing_function(site.text, site.at)
    name = site.smem.strip()
    if fn is None or not re.fullmatch(r"[A-Za-z_]\w*", name):
        return v
    values = [v] + [evaluate(_balanced_prefix(m.group(2)), env) for m in _ASSIGN.finditer(site.text, fn[2], site.at)
                    if m.group(1) == name]
    known = [x for x in values if x is not None]
    return max(known) if known else None


def _balanced_prefix(expr: str) -> str:
    """The expression up to a ')' it does not open: a parameter's default value (`int test(bool a, const int count
    = 1000000)`) read up to the `;` of the body's first statement ends at the parameter list's ')'."""
    depth = 0
    for i, ch in enumerate(expr):
        depth += {"(": 1, ")": -1}.get(ch, 0)
        if depth < 0:
            return expr[:i]
    return expr


def _pitches(text: str, env: dict[str, str]) -> None:
    """The pitch `cudaMallocPitch(&p, &pitch, width_bytes, rows)` returns: the width itself here (any pitch at least
    the width is one the runtime may return; the allocation is read as pitch x rows), then the program's own
    conversions of it to elements (`pitch /= sizeof(float);`, `pitch = pitch / sizeof(float);`) in order."""
    for m in re.finditer(r"\bcudaMallocPitch\s*\(", text):
        close = closing_bracket(text, m.end() - 1)
        parts = _split_args(text[m.end():close - 1]) if close > 0 else []
        pitch = re.fullmatch(r"\s*(?:\(\s*size_t\s*\*\s*\))?\s*&\s*(\w+)\s*", parts[1]) if len(parts) == 4 else None
        if pitch is None:
            continue
        name = pitch.group(1)
        env[name] = f"({parts[2].strip()})"
        for c in re.finditer(rf"(?<![\w.>])\b{name}\s*(?:([*/])=|=\s*{name}\s*([*/]))\s*([^;]+);", text[close:]):
            env[name] = f"({env[name]} {c.group(1) or c.group(2)} ({c.group(3).strip()}))"


def _chained(name: str, expr: str) -> list[tuple[str, str]]:
    """`N = M = K = 2048`: K = 2048, M = K, N = M (as C assigns them), so a size scaled down stays equal to the
    others of its chain."""
    names = [name]
    while m := re.fullmatch(r"\s*([A-Za-z_]\w*)\s*=(?!=)\s*(.+)", expr, re.S):
        names.append(m.group(1))
        expr = m.group(2)
    return [(n, nxt) for n, nxt in zip(names, names[1:])] + [(names[-1], expr)]


def dim3_env(part: str, env: dict[str, str]) -> None:
    """dim3 variables of a piece of code, in source order: `dim3 g(a, b)`, `dim3 g = {a}`, `g = dim3(a, b)`, and
    `dim3 g;` (CUDA's default (1, 1, 1) until a field is set)."""
    found = [(m.start(), m.group(1), _split_args(m.group(2))) for m in _DIM3_SET.finditer(part)]
    for m in _DIM3_DECL.finditer(part):
        for d in _split_args(m.group(1)):
            dm = _DIM3_DECLARATOR.fullmatch(d)
            if dm:
                inner = dm.group(2) if dm.group(2) is not None else dm.group(3)
                found.append((m.start(), dm.group(1), _split_args(inner) if inner and inner.strip() else []))
    for _, name, dims in sorted(found, key=lambda f: f[0]):
        for axis, d in zip("xyz", dims + ["1"] * (3 - len(dims))):
            env[f"{name}.{axis}"] = d
        env[name] = f"{name}.x"


def function_env(text: str, body: int, at: int, env: dict[str, str]) -> None:
    """Assignments and dim3 declarations of the launching function before the launch (the last one wins)."""
    part = text[body:at]
    _assignments(part, env)
    _pitches(part, env)
    dim3_env(part, env)
    for m in _FIELD.finditer(part):
        key = f"{m.group(1)}.{m.group(2)}"
        if key not in env or not _RUNTIME_VALUE.search(m.group(3)):
            env[key] = m.group(3)


# ---- the spec --------------------------------------------------------------------------------------------------
def spec_from_host(text: str, filename: str, kernel: str, flags: CompileFlags | None = None,
                   host_texts: dict[str, str] | None = None, overrides: dict[str, int] | None = None) -> HostSpec:
    """A launch spec for `kernel` from the first launch site whose configuration evaluates (see the module doc)."""
    sliced = slice_source(text, filename, [kernel], flags=flags)
    qual = sliced.kernels[0]
    params = sliced.params[qual]
    short = qual.rsplit("::", 1)[-1]
    texts = {filename: text, **(host_texts or {})}
    sites = launch_sites(texts, short)
    if not sites:
        raise HostSpecError(f"no launch of {short} in the host code read")
    tparams = _template_params(text, short)
    active = active_macros(text, filename, flags)
    # the file's constants the device code reads itself (its own locals and parameters are free to change)
    file_consts = set(active) | set(file_env(strip_comments(text)))
    device_names = set(re.findall(r"\b[A-Za-z_]\w*\b", strip_comments(sliced.text))) & file_consts
    errors = []
    for site in sorted(sites, key=lambda st: not _block_matches_template(st, texts, overrides or {})):
        try:
            return _spec_at(site, texts, qual, params, tparams, dict(overrides or {}), device_names, active,
                            strip_comments(sliced.text))
        except HostSpecError as e:
            errors.append(str(e))
    raise HostSpecError(errors[0])


def active_macros(text: str, filename: str, flags: CompileFlags | None) -> dict[str, str]:
    """Object-like macros as the preprocessor defines them for this file (the active #if branch: PolyBench's
    `#ifdef STANDARD_DATASET #define M 2048`), from clang's record of the file and its local headers."""
    import clang.cindex as ci
    from converter.parse import parse_cuda
    out: dict[str, str] = {}
    try:
        tu = parse_cuda(text, filename, flags=flags).tu
    except Exception:  # noqa: BLE001 - the text-level #defines are used instead
        return out
    for c in tu.cursor.get_children():
        if c.kind != ci.CursorKind.MACRO_DEFINITION or c.location.file is None \
                or c.location.is_in_system_header or ci.conf.lib.clang_Cursor_isMacroFunctionLike(c):
            continue
        toks = [t.spelling for t in c.get_tokens()][1:]
        if toks and re.fullmatch(r"[\w\s\.\+\-\*/%\(\)<>]+", " ".join(toks)):
            out[c.spelling] = " ".join(toks)
    return out


def _block_matches_template(site: Site, texts: dict[str, str], overrides: dict[str, int]) -> bool:
    """Whether each integer template argument of the launch is one of its block's sizes (`K<16><<<g, dim3(16, 16)>>>`
    under `if (block_size == 16)`: the branch the program's own block size takes)."""
    ints = [int(a) for a in site.targs if a.strip().isdigit()]
    if not ints:
        return True
    env = _site_env(site, texts, dict(overrides))
    block = _dims(site.block, env) or []
    return all(i in block or i == math.prod(block) for i in ints)


def _template_params(text: str, name: str) -> list[str]:
    m = re.search(rf"template\s*<([^;{{}}]*?)>[^;{{}}<>]*?\b__global__\b[^;{{}}]*?\b{re.escape(name)}\s*\(", text)
    return [p.strip() for p in _split_args(m.group(1))] if m else []


def _site_env(site: Site, texts: dict[str, str], overrides: dict[str, int]) -> Env:
    """The names visible at a launch: file constants of every text, the function's own, its callers' arguments."""
    exprs: dict[str, str] = {}
    macros: dict[str, tuple[list[str], str]] = {}
    for t in [*texts.values(), *_local_headers(texts)]:
        clean = strip_comments(t)
        for k, v in file_env(clean).items():
            exprs.setdefault(k, v)
        globals_: dict[str, str] = {}
        dim3_env(_file_scope(clean), globals_)  # `dim3 block(512);` beside the functions
        for k, v in globals_.items():
            exprs.setdefault(k, v)
        for m in _MACRO.finditer(clean):
            macros.setdefault(m.group(1), ([p.strip() for p in m.group(2).split(",")], m.group(3).strip()))
    helpers = alloc_helpers(list(texts.values()))
    fn = _enclosing_function(site.text, site.at)
    if fn is not None:
        name, pnames, body, _ = fn
        caller = _caller_bindings(texts, name, pnames, site.file)
        exprs.update(caller)
        bound_types: dict[str, str] = {}
        for k, v in _template_bindings(texts, site.text, body, name).items():
            if k.startswith("type "):  # a launcher's `class T` bound to `float`: an alias, never a value
                bound_types[k[5:]] = v
            else:
                exprs.setdefault(k, v)
        function_locals: dict[str, str] = {}
        function_env(site.text, body, site.at, function_locals)
        exprs.update(function_locals)
        for name, size in allocations(site.text[body:site.at], helpers):
            exprs[f"__bytes_{name}"] = size
    own = set(pnames) | set(function_locals) if fn is not None else set()
    for t in texts.values():  # allocations elsewhere (a setup function, globals): the first of each name
        clean = strip_comments(t)
        for at, name, size in allocation_sites(clean, helpers):
            where = _enclosing_function(clean, at)
            if where is not None and fn is not None and where[0] != fn[0]:
                scope: dict[str, str] = {}
                function_env(clean, where[2], at, scope)
                # the names the caller bindings found shadowed in that function (`bufsize` -> bufsize__in_main)
                clash = {n for n in own if n in scope and f"{n}__in_{where[0]}" in exprs}
                size, extra = _scoped(size, scope, clash, where[0])
                for k, v in extra.items():
                    exprs.setdefault(k, v)
            exprs.setdefault(f"__bytes_{name}", size)
    types: dict[str, str] = dict(bound_types) if fn is not None else {}
    for t in [*texts.values(), *_local_headers(texts)]:
        for m in _TYPEDEF.finditer(strip_comments(t)):
            alias, target = (m.group(2), m.group(1)) if m.group(2) else (m.group(3), m.group(4))
            types.setdefault(alias, " ".join(target.split()))
    return Env(exprs, overrides, macros, types)


def _local_headers(texts: dict[str, str], depth: int = 2) -> list[str]:
    """Texts of the local headers the files include (`#include "x.h"` beside them), a few levels deep: their
    constants and macros (`CEIL_DIV`) are visible at the launch."""
    seen: set[str] = set(texts)
    out: list[str] = []
    todo = list(texts.items())
    for _ in range(depth):
        nxt = []
        for path, text in todo:
            for m in re.finditer(r'^[ \t]*#[ \t]*include[ \t]*"([^"]+)"', text, re.M):
                h = os.path.normpath(os.path.join(os.path.dirname(path), m.group(1)))
                if h in seen or not os.path.isfile(h):
                    continue
                seen.add(h)
                try:
                    t = open(h, encoding="utf-8", errors="replace").read()
                except OSError:
                    continue
                out.append(t)
                nxt.append((h, t))
        todo = nxt
    return out


# a parameter declaration (`const int size`, `float *h_c`, `int n = 4`): a type and a name, no operator
_DECLARATOR = re.compile(r"(?:[A-Za-z_][\w:<>]*\s*[\s*&]\s*)+[A-Za-z_]\w*\s*(?:\[[^\]]*\]\s*)?(?:=.*)?", re.S)


def _caller_bindings(texts: dict[str, str], fname: str, pnames: list[str], own: str,
                     depth: int = 3) -> dict[str, str]:
    """A launcher's parameters bound to the arguments of its first call (with that caller's names inlined once);
    when that caller is itself a function with parameters (llm.c's dev/cuda: main -> gelu_forward(kernel_num, ...,
    B, T, C) -> gelu_forward2(..., B * T * C) -> the launch), its parameters bound from its own first call in turn,
    `depth` levels up (the names closer to the launch win)."""
    if fname == "main" or not pnames:
        return {}
    # a plain call first; then a member call (`ops[i].run(...)`: the launcher is a class's method)
    calls = [(file, strip_comments(raw), m) for prefix in (r"(?<![\w.>:])", r"(?:\.|->)\s*")
             for file, raw in texts.items()
             for m in re.finditer(rf"{prefix}\b{re.escape(fname)}\s*(?:<[^<>;]*>)?\s*\(", strip_comments(raw))]
    for file, text, m in calls:
        if True:
            close = closing_bracket(text, m.end() - 1)
            if close < 0 or text[close:close + 20].lstrip().startswith("{"):
                continue  # the definition itself
            args = _split_args(text[m.end():close - 1])
            if args and all(_DECLARATOR.fullmatch(a.strip()) for a in args) and any(
                    re.search(r"[A-Za-z_]\w*\s+[A-Za-z_]", a) for a in args):  # `a * b` alone may be a product
                continue  # a declaration (`void run(float *x, const int n);` in a class): no call
            out: dict[str, str] = {}
            fn = _enclosing_function(text, m.start())
            if fn is not None:
                function_env(text, fn[2], m.start(), out)
            bound = {p: a for p, a in zip(pnames, args) if p}
            # `run(size / k, bufsize / k)` from a main with its own size and bufsize (`run(rows, cols)` passes the
            # caller's own: no clash)
            clash = {p for p in set(out) & set(pnames) if bound.get(p, "").strip() != p}
            if fn is not None and clash:
                extra: dict[str, str] = {}

                def scoped(e: str, scope: dict[str, str] = out, caller: str = fn[0]) -> str:
                    r, x = _scoped(e, scope, clash, caller)
                    extra.update(x)
                    return r
                renamed = {k: scoped(v) for k, v in out.items() if k not in clash}
                bound = {p: scoped(a) for p, a in bound.items()}
                out = renamed | extra
            # a renamed caller name (`k__in_main`) stays a name: one value for the argument and main's allocations
            plain = {k: v for k, v in out.items() if "__in_" not in k}
            out.update({p: _inline(a, plain) for p, a in bound.items()})
            if fn is not None and depth > 1 and fn[0] != fname:
                # values of the callers' that are sizes (`B * T * C`, `d_out`), not run-time reads (`block_sizes[j]`)
                # or addresses (`&model`, whose `model->seq_len` stays a name the spec defaults)
                deeper = {k: v for k, v in _caller_bindings(texts, fn[0], fn[1], own, depth - 1).items()
                          if re.fullmatch(r"[\w\s+\-*/%()]+", v) and not _RUN_TIME_CALL.search(v.strip("() "))}
                out = {k: re.sub(r"\b[A-Za-z_]\w*\b(?!\s*(?:->|\.|\())",
                                 lambda m: f"({deeper[m.group(0)]})" if m.group(0) in deeper
                                 and deeper[m.group(0)].strip() != m.group(0) else m.group(0), v)
                       for k, v in out.items()}  # `out` passed on as `out`: the caller's
                for k, v in deeper.items():
                    out.setdefault(k, v)
            return out
    return {}


def _scoped(expr: str, scope: dict[str, str], shadowed: set[str], fname: str) -> tuple[str, dict[str, str]]:
    """expr of function `fname`'s scope (its locals `scope`), evaluated where the launcher's names `shadowed` mean
    something else (its parameters `size`, `bufsize` bound from main's own `size`, `bufsize`): each local of fname
    that the launcher shadows renamed `name__in_fname`, with its definitions (renamed in turn) to add."""
    extra: dict[str, str] = {}
    todo = [expr]
    out = None
    while todo:
        e = todo.pop()

        def rename(m: re.Match) -> str:
            n = m.group(0)
            if n in shadowed and n in scope:
                key = f"{n}__in_{fname}"
                if key not in extra:
                    extra[key] = ""
                    todo.append(n)
                return key
            return n
        renamed = re.sub(r"(?<![.>])\b[A-Za-z_]\w*\b", rename, scope[e] if out is not None else e)
        if out is None:
            out = renamed
        else:
            extra[f"{e}__in_{fname}"] = renamed
    return out or expr, extra


def _template_bindings(texts: dict[str, str], text: str, body: int, fname: str) -> dict[str, str]:
    """A launcher template's own parameters bound to the explicit arguments of its first call (LeetCUDA's
    `template <int kHeadDim, int kStage> void launch_...(...)` called as `launch_...<64, 2>(Q, K, V, O)` in a
    switch over the head size): the kernel's template arguments and launch sizes computed from them evaluate. A
    type parameter comes back as "type T" (an alias for the caller's type)."""
    head = re.search(rf"template\s*<([^{{}};]*)>\s*[^;{{}}]*?\b{re.escape(fname)}\s*\([^{{}};]*\)\s*(?:const\s*)?$",
                     strip_comments(text[:body]))
    if head is None:
        return {}
    params = _split_args(head.group(1))
    names = [("type " if re.match(r"\s*(?:typename|class)\b", p) else "") + _param_name(p) for p in params]
    for raw in texts.values():
        for m in re.finditer(rf"(?<![\w.>:])\b{re.escape(fname)}\s*<([^<>;]*)>\s*\(", strip_comments(raw)):
            args = [a.strip() for a in _split_args(m.group(1))]
            if len(args) == len(names) and all(re.fullmatch(r"[\w\s+\-*/()]+", a) for a in args):
                return {n: a for n, a in zip(names, args) if n.removeprefix("type ")}
    return {}


def _inline(expr: str, env: dict[str, str]) -> str:
    """expr with the caller's local names replaced by their expressions (one level), so the launcher's env can
    hold it without the caller's scope."""
    return re.sub(r"\b[A-Za-z_]\w*\b", lambda m: f"({env[m.group(0)]})" if m.group(0) in env
                  and env[m.group(0)].strip() != m.group(0) else m.group(0), expr)


def _clip_grid(grid: list[int], block_threads: int, expr: str, notes: list[str]) -> list[int]:
    """Fewer blocks when the sizes left are the device code's own (`#define N 500000` read by the kernel) and
    cannot be scaled: the first blocks of the launch run, the rest of the grid does not (said in a note)."""
    clipped = list(grid)
    while math.prod(clipped) * block_threads > MAX_THREADS and max(clipped) > 1:
        k = clipped.index(max(clipped))
        clipped[k] = max(1, clipped[k] // 4)
    notes.append(f"grid '{expr}' = {grid} in the source; {clipped} here so that the CPU emulator runs it: the sizes "
                 f"are the device code's own, only the first blocks run (--set a size to change it)")
    return clipped


def _grid_at_least_one(expr: str, env: Env, notes: list[str]) -> list[int] | None:
    """A grid whose sides come out 0 or less only because a size was defaulted or scaled down (1024 / (128 * 1024)
    blocks): 1 block on those sides, said in a note."""
    sides = _dims(expr, env, floor=0)
    if sides is None:
        return None
    if any(v < 1 for v in sides):
        notes.append(f"grid '{expr}' has a side below 1 with the sizes chosen here; 1 there")
    return [max(1, v) for v in sides]


def _dims(expr: str, env: Env, floor: int = 1) -> list[int] | None:
    """The (x, y, z) of a launch operand (`dim3(a, b)`, a dim3 variable, an integer); None unless every side
    evaluates to at least `floor`."""
    e = expr.strip()
    m = re.fullmatch(r"dim3\s*[\({](.*)[\)}]", e, re.S)
    if m:
        parts = _split_args(m.group(1))
    elif re.fullmatch(r"\w+", e) and f"{e}.x" in env.exprs:
        parts = [f"{e}.x", f"{e}.y", f"{e}.z"]
    else:
        parts = [e]
    vals = []
    for p in parts:
        p = p.strip()
        v = env.value(p) if re.fullmatch(r"\w+\.[xyz]", p) else evaluate(p, env)
        if v is None or v <= floor - 1:
            return None
        vals.append(int(math.ceil(v)))
    return (vals + [1, 1, 1])[:3] if len(vals) <= 3 else None


_FROZEN_DEFAULT = ("; the kernel reads this name itself and keeps its own value, so check the sizes that use "
                   "it (or pass -D)")


def _spec_at(site: Site, texts: dict[str, str], qual: str, params: list[KernelParam], tparams: list[str],
             overrides: dict[str, int], device_names: set[str] = frozenset(),  # type: ignore[assignment]
             active: dict[str, str] | None = None, kernel_text: str = "") -> HostSpec:
    env = _site_env(site, texts, overrides)
    env.exprs.update(active or {})  # the #defines the preprocessor keeps win over those of other #if branches
    env.frozen = set(device_names)  # a size the kernel reads itself (`#define N 4096` in its indexing) stays
    env.records = {p.record.name: p.record.size for p in params if p.record is not None}
    notes: list[str] = []
    line = site.text.count("\n", 0, site.at) + 1
    where = f"{site.file}:{line}"
    if len(site.args) != len(params):
        raise HostSpecError(f"{where}: the launch passes {len(site.args)} arguments, the kernel takes {len(params)}")
    for _ in range(64):  # unknown size names get a default, too-large sizes are scaled down, until it fits
        env.unknown.clear()
        env.used.clear()
        block = _dims(site.block, env)
        env.block_names = set(env.used)
        grid = _dims(site.grid, env)
        env.grid_names = set(env.used) - env.block_names
        sizes = [_buffer_bytes(a, env) if p.pointer else None for a, p in zip(site.args, params)]
        missing = sorted(n for n in env.unknown if n not in env.scaled)
        if missing:
            for n in missing:
                env.scaled[n] = DEFAULT_SIZE
                notes.append(f"{n}: not derived from the host code (read at run time?); {DEFAULT_SIZE} here "
                             f"(--set {n}=VALUE)" + (_FROZEN_DEFAULT if n in env.frozen else ""))
            continue
        if block is not None and math.prod(block) > 1024 and _halve_block_defaults(env, notes, overrides):
            continue
        if grid is None and block is not None and env.scaled:
            grid = _grid_at_least_one(site.grid, env, notes)
        if grid is None or block is None:
            raise HostSpecError(f"{where}: cannot evaluate the launch configuration <<<{site.grid}, {site.block}>>>")
        threads = math.prod(grid) * math.prod(block)
        elems = max([s or 0 for s in sizes] + [0])
        if (threads > MAX_THREADS or elems > MAX_ELEMENTS * 8) and _scale_down(
                env, notes, overrides, max(block), grid_only=elems <= MAX_ELEMENTS * 8):
            continue
        if threads > MAX_THREADS and not any(n in overrides for n in env.used):
            grid = _clip_grid(grid, math.prod(block), site.grid, notes)
        break
    else:
        raise HostSpecError(f"{where}: the sizes do not settle")
    scalars = []
    # with no allocation read (a PyTorch binding's `a.data_ptr()`), a size-named argument is a size of the buffers
    # sized from the launch; where allocations were read, a name in none of them stays 1 (it sizes none of them)
    no_allocs = not any(s is not None for s in sizes)
    for a, p in zip(site.args, params):  # a name only a scalar uses (alpha, a flag): 1
        env.unknown.clear()
        v = None if p.pointer else evaluate(a, env)
        if v is None and env.unknown and _SIZE_PARAM.fullmatch(p.name or "") and _is_integer(p) and no_allocs:
            for n in sorted(env.unknown - set(env.scaled)):  # a GEMM's K from `a.size(1)`: a small size, not 1
                env.scaled[n] = SCALAR_SIZE_DEFAULT
                notes.append(f"{n}: not derived from the host code (read at run time?); {SCALAR_SIZE_DEFAULT} here "
                             f"(--set {n}=VALUE)")
            env.unknown.clear()
            v = evaluate(a, env)
        scalars.append(v)
    if math.prod(block) > 1024:
        raise HostSpecError(f"{where}: block of {math.prod(block)} threads")
    smem = _largest_smem(site, env) if site.smem.strip() not in ("", "0") else 0
    if smem is None:
        smem = SMEM_UNDERIVED
        notes.append(f"dynamic shared memory '{site.smem}' not derived; {smem} here (48 KiB: the most a launch "
                     f"gets without opting in to more)")
    spec: dict = {"kernel": qual}
    targs = _template_args(site.targs, tparams, env, notes, math.prod(block))
    if targs:
        spec["template_args"] = targs
    spec.update({"grid": grid, "block": block})
    if smem:
        spec["dynamic_smem"] = int(smem)
    args, outputs = [], []
    threads = math.prod(grid) * math.prod(block)
    for n, (a, p, size, val) in enumerate(zip(site.args, params, sizes, scalars)):
        name = p.name or f"arg{n}"
        if p.pointer:
            arg, out = _buffer(name, a, _typed(p, tparams, targs or []), size, threads, site, notes)
            args.append(arg)
            if out:
                outputs.append(name)
        else:
            args.append(_scalar(name, a, p, val, notes))
    _size_unknown_buffers(args, params, [t for t in targs or [] if isinstance(t, int) and not isinstance(t, bool)])
    _index_inputs_in_range(args, params, env, kernel_text, qual, grid, block, notes)
    spec["args"] = args
    spec["outputs"] = outputs or [a["name"] for a in args if a["kind"] == "buffer"][:1]
    spec["tolerance"] = 1.0e-5
    head = [f"# launch spec for {qual} from the launch at {where} (rtransform spec --from-host)"]
    head += [f"# {' '.join(n.split())}" for n in dict.fromkeys(notes)]  # one comment line each, whatever it quotes
    return HostSpec("\n".join(head) + "\n" + yaml.safe_dump(spec, sort_keys=False, default_flow_style=None,
                                                               width=120), list(dict.fromkeys(notes)), where)


def _index_inputs_in_range(args: list[dict], params: list[KernelParam], env: Env, kernel_text: str, qual: str,
                           grid: list[int], block: list[int], notes: list[str]) -> None:
    """An integer input whose values the kernel uses as indices (a histogram's bins) gets random values inside the
    array they index (rtransform/index_ranges.py), not the -1000..1000 memcheck stops at: the program fills it with
    values in range."""
    scalars = {a["name"]: a["value"] for a in args if a["kind"] == "scalar"}
    sizes = {a["name"]: a["size"] for a in args if a["kind"] == "buffer"}

    def value(name: str) -> float | None:
        if name in scalars:
            return float(scalars[name])
        return evaluate(name, env) if name in env.frozen else None
    ranges = index_ranges(kernel_text, qual.rsplit("::", 1)[-1], params, sizes, value, grid, block)
    for a in args:
        if a["name"] in ranges and a["kind"] == "buffer" and a["init"] == "random":
            a["low"], a["high"] = ranges[a["name"]]
            notes.append(f"{a['name']}: its values index an array in the kernel; random in [{a['low']}, "
                         f"{a['high']}) here")


def _scale_down(env: Env, notes: list[str], overrides: dict[str, int], unit: int = 1, grid_only: bool = False) -> bool:
    """Quarter the largest size-like name the spec depends on (not one the user set); False when none is left.
    grid_only (too many threads, buffers small enough): only the names the grid is computed from, so that a
    buffer the threads index does not shrink below the launch (the grid is clipped when they are at their floor)."""
    base, near = [], []  # literals first; then names computed from the block's sizes only (5 * 2 * block_size)
    for n, e in env.exprs.items():
        if n in overrides or n.startswith("__") or n not in env.used or n in env.block_names or n in env.scaled \
                or _depends_on(env, n, env.frozen):
            continue
        v = env.value(n)
        if v is None or not float(v).is_integer() or v <= 64:
            continue
        names = set(re.findall(r"\b[A-Za-z_]\w*(?:\.[xyz])?", _c_to_python(e).replace("__sizeof_", "")))
        small = {m for m in names if m not in env.block_names and (env.value(m) or 0) <= 64}
        if not names:
            base.append((v, n))
        elif names <= env.block_names | small:  # made of small constants (1024 * 1024 * chunks) or the block
            near.append((v, n))
    base += [(v, n) for n, v in env.scaled.items() if v > 64 and n not in overrides and n in env.used
             and n not in env.block_names]
    cands = base or near
    if grid_only:
        cands = [(v, n) for v, n in base + near if n in env.grid_names]
        base = [c for c in base if c in cands]
        near = [c for c in near if c in cands]
    if not cands:
        return False
    # sizes read at run time share one default and shrink together: a program that reads m, n and k is run square
    # (matrix-cuda's `if (m == n && n == k)` square kernel, a tutorial's M = N = K)
    defaulted = {x.split(": not derived")[0] for x in notes if ": not derived from the host code" in x}
    for v, n in sorted(cands, reverse=True):  # the largest that still shrinks (64 and a whole tile are floors)
        same = [m for _, m in near if " ".join(env.exprs[m].split()) == " ".join(env.exprs.get(n, "").split())]
        group = [m for m, w in env.scaled.items() if w == v and m in defaulted and m in env.used and m not in overrides
                 and m not in env.block_names] if n in defaulted else [n] if base else same
        if any([_scale_one(env, notes, m, v, unit) for m in group]):
            return True  # equal expressions stay equal (a matrix product's inner sizes)
    # every size is at its floor: a block count (a grid's own name, one tile of blocks) may go below one tile
    return any(_scale_one(env, notes, n, v, 1) for v, n in sorted(cands, reverse=True) if n in env.grid_names)


def _halve_block_defaults(env: Env, notes: list[str], overrides: dict[str, int]) -> bool:
    """A block of more than 1024 threads computed from names given the default (a tile edge from the device's
    properties, `dim3 block(tile, tile)`): those names halve together (their notes say the new value); False when
    none is left to halve."""
    names = [n for n in sorted(env.block_names) if n in env.scaled and n not in overrides and env.scaled[n] > 1
             and any(x.startswith(f"{n}: not derived from the host code") for x in notes)]
    for n in names:
        env.scaled[n] //= 2
        k = next(i for i, x in enumerate(notes) if x.startswith(f"{n}: not derived from the host code"))
        notes[k] = re.sub(r"; \d+ here( \(a block of at most 1024 threads\))?",
                          f"; {env.scaled[n]} here (a block of at most 1024 threads)", notes[k], count=1)
    return bool(names)


def _depends_on(env: Env, name: str, frozen: set[str], depth: int = 0) -> bool:
    """Whether a name is, or is computed from, one the device code uses (scaling it would break the kernel)."""
    if name.split(".")[0] in frozen:
        return True
    e = env.exprs.get(name)
    if e is None or depth > 8:
        return False
    return any(_depends_on(env, n, frozen, depth + 1) for n in re.findall(r"\b[A-Za-z_]\w*(?:\.[xyz])?", e)
               if n != name)


def _scale_one(env: Env, notes: list[str], n: str, v: float, unit: int) -> bool:
    """A quarter of the value, kept a multiple of the block's largest side (sizes made of whole tiles stay so);
    False when that does not shrink it (it is at the floor already)."""
    step = unit if unit > 1 and int(v) % unit == 0 else 1
    new = max(64 if step == 1 else step, int(v) // 4 // step * step)
    if new >= v:
        return False
    source = env.original.setdefault(n, int(v))
    env.scaled[n] = new
    defaulted = any(x.startswith(f"{n}: not derived") for x in notes)
    notes[:] = [x for x in notes if not x.startswith((f"{n} = ", f"{n}: not derived"))]
    notes.append(f"{n}: not derived from the host code (read at run time?); {env.scaled[n]} here (--set {n}=VALUE)"
                 if defaulted else f"{n} = {source} in the source; {env.scaled[n]} here so that the CPU emulator "
                 f"runs it (--set {n}=VALUE)")
    return True


def _template_args(targs: list[str], tparams: list[str], env: Env, notes: list[str], threads: int) -> list:
    out: list = []
    for k, a in enumerate(targs):
        a = a.strip()
        alias = _type_alias(a, env) if re.fullmatch(r"\w+", a) else a  # a launcher's `T`, bound to `float`
        if alias in C_TYPE_DTYPES or alias in SIZEOF:
            a = alias
        if a in ("true", "false"):
            out.append(a == "true")
        elif a in C_TYPE_DTYPES or a in SIZEOF:
            out.append(a)
        else:
            v = evaluate(a, env)
            if v is not None:
                out.append(int(v))
            else:
                kind = tparams[k].split()[0] if k < len(tparams) else ""
                guess: object = "float" if kind in ("typename", "class") else threads
                notes.append(f"template argument '{a}' not derived; {guess} here")
                out.append(guess)
    if not targs and tparams:
        raise HostSpecError("template arguments deduced from the call: not read")
    # parameters the launch leaves to their defaults (`template <..., const int OFFSET = 0>` launched as
    # `k<BM, BN, BK, TM, TN>`): spelled out, since the converted kernel's executor takes every argument
    named = {_param_name(p): arg for p, arg in zip(tparams, out) if isinstance(arg, (bool, int))}  # values, not types
    for p in tparams[len(out):]:
        if "=" not in p:
            break
        d = re.sub(r"\b\w+\b", lambda m: str(int(named[m.group(0)])) if m.group(0) in named else m.group(0),
                   p.split("=", 1)[1].strip())
        if d in ("true", "false"):
            out.append(d == "true")
        elif d in C_TYPE_DTYPES or d in SIZEOF:
            out.append(d)  # a type argument: its C spelling
        elif (number := evaluate(d, env)) is not None:
            out.append(int(number))
        else:
            break
        if not isinstance(out[-1], str):
            named[_param_name(p)] = out[-1]
    return out


def _elem(p: KernelParam) -> tuple[str, int]:
    layout = record_layout(p)
    if layout is not None:  # `struct S* p`: S's scalar type, sizeof(S) / its size per struct; bytes if mixed
        return layout[0], layout[1]
    base = " ".join(re.sub(r"\b(const|volatile|__restrict__|__restrict)\b", " ", p.elem or "").split())
    lanes = _LANES.get(base[-1:], 1) if base[:-1] in ("float", "int", "uint", "double", "char", "uchar") else 1
    dtype = C_TYPE_DTYPES.get(base, "float32")
    return dtype, lanes


def _buffer_bytes(expr: str, env: Env) -> int | None:
    base = _base_pointer(expr)
    for _ in range(4):  # a launcher's pointer parameter bound to its caller's (`out` <- `d_out`, cudaMalloc'd)
        if base is None or f"__bytes_{base}" in env.exprs or base not in env.exprs:
            break
        base = _base_pointer(env.exprs[base]) if re.fullmatch(r"\W*\w+\W*", env.exprs[base]) else None
    if base is None or f"__bytes_{base}" not in env.exprs:
        return None
    v = env.value(f"__bytes_{base}")
    return int(v) if v is not None else None


def _base_pointer(expr: str) -> str | None:
    e = re.sub(r"\(\s*[\w\s:<>]+\*\s*\)", "", expr).strip()
    e = re.sub(r"^thrust::raw_pointer_cast\s*\(\s*&?\s*(\w+).*$", r"\1", e)
    m = re.match(r"&?\s*\(?\s*(\w+)", e)
    return m.group(1) if m else None


def _size_unknown_buffers(args: list[dict], params: list[KernelParam], template_ints: list[int] | None = None) -> None:
    """A buffer whose allocation was not read (sized one per thread) also covers the product of the three largest
    integer scalars and integer template arguments (an M x K matrix indexed by a row and a column; llm.c's B x T x
    C activations; LeetCUDA's attention over seqlen x head x a head dimension given as a template argument), up to
    MAX_ELEMENTS."""
    ints = sorted([int(a["value"]) for a in args if a["kind"] == "scalar" and isinstance(a["value"], int)
                   and not isinstance(a["value"], bool) and a["value"] > 1] + [t for t in template_ints or [] if t > 1])
    pair = math.prod(ints[-3:]) if ints else 0
    for a in args:
        if a.pop("_unknown_size", False):
            a["size"] = int(max(a["size"], min(pair, MAX_ELEMENTS)))


def _typed(p: KernelParam, tparams: list[str], targs: list) -> KernelParam:
    """A pointer parameter whose element is a template type parameter (`T *x` of `template <class T>`) with the
    type the launch's template argument names (else the buffer would be float32 whatever T is)."""
    types = {_param_name(tp): a for tp, a in zip(tparams, targs)
             if re.match(r"\s*(?:typename|class)\b", tp) and isinstance(a, str)}
    base = re.sub(r"\b(const|volatile|__restrict__|__restrict)\b|\*", " ", p.elem or p.type).strip()
    return dataclasses.replace(p, elem=types[base]) if p.pointer and base in types else p


def _buffer(name: str, expr: str, p: KernelParam, size: int | None, threads: int, site: Site,
            notes: list[str]) -> tuple[dict, bool]:
    dtype, lanes = _elem(p)
    item = {"float16": 2, "float64": 8, "int8": 1, "uint8": 1, "int16": 2, "uint16": 2, "int64": 8,
            "uint64": 8, "bool": 1}.get(dtype, 4)
    if size is None:
        count = threads * lanes
        notes.append(f"{name}: no cudaMalloc of '{expr}' read; sized from the launch and the integer arguments")
    else:
        count = max(1, size // item)
    base = _base_pointer(expr) or ""
    const = bool(re.search(r"\bconst\b", p.type.split("*")[0]))
    zeroed = any(m.group(1) == base for m in _MEMSET0.finditer(site.text)) or (record_layout(p) or ("", 0, False))[2]
    arg = {"name": name, "kind": "buffer", "dtype": dtype, "size": int(count), "init": "zeros" if zeroed else "random"}
    if size is None:
        arg["_unknown_size"] = True
    return arg, not const


# an integer parameter named like a size (M, N, K, n, len, num_rows, dim, stride...): a name only it uses is a size
_SIZE_PARAM = re.compile(r"[A-Z]|n[A-Z_]\w*|(?i:n|len\w*|\w*len|length|size|count|total\w*|num\w*|\w*_size|\w*_count|"
                         r"\w*dim\w*|rows?|cols?|\w*width|\w*height|depth|ld[abc]?|stride\w*)")


def _is_integer(p: KernelParam) -> bool:
    """An integer of 32 bits or more (a `char newVal` is no size)."""
    base = " ".join(re.sub(r"\b(const|volatile)\b", " ", p.elem or p.type).split())
    return C_TYPE_DTYPES.get(base, "") in ("int32", "uint32", "int64", "uint64")


def _scalar(name: str, expr: str, p: KernelParam, val: float | None, notes: list[str]) -> dict:
    dtype = C_TYPE_DTYPES.get(" ".join(re.sub(r"\b(const|volatile)\b", " ", p.elem or p.type).split()), "float32")
    if val is None:
        notes.append(f"{name}: '{expr}' not derived; 1 here")
        val = 1
    value: float | int = int(val) if dtype.startswith(("int", "uint")) else float(val)
    if dtype.startswith(("int", "uint")):  # the argument converted to the parameter's type, as C converts it:
        bits = 8 * np.dtype(dtype).itemsize  # `width * height` passed to a `char size` keeps its low 8 bits
        value = int(value) % (1 << bits)
        if dtype.startswith("int") and value >= 1 << (bits - 1):
            value -= 1 << bits
    if dtype == "bool":
        value = bool(val)
    return {"name": name, "kind": "scalar", "dtype": dtype, "value": value}
