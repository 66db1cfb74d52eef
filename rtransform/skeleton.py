"""`rtransform spec FILE --kernel K`: a launch-spec skeleton from the kernel's parameters, so that trying a new
kernel library takes one edit per kernel instead of a spec written from nothing.

Buffers get the dtype of their element type, inputs (`const T*`) and floating-point outputs random values (kernels
that take no `const` read their "outputs" too), other outputs zeros, and cover what every thread reaches with the
widest vector type the kernel names (`float4` through a cast: 16 bytes a thread); the grid and
block come from a launch of the kernel in the file's host code when one spells them with integer literals or
constants the file defines, inline (`dim3(16, 16)`) or through a `dim3 block(16, 16)` variable; sizes cover every
thread of that launch. Everything guessed is listed in the header comment, one `# guessed: ...` line each, which
rtransform.spec.guessed_values reads back so that a failed verify can say the spec, not the kernel, may be at fault.
"""
from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass, field

import numpy as np
import yaml

from converter.flags import CompileFlags
from converter.slice import KernelParam, slice_source
from rtransform.spec import C_TYPE_DTYPES, GUESS_MARK, LAUNCH_CLOSE, LAUNCH_OPEN, record_layout
from toolchain.cxx import TemplateArg, split_top_level

DEFAULT_GRID = [4, 1, 1]
DEFAULT_BLOCK = [128, 1, 1]
DYNAMIC_SMEM_GUESS = 16384  # bytes, for a kernel with `extern __shared__` (the launch's value is rarely a constant)
VECTOR_LANES = {"2": 2, "3": 3, "4": 4}
_CONST = re.compile(r"(?:#\s*define\s+(\w+)\s+\(?(\d+)[uUlL]*\)?\s*$|"
                    r"(?:constexpr|const)\s+(?:unsigned\s+)?(?:int|size_t|long|unsigned)\s+(\w+)\s*=\s*(\d+)[uUlL]*\s*;)",
                    re.M)
# `dim3 block(16, 16);`, `dim3 block{16, 16};`, `dim3 block = dim3(16, 16);`, `const dim3 grid(4);`
_DIM3_VAR = re.compile(r"\bdim3\s+(\w+)\s*(?:=\s*dim3\s*)?[({]([^;{}]*?)[)}]\s*;")


@dataclass
class Launch:
    """A launch configuration and whether it was read from the source or is the default; `guessed` names the
    parts that are defaults (grid, block)."""
    grid: list[int]
    block: list[int]
    found: bool
    guessed: list[str] = field(default_factory=list)


@dataclass
class Skeleton:
    """A launch spec skeleton: its YAML text and the values it had to guess (each a short phrase)."""
    text: str
    guesses: list[str]


def spec_skeleton(text: str, filename: str, kernel: str, flags: CompileFlags | None = None) -> str:
    """YAML text of a launch spec for `kernel` (raises SliceError for an unknown kernel)."""
    return build_skeleton(text, filename, kernel, flags).text


def build_skeleton(text: str, filename: str, kernel: str, flags: CompileFlags | None = None) -> Skeleton:
    """The skeleton of `kernel` with the list of what it guessed (raises SliceError for an unknown kernel)."""
    sliced = slice_source(text, filename, [kernel], flags=flags)
    qual = sliced.kernels[0]
    params = sliced.params[qual]
    launch = find_launch(text, qual.rsplit("::", 1)[-1], sliced.text)
    threads = _prod(launch.grid) * _prod(launch.block)
    wide = vector_bytes(text, qual.rsplit("::", 1)[-1])
    each = per_thread_multiple(text, qual.rsplit("::", 1)[-1])
    args, outputs = [], []
    for n, p in enumerate(params):
        if not p.name:  # an unnamed parameter (`int /*unused*/`): the spec still needs a name for it
            p = dataclasses.replace(p, name=f"arg{n}")
        arg, is_output = _arg(p, threads, wide, each)
        args.append(arg)
        if is_output:
            outputs.append(p.name)
    spec: dict = {"kernel": qual}
    name = qual.rsplit("::", 1)[-1]
    targs = _template_args(text, name, _prod(launch.block))
    guesses = list(launch.guessed)
    if targs:
        spec["template_args"] = targs
        if not re.search(rf"\b{re.escape(name)}\s*<[^<>;]*>\s*{LAUNCH_OPEN}", text):
            guesses.append(f"template_args {targs} (no launch spells them)")
    spec.update({"grid": launch.grid, "block": launch.block})
    if re.search(r"\bextern\s+__shared__\b", text):  # dynamic shared memory: a guess, like the sizes
        spec["dynamic_smem"] = DYNAMIC_SMEM_GUESS
        guesses.append(f"dynamic_smem {DYNAMIC_SMEM_GUESS}")
    spec.update({"args": args,
                 "outputs": outputs or [a["name"] for a in args if a["kind"] == "buffer"][:1],
                 "tolerance": 1.0e-5})
    if any(a["kind"] == "buffer" for a in args):
        guesses.append(f"buffer sizes ({threads} elements: one per thread of the launch)" if wide <= 4 and each == 1
                       else f"buffer sizes ({wide}-byte vectors, {each} elements per thread of the launch: what the "
                       "kernel's vector types and index multiple reach)")
    guesses += [f"scalar {a['name']} = {a['value']}" for a in args if a["kind"] == "scalar"]
    guesses += [_mixed_note(p) for p in params if p.pointer and (record_layout(p) or ("", 0, False))[2]]
    how = "from the launch in the host code" if launch.found else "a default: no launch with constant sizes found"
    head = (f"# launch spec skeleton for {qual} (rtransform spec): grid and block {how};\n"
            "# buffer sizes cover every thread of the launch; integers named like sizes (n, size, num_x) get\n"
            "# the thread count, other integers 1; template arguments not spelled by a launch: a type float, a\n"
            "# bool false, an integer the block's thread count:\n"
            "# check each guess against the kernel's indexing before trusting a verify (and delete its line).\n"
            + "".join(f"{GUESS_MARK}{g}\n" for g in guesses))
    return Skeleton(head + yaml.safe_dump(spec, sort_keys=False, default_flow_style=None, width=120), guesses)


def find_launch(text: str, name: str, kernel_text: str | None = None) -> Launch:
    """grid/block of the first `name<<<grid, block>>>` (or `name<T><<<...>>>`) whose sizes are constants; with no
    launch, a kernel (`kernel_text`: its slice) that indexes square `__shared__` tiles with threadIdx.y gets a
    block of one thread per tile element (PMPP's `float __shared__ A_tile[TILE][TILE]` with A_tile[threadIdx.y]
    [threadIdx.x]: a 128 x 1 block ran threadIdx.x past the tile)."""
    consts = {m.group(1) or m.group(3): int(m.group(2) or m.group(4)) for m in _CONST.finditer(text)}
    dim3s = {m.group(1): m.group(2) for m in _DIM3_VAR.finditer(text)}  # the first declaration of each name
    pat = re.compile(rf"\b{re.escape(name)}\s*(?:<[^<>;]*>)?\s*{LAUNCH_OPEN}\s*(.+?)\s*{LAUNCH_CLOSE}", re.S)
    block_only = None
    for m in pat.finditer(text):
        parts = split_top_level(m.group(1))
        if len(parts) < 2:
            continue
        grid, block = _dims(parts[0], consts, dim3s), _dims(parts[1], consts, dim3s)
        if grid and block:
            return Launch(grid, block, True)
        block_only = block_only or block
    if block_only:  # the grid depends on the problem size (ceil_div(N, 128)): keep the block, guess the grid
        return Launch(list(DEFAULT_GRID), block_only, True,
                      [f"grid {DEFAULT_GRID} (the launch's grid is not a constant)"])
    tile = _tile_edge(kernel_text, consts) if kernel_text else None
    if tile:
        return Launch(list(DEFAULT_GRID), [tile, tile, 1], False,
                      [f"grid {DEFAULT_GRID} (no launch with constant sizes)",
                       f"block {[tile, tile, 1]} (no launch with constant sizes: one thread per element of the "
                       f"kernel's {tile} x {tile} __shared__ tile, which threadIdx.y indexes)"])
    return Launch(list(DEFAULT_GRID), list(DEFAULT_BLOCK), False,
                  [f"grid {DEFAULT_GRID} (no launch with constant sizes)",
                   f"block {DEFAULT_BLOCK} (no launch with constant sizes)"])


_TILE_2D = re.compile(r"__shared__[^;{}()]*?\b\w+\s*\[\s*(\w+)\s*\]\s*\[\s*(\w+)(?:\s*\+\s*(\d+))?\s*\]")


def _tile_edge(kernel_text: str, consts: dict[str, int]) -> int | None:
    """The edge of the smallest square `__shared__ T t[E][E]` (or `[E][E + pad]`) of a kernel that reads
    threadIdx.y, when E x E threads fit a block."""
    if not re.search(r"\bthreadIdx\s*\.\s*y\b", kernel_text):
        return None
    edges = []
    for m in _TILE_2D.finditer(kernel_text):
        a, b = (int(x) if x.isdigit() else consts.get(x) for x in (m.group(1), m.group(2)))
        if a and a == b and a * a <= 1024:
            edges.append(a)
    return min(edges) if edges else None


def _dims(expr: str, consts: dict[str, int], dim3s: dict[str, str] | None = None) -> list[int] | None:
    """[x, y, z] of one launch size: an integer expression, `dim3(...)`, `dim3{...}` or a dim3 variable declared
    in the file (`dim3 block(16, 16)`), each dimension of constants only; None when any is not constant."""
    expr = expr.strip()
    if dim3s and expr in dim3s:
        expr = f"dim3({dim3s[expr]})"
    m = re.fullmatch(r"dim3\s*[({](.*)[)}]", expr, re.S)
    items = split_top_level(m.group(1)) if m else [expr]
    vals = [_value(i, consts) for i in items]
    if not vals or any(v is None or v <= 0 for v in vals) or len(vals) > 3:
        return None
    return [int(v) for v in vals] + [1] * (3 - len(vals))  # type: ignore[arg-type]


def _value(expr: str, consts: dict[str, int]) -> int | None:
    """An integer literal, a known constant, or a product/quotient/sum of those."""
    expr = expr.strip()
    if not re.fullmatch(r"[\w\s()*/+\-]+", expr):
        return None
    names = {n: str(consts[n]) for n in re.findall(r"[A-Za-z_]\w*", expr) if n in consts}
    if len(names) != len(set(re.findall(r"[A-Za-z_]\w*", expr))):
        return None
    code = re.sub(r"[A-Za-z_]\w*", lambda m: names[m.group(0)], expr)
    code = re.sub(r"(\d+)[uUlL]+", r"\1", code).replace("/", "//")
    try:
        v = eval(code, {"__builtins__": {}})  # noqa: S307 - digits and + - * // ( ) only (checked above)
    except Exception:  # noqa: BLE001 - not a constant expression after all
        return None
    return v if isinstance(v, int) else None


def _template_args(text: str, name: str, threads: int) -> list:
    """Template arguments of a template kernel: those a launch spells (`name<float, 64><<<...>>>`), literals kept;
    the rest guessed from the kernel's template parameters (a type: float; a bool: false; an integer: the block's
    thread count, the usual meaning of a `BlockSize`), as for deduced arguments (`norm_kernel<<<...>>>(out, x)`)."""
    params = _template_params(text, name)
    m = re.search(rf"\b{re.escape(name)}\s*<([^<>;]*)>\s*{LAUNCH_OPEN}", text)
    if not m:
        guesses = [_guess(p, threads) for p in params or []]
        return [] if any(g is None for g in guesses) else guesses
    out: list = []
    for k, a in enumerate(x.strip() for x in split_top_level(m.group(1))):
        if re.fullmatch(r"\d+[uUlL]*", a):  # `1U`, `64ul`: an integer literal with its suffix
            out.append(int(a.rstrip("uUlL")))
        elif a in ("true", "false"):
            out.append(a == "true")
        elif a in C_TYPE_DTYPES:
            out.append(a)
        else:  # a name of the launcher (its own template parameter, a constant): guessed from the kernel's side
            g = _guess(params[k], threads) if params and k < len(params) else None
            kind = params[k].split()[0] if params and k < len(params) and params[k].split() else "typename"
            out.append(g if g is not None else "float" if kind in ("typename", "class") else threads)
    return out


def _template_params(text: str, name: str) -> list[str] | None:
    """The template parameter declarations of __global__ `name` (`typename T`, `int BlockSize`), or None."""
    m = re.search(rf"template\s*<([^;{{}}]*?)>[^;{{}}<>]*?\b__global__\b[^;{{}}]*?\b{re.escape(name)}\s*\(", text)
    return [p.strip() for p in split_top_level(m.group(1))] if m else None


# an integer template parameter that is the kernel's thread count (LeetCUDA's NUM_THREADS, a BLOCK_SIZE)
_THREADS_PARAM = re.compile(r"(?i)n?(?:um_?)?threads(?:_per_block)?|block_?size|block_?dim|nt")


_INTEGER_WORDS = ("int", "unsigned", "signed", "long", "short", "char", "size_t", "uint", "uint32_t", "int32_t",
                  "uint64_t", "int64_t", "uint16_t", "int16_t", "uint8_t", "int8_t")


def _guess(decl: str, threads: int) -> TemplateArg | None:
    """One template argument for parameter `decl`: its default when a literal, else a guess by kind."""
    decl, _, default = decl.partition("=")
    default = default.strip()
    if _THREADS_PARAM.fullmatch(decl.split()[-1] if decl.split() else "") and default:
        default = ""  # `NUM_THREADS = 256` is the block's size: the launch guessed here is its block (one per thread)
    if default.isdigit():
        return int(default)
    if default in ("true", "false"):
        return default == "true"
    words = [w for w in decl.split() if w != "const"]  # `const int BLOCK_SIZE` is an int parameter
    if words and words[0] in ("typename", "class"):
        return default if default in C_TYPE_DTYPES else "float"
    if words and words[0] == "bool":
        return False
    if len(words) >= 2 and all(w in _INTEGER_WORDS for w in words[:-1]):
        return threads
    return None  # auto, pointers to functions, template templates: no guess


# vector types a kernel loads and stores through (`reinterpret_cast<float4 *>(&x[i])[0]`, llm.c's x128): bytes
VECTOR_BYTES = {"float2": 8, "int2": 8, "uint2": 8, "half2": 4, "__half2": 4, "__nv_bfloat162": 4,
                "nv_bfloat162": 4, "float4": 16, "int4": 16, "uint4": 16, "double2": 16, "longlong2": 16,
                "ulonglong2": 16, "double4": 32}
SCALAR_BYTES = {"double": 8, "long": 8, "size_t": 8, "int64_t": 8, "uint64_t": 8, "half": 2, "__half": 2,
                "__nv_bfloat16": 2, "nv_bfloat16": 2, "short": 2, "char": 1, "int8_t": 1, "uint8_t": 1, "bool": 1}
_FUNC_MACRO = re.compile(r"^[ \t]*#[ \t]*define[ \t]+(\w+)\(([^)]*)\)((?:[^\n]*\\\n)*[^\n]*)", re.M)


def _kernel_text(text: str, name: str) -> str:
    """The kernel's declaration and body (brace-matched), or ""."""
    m = re.search(rf"\b__global__\b[^;{{}}]*?\b{re.escape(name)}\s*\(", text)
    if not m:
        return ""
    open_ = text.find("{", m.end())
    depth, end = 0, open_
    for end in range(open_, len(text)):
        depth += {"{": 1, "}": -1}.get(text[end], 0)
        if depth == 0:
            break
    return text[m.start():end + 1]


_PER_THREAD = re.compile(r"=\s*(\d+)\s*\*\s*\(\s*(?:blockIdx|threadIdx)[^;]*;|"
                         r"=\s*\(\s*(?:blockIdx|threadIdx)[^;]*\)\s*\*\s*(\d+)\s*;")


def per_thread_multiple(text: str, name: str) -> int:
    """k of an index `idx = k * (blockIdx.x * blockDim.x + threadIdx.x)` (k elements a thread, read as four half2
    or one float4): the buffers need k elements per thread; 1 when there is none."""
    ks = [int(a or b) for a, b in _PER_THREAD.findall(_kernel_text(text, name))]
    return max([k for k in ks if k <= 64] + [1])


def vector_bytes(text: str, name: str) -> int:
    """The widest vector type (bytes) the kernel's body names, itself or through the function-like macros it uses
    (LeetCUDA's `FLOAT4(a[idx])`, `LDST128BITS(x)`): a thread that loads 16 bytes at `4 * tid` reads past a buffer
    of one element per thread. 4 when it names none."""
    body = _kernel_text(text, name)
    if not body:
        return 4
    macros = {mm.group(1): mm.group(3) for mm in _FUNC_MACRO.finditer(text)}
    body += " ".join(macros[w] for w in set(re.findall(r"\b\w+\b", body)) & set(macros))
    return max([VECTOR_BYTES[w] for w in re.findall(r"\b\w+\b", body) if w in VECTOR_BYTES] + [4])


def _arg(p: KernelParam, threads: int, wide: int = 4, each: int = 1) -> tuple[dict, bool]:
    base = re.sub(r"\b(const|volatile|__restrict__|__restrict)\b", " ", p.elem or "").split()
    elem = " ".join(base)
    lanes = VECTOR_LANES.get(elem[-1:], 1) if elem[:-1] in ("float", "int", "uint", "double", "char", "uchar") \
        else 1
    dtype = C_TYPE_DTYPES.get(elem, "float32")
    layout = record_layout(p) if p.pointer else None
    if layout is not None:  # `struct S* p`: sizeof(S) per thread, in S's own scalar type when it has one
        dtype, lanes, mixed = layout
    if p.pointer:
        is_output = not re.search(r"\bconst\b", p.type.split("*")[0])
        item = (VECTOR_BYTES.get(elem) or 4 * lanes) if lanes > 1 else SCALAR_BYTES.get(elem, 4)
        per_thread = max(lanes, lanes * wide // item, each) if layout is None else lanes
        arg = {"name": p.name, "kind": "buffer", "dtype": dtype, "size": threads * per_thread,
               "init": "random" if dtype.startswith("float") and (layout is None or not layout[2]) else
               "zeros" if is_output or layout is not None else "random"}  # float outputs random: an in-place
        # kernel (`a[i] += b[i]` on a non-const pointer) reads them, and both runs of a verify start the same
        return arg, is_output
    if dtype == "bool":  # a flag (apex's `bool rms_only`): false, the plain path
        return {"name": p.name, "kind": "scalar", "dtype": dtype, "value": False}, False
    if dtype.startswith(("int", "uint")):
        value: float | int = threads if _SIZE_NAME.fullmatch(p.name) else 1
        value = min(value, int(np.iinfo(np.dtype(dtype)).max))  # a `char n` holds at most 127
    else:
        value = 1.0
    return {"name": p.name, "kind": "scalar", "dtype": dtype, "value": value}, False


# integer parameters that bound the whole index space (`n`, `N`, `size`, `num_elements`...): the thread count;
# other integers (B, T, C, stride...) are 1, which keeps products of them inside the buffers
_SIZE_NAME = re.compile(r"(?i)n|len|length|size|count|total\w*|num\w*|n_?elem\w*|\w*_size|\w*_count")


def _mixed_note(p: KernelParam) -> str:
    """The guess line of a buffer of structs with mixed fields (held as bytes, zero-filled)."""
    rec = p.record
    return (f"{p.name}: struct {rec.name if rec else '?'} of mixed fields, {rec.size if rec else 0} bytes each, "
            "held as uint8 bytes filled with zeros (give its inputs by hand)")


def _prod(v: list[int]) -> int:
    out = 1
    for x in v:
        out *= x
    return out
