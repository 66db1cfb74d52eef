"""The converter on one kernel per feature: rKernel structure, untouched code, #line mapping, metadata,
nvcc compilation of every converted file, and precise refusals.

What each test expects is read from the legacy sources themselves (comments and strings blanked, brackets
matched, macros expanded by name), never from the converter's own output.
"""
from __future__ import annotations

import importlib.util
import json
import re
import shutil
import subprocess
import sys
import time
from collections import Counter
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import numpy as np
import pytest

from converter import ConversionError, ConversionResult, convert_file, convert_source
from converter.output import RKernelMeta, SourceLocation
from rtransform.spec import check_params, load_spec, make_inputs, param_from_type, template_arg_text
from toolchain.nvcc import nvcc_compile
from vdevice import RUNTIME_INCLUDE

REPO = Path(__file__).resolve().parent.parent
KDIR = REPO / "tests" / "converter_kernels"
RDIR = KDIR / "refused"
STEMS = sorted(p.stem for p in KDIR.glob("*.cu"))
REFUSED_MARKED = sorted(p.name for p in RDIR.glob("*.cu") if "REFUSED:" in p.read_text())

INDEX_VARS = {"threadIdx", "blockIdx", "blockDim", "gridDim"}
CG_BLOCK_NAMES = {"thread_block", "thread_block_tile", "this_thread_block", "tiled_partition"}
BARRIER_RE = re.compile(r"\b(__syncthreads(?:_count|_and|_or)?)\s*\(")
WARP_RE = re.compile(r"\b(__\w+_sync|__syncwarp)\s*\(")
TASK_BARRIERS = {"__syncthreads": "rt::sync", "__syncthreads_count": "rt::sync_count",
                 "__syncthreads_and": "rt::sync_and", "__syncthreads_or": "rt::sync_or"}
ELEM_BYTES = {"float": 4, "int": 4, "unsigned": 4, "double": 8}
IDENT = re.compile(r"\b[A-Za-z_]\w*")


# ---- reading CUDA text, independently of the converter ------------------------------------------------------
_NOISE = re.compile(r'//[^\n]*|/\*.*?\*/|"(?:\\.|[^"\\\n])*"|^[ \t]*#[^\n]*', re.S | re.M)


def blank(text: str) -> str:
    """Comments, string literals and preprocessor lines as spaces, so offsets and lines stay put."""
    return _NOISE.sub(lambda m: re.sub(r"[^\n]", " ", m.group(0)), text)


def closing(code: str, i: int, open_: str = "(", close: str = ")") -> int:
    """Offset of the bracket that closes the one at i."""
    depth = 0
    for j in range(i, len(code)):
        depth += (code[j] == open_) - (code[j] == close)
        if depth == 0:
            return j
    raise AssertionError(f"unbalanced {open_!r} at offset {i}")


def split_top(text: str, angles: bool = False) -> list[str]:
    """Comma-separated items at bracket depth 0 (template angle brackets counted when asked)."""
    opening, closing_ = ("([{<", ")]}>") if angles else ("([{", ")]}")
    items, depth, cur = [], 0, ""
    for ch in text:
        depth += (ch in opening) - (ch in closing_)
        if ch == "," and depth == 0:
            items.append(cur)
            cur = ""
        else:
            cur += ch
    return [s.strip() for s in items + [cur] if s.strip()]


def line_of(text: str, off: int) -> int:
    return text.count("\n", 0, off) + 1


def col_of(text: str, off: int) -> int:
    return off - text.rfind("\n", 0, off)


@dataclass
class Fn:
    """A __global__/__device__ function definition: offsets of its start, parentheses, body and closing brace."""
    name: str
    is_kernel: bool
    start: int
    lparen: int
    rparen: int
    body: int
    end: int


def _declarator(code: str, i: int) -> tuple[str, int, int] | None:
    """(name, offset of '(', offset of ')') of the function declarator after offset i; __launch_bounds__ skipped."""
    while True:
        lp = code.find("(", i)
        name = re.search(r"(\w+)\s*$", code[i:lp]) if lp >= 0 else None
        if name is None or re.search(r"[;{}=]", code[i:lp]):
            return None
        rp = closing(code, lp)
        if name.group(1) != "__launch_bounds__":
            return name.group(1), lp, rp
        i = rp + 1


def functions(text: str) -> dict[str, Fn]:
    """Function definitions marked __global__ or __device__, by name."""
    code = blank(text)
    found: dict[str, Fn] = {}
    for m in re.finditer(r"\b(__global__|__device__)\b", code):
        decl = _declarator(code, m.end())
        opening = decl and re.match(r"\s*\{", code[decl[2] + 1:])
        if not opening or decl[0] in found:
            continue
        name, lp, rp = decl
        start = max(code.rfind(c, 0, m.start()) for c in ";{}") + 1
        start += len(code[start:m.start()]) - len(code[start:m.start()].lstrip())
        body = rp + opening.end()
        found[name] = Fn(name, "__global__" in code[start:lp], start, lp, rp, body, closing(code, body, "{", "}"))
    return found


def macros(text: str) -> dict[str, str]:
    """Bodies of the #define lines, by macro name."""
    return {m.group(1): m.group(2) for m in
            re.finditer(r"^[ \t]*#[ \t]*define[ \t]+(\w+)(?:\([^)]*\))?[ \t]*(.*)$", text, re.M)}


def identifiers(fragment: str, defs: dict[str, str]) -> set[str]:
    """Identifiers of a code fragment, with the identifiers of the macros it uses (recursively)."""
    seen: set[str] = set()
    todo = set(IDENT.findall(fragment))
    while todo:
        n = todo.pop()
        if n not in seen:
            seen.add(n)
            todo |= set(IDENT.findall(defs.get(n, "")))
    return seen


@dataclass
class SharedDecl:
    """One variable of a __shared__ declaration."""
    name: str
    type: str
    dims: str
    volatile: bool
    extern: bool
    offset: int


SHARED_RE = re.compile(r"((?:\b(?:static|volatile|extern)\s+)*)__shared__\s+(volatile\s+)?(\w+)\s+([^;]+);")


def shared_decls(code: str, start: int = 0, end: int | None = None) -> list[SharedDecl]:
    """The __shared__ variables declared between two offsets (several per declaration possible)."""
    out = []
    for m in SHARED_RE.finditer(code, start, len(code) if end is None else end):
        quals = m.group(1) + (m.group(2) or "")
        for item in split_top(m.group(4), angles=True):
            d = re.fullmatch(r"(\w+)\s*((?:\[[^\]]*\]\s*)*)", item)
            out.append(SharedDecl(d.group(1), m.group(3), re.sub(r"\s+", "", d.group(2)), "volatile" in quals,
                                  "extern" in quals, m.start()))
    return out


def shared_bytes(d: SharedDecl, defs: dict[str, str]) -> int | None:
    """Size of a shared variable from its element type and dimensions; None when a template decides it."""
    count = ELEM_BYTES.get(d.type)
    for dim in re.findall(r"\[([^\]]*)\]", d.dims):
        expr = IDENT.sub(lambda m: defs.get(m.group(0), m.group(0)), dim)
        if count is None or not re.fullmatch(r"[\d\s+\-*()]+", expr):
            return None
        count *= eval(expr)  # digits and + - * only (checked above)
    return count


# ---- facts about one legacy file ------------------------------------------------------------------------------
@dataclass
class Legacy:
    """A legacy source with its blanked code, macros and function definitions."""
    path: Path
    text: str
    code: str
    defs: dict[str, str]
    fns: dict[str, Fn]

    def kernels(self) -> list[Fn]:
        return [f for f in self.fns.values() if f.is_kernel]

    def inside(self, f: Fn) -> str:
        """Parameters and body of f, comments blanked."""
        return self.code[f.lparen:f.end + 1]

    def file_shared(self) -> list[SharedDecl]:
        spans = [(f.start, f.end) for f in self.fns.values()]
        return [d for d in shared_decls(self.code) if not any(s <= d.offset <= e for s, e in spans)]

    def callees(self, f: Fn) -> list[str]:
        """This file's device functions called directly from f's body."""
        called = re.findall(r"\b(\w+)\s*\(", self.code[f.body:f.end])
        return [n for n in dict.fromkeys(called) if n in self.fns and not self.fns[n].is_kernel and n != f.name]

    def reachable(self, f: Fn) -> list[str]:
        seen: list[str] = []
        todo = self.callees(f)
        while todo:
            n = todo.pop(0)
            if n not in seen:
                seen.append(n)
                todo += self.callees(self.fns[n])
        return seen

    def direct_context(self, f: Fn) -> bool:
        """f itself reads indices, has shared memory, barriers, warp collectives or cooperative groups."""
        ids = identifiers(self.inside(f), self.defs)
        special = {i for i in ids if re.fullmatch(r"__\w+_sync|__syncwarp|__syncthreads\w*", i)}
        shared = {d.name for d in self.file_shared()}
        return bool(ids & (INDEX_VARS | CG_BLOCK_NAMES | shared) or special or "__shared__" in self.inside(f))

    def needs_context(self, name: str) -> bool:
        return any(self.direct_context(self.fns[n]) for n in [name] + self.reachable(self.fns[name]))

    def static_shared(self, f: Fn) -> list[SharedDecl]:
        return [d for d in shared_decls(self.code, f.body, f.end) if not d.extern]

    def uses_smem(self, name: str) -> bool:
        """name (or what it calls) has static shared variables or uses a file-scope one."""
        file_names = {d.name for d in self.file_shared()}
        for n in [name] + self.reachable(self.fns[name]):
            f = self.fns[n]
            if self.static_shared(f) or self.body_ids(f) & file_names:
                return True
        return False

    def body_ids(self, f: Fn) -> set[str]:
        return identifiers(self.code[f.body:f.end], self.defs)

    def layout_members(self, k: Fn) -> list[tuple[SharedDecl, str, str]]:
        """(declaration, member name, declaring function or '' at file scope) the kernel's layout must hold."""
        own = [(d, d.name, k.name) for d in self.static_shared(k)]
        callee = [(d, f"{c}__{d.name}", c) for c in self.clones(k) for d in self.static_shared(self.fns[c])]
        used = set().union(*(self.body_ids(self.fns[n]) for n in [k.name] + self.reachable(k)))
        return own + callee + [(d, d.name, "") for d in self.file_shared() if d.name in used]

    def clones(self, k: Fn) -> list[str]:
        """Callees the rKernel must call as context-taking clones."""
        return [n for n in self.reachable(k) if self.needs_context(n)]

    def params(self, f: Fn) -> list[tuple[str, str]]:
        """(type, name) of each parameter."""
        out = []
        for p in split_top(self.code[f.lparen + 1:f.rparen], angles=True):
            m = re.fullmatch(r"(.*?)(\w+)", p.strip(), re.S)
            out.append((" ".join(m.group(1).split()), m.group(2)))
        return out

    def template_params(self, f: Fn) -> list[tuple[str, str, str | None]]:
        """(name, 'type'|'value', type) of each template parameter."""
        m = re.match(r"template\s*<(.*?)>\s*(?:__global__|__device__)", self.code[f.start:f.lparen], re.S)
        if not m:
            return []
        out = []
        for p in split_top(m.group(1), angles=True):
            t, name = p.rsplit(None, 1)
            out.append((name, "type", None) if t in ("typename", "class") else (name, "value", t))
        return out

    def qualname(self, f: Fn) -> str:
        names = [m.group(1) for m in re.finditer(r"\bnamespace\s+(\w+)\s*\{", self.code)
                 if m.end() - 1 < f.start < closing(self.code, m.end() - 1, "{", "}")]
        return "::".join(names + [f.name])

    def barrier_macros(self) -> dict[str, str]:
        """Macros that expand to a block barrier, with the barrier's name."""
        out = {}
        for n, body in self.defs.items():
            found = sorted(identifiers(body, self.defs) & TASK_BARRIERS.keys())
            if found:
                out[n] = found[0]
        return out

    def span_lines(self, fns: list[Fn]) -> set[int]:
        return {n for f in fns for n in range(line_of(self.text, f.start), line_of(self.text, f.end) + 1)}


@lru_cache(maxsize=None)
def legacy(stem: str) -> Legacy:
    path = KDIR / f"{stem}.cu"
    text = path.read_text()
    return Legacy(path, text, blank(text), macros(text), functions(text))


@lru_cache(maxsize=None)
def converted(stem: str) -> ConversionResult:
    return convert_file(str(KDIR / f"{stem}.cu"))


@lru_cache(maxsize=None)
def out_fns(stem: str) -> dict[str, Fn]:
    return functions(converted(stem).output)


def converted_pairs(stem: str) -> list[tuple[Fn, Fn | None]]:
    """(legacy function, its converted counterpart or None) for each kernel and each expected clone."""
    L, O = legacy(stem), out_fns(stem)
    pairs = [(k, O.get(f"{k.name}__rtask")) for k in L.kernels()]
    names = dict.fromkeys(n for k in L.kernels() for n in L.clones(k))
    return pairs + [(L.fns[n], O.get(f"{n}__rt")) for n in names]


def converted_bodies(stem: str) -> list[tuple[Fn, str]]:
    """(legacy function, converted body) for the kernels and the clones that exist (missing ones: clone test)."""
    out = converted(stem).output
    return [(f, out[o.body:o.end + 1]) for f, o in converted_pairs(stem) if o is not None]


def norm(s: str) -> str:
    return re.sub(r"\s+", "", s)


def norm_type(t: str) -> str:
    t = re.sub(r"\b__restrict__\b", "__restrict", t)
    t = re.sub(r"\bunsigned\b(?!\s*(?:int|char|short|long)\b)", "unsigned int", t)
    return norm(t)


@lru_cache(maxsize=None)
def load_refs():
    spec = importlib.util.spec_from_file_location("converter_kernel_refs", KDIR / "refs.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def run_cli(*args: str, cwd: Path = REPO) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "rtransform.cli", *args], capture_output=True, text=True,
                          timeout=120, cwd=cwd)


# ---- the kernel files themselves ------------------------------------------------------------------------------
@pytest.mark.parametrize("stem", STEMS)
def test_spec_and_reference_fit_the_kernel(stem):
    """Every feature kernel has a launch spec that matches its parameters and a numpy reference for its outputs."""
    spec = load_spec(KDIR / f"{stem}.spec.yaml")
    L = legacy(stem)
    name = spec.kernel.split("::")[-1]
    assert name in L.fns and L.fns[name].is_kernel, f"spec names {spec.kernel}, not a kernel of {stem}.cu"
    assert L.qualname(L.fns[name]) == spec.kernel
    check_params(spec, [param_from_type(n, t) for t, n in L.params(L.fns[name])])
    assert bool(spec.template_args) == bool(L.template_params(L.fns[name]))
    refs = load_refs().REFS
    assert stem in refs, f"refs.py has no reference for {stem}"
    inputs = make_inputs(spec)
    expected = refs[stem]({k: np.asarray(v) for k, v in inputs.items()})
    assert set(expected) == set(spec.outputs)
    for out, arr in expected.items():
        assert arr.shape == (spec.arg(out).size,) and arr.dtype == np.dtype(spec.arg(out).dtype), out


# ---- structure of the converted code --------------------------------------------------------------------------
@pytest.mark.parametrize("stem", STEMS)
def test_kernels_become_rtask_functions_and_plain_wrappers(stem):
    """`__global__ K(p)` becomes `__device__ void K__rtask(rt::Task& __rt, p)` plus a wrapper with K's signature."""
    L, res, O = legacy(stem), converted(stem), out_fns(stem)
    out = res.output
    assert out.startswith('#include "rtask_runtime.cuh"\n') and out.count('#include "rtask_runtime.cuh"') == 1
    assert len(re.findall(r"\b__global__\b", blank(out))) == len(re.findall(r"\b__global__\b", L.code))
    for k in L.kernels():
        rt = O.get(f"{k.name}__rtask")
        assert rt is not None and not rt.is_kernel, f"no __device__ {k.name}__rtask"
        head = out[rt.start:rt.lparen]
        assert re.search(rf"__device__\s+void\s+{k.name}__rtask$", head.strip()), head
        params = split_top(out[rt.lparen + 1:rt.rparen], angles=True)
        assert norm(params[0]) == "rt::Task&__rt"
        assert [norm(p) for p in params[1:]] == [norm(f"{t} {n}") for t, n in L.params(k)]
        w = O[k.name]
        assert w.is_kernel, f"wrapper {k.name} is not __global__"
        assert norm(out[w.lparen:w.rparen]) == norm(L.text[k.lparen:k.rparen])
        if 'extern "C"' in L.text[k.start:k.lparen]:
            assert 'extern "C"' in out[w.start:w.lparen], f'wrapper {k.name} lost extern "C": ' + out[w.start:w.lparen]
        args = ", ".join(["__rt"] + [n for _, n in L.params(k)])
        assert re.search(rf"RT_RUN_AS_KERNEL\(.*\b{k.name}__rtask(<[^>]*>)?\({re.escape(args)}\)",
                         out[w.body:w.end]), out[w.body:w.end]


@pytest.mark.parametrize("stem", STEMS)
def test_indices_are_shadowed_where_used(stem):
    """RT_LEGACY_INDICES(__rt) opens every converted body that reads threadIdx/blockIdx/... (macros included)."""
    L = legacy(stem)
    for f, body in converted_bodies(stem):
        uses = bool(identifiers(L.code[f.body:f.end], L.defs) & INDEX_VARS)
        assert ("RT_LEGACY_INDICES(__rt);" in body) == uses, f"{f.name}: uses indices={uses}"
        if uses:
            names = INDEX_VARS | {n for n in L.defs if identifiers(L.defs[n], L.defs) & INDEX_VARS}
            first_use = re.search(r"\b(" + "|".join(sorted(names)) + r")\b", blank(body))
            assert body.index("RT_LEGACY_INDICES(__rt);") < first_use.start()


@pytest.mark.parametrize("stem", STEMS)
def test_barriers_become_task_barriers(stem):
    """__syncthreads*() -> rt::sync*(__rt, ...); barriers hidden in macros get RT_SHADOW_INTRINSICS."""
    L = legacy(stem)
    for f, body in converted_bodies(stem):
        body = blank(body)
        assert not BARRIER_RE.search(body), f"{f.name}: a hardware barrier is left"
        for name, n in Counter(BARRIER_RE.findall(L.code[f.body:f.end])).items():
            got = len(re.findall(rf"{re.escape(TASK_BARRIERS[name])}\(__rt\b", body))
            assert got == n, f"{f.name}: {n} x {name}, {got} x {TASK_BARRIERS[name]}(__rt"
        hidden = set(re.findall(r"\b(\w+)\s*\(", L.code[f.body:f.end])) & L.barrier_macros().keys()
        assert ("RT_SHADOW_INTRINSICS(__rt);" in body) == bool(hidden), f.name


@pytest.mark.parametrize("stem", STEMS)
def test_layout_struct_lists_the_shared_variables(stem):
    """Static __shared__ of the kernel, of its cloned callees and file-scope ones used become layout members."""
    L, out = legacy(stem), converted(stem).output
    for k in L.kernels():
        members = L.layout_members(k)
        struct = re.search(rf"struct\s+{k.name}__rt_shared\s*\{{(.*?)\}};", out, re.S)
        if not members:
            assert struct is None, f"{k.name} has no static shared memory but a layout struct"
            continue
        assert struct is not None, f"no layout struct {k.name}__rt_shared"
        got = {norm(m) for m in struct.group(1).split(";") if m.strip()}
        assert got == {norm(f"{d.type} {member}{d.dims}") for d, member, _ in members}


@pytest.mark.parametrize("stem", STEMS)
def test_bodies_bind_their_shared_variables(stem):
    """`__shared__ T x[..];` becomes `auto& x = __rt_sh.MEMBER;` after __rt_sh exists; extern ones stay as written."""
    L, out, O = legacy(stem), converted(stem).output, out_fns(stem)
    for k in L.kernels():
        rt = out[O[f"{k.name}__rtask"].body:O[f"{k.name}__rtask"].end]
        assert not re.search(r"(?<!extern )__shared__", blank(rt)), "a static __shared__ is left in the rKernel"
        for d in shared_decls(L.code, k.body, k.end):
            if d.extern:
                assert re.search(rf"extern\s+__shared__\s+{d.type}\s+{d.name}\s*\[\s*\]", rt)
        for d, member, owner in L.layout_members(k):
            for n in [owner] if owner else [k.name] + L.reachable(k):
                o = O.get(f"{n}__rtask" if n == k.name else f"{n}__rt")
                if o is not None and d.name in L.body_ids(L.fns[n]):
                    ref = f"{'volatile ' if d.volatile else ''}auto& {d.name} = __rt_sh.{member};"
                    assert ref in out[o.body:o.end], f"{o.name} lacks {ref}"
        first = re.search(r"\b__rt_sh\b", rt)
        if first:
            assert re.match(r"__rt_sh\s*=", rt[first.start():]) and rt[:first.start()].rstrip().endswith("auto&"), \
                f"{k.name}__rtask uses __rt_sh before declaring it: {rt[:300]}"


@pytest.mark.parametrize("stem", STEMS)
def test_callees_needing_the_task_are_cloned(stem):
    """Callees with indices/shared/barriers/warp/cg get `NAME__rt(rt::Task& __rt, ...)`; originals stay as written."""
    L, res, O = legacy(stem), converted(stem), out_fns(stem)
    out = res.output
    for k in L.kernels():
        for n in L.reachable(k):
            f, clone = L.fns[n], O.get(f"{n}__rt")
            assert L.text[f.start:f.end + 1] in out, f"the original {n} was changed"
            if not L.needs_context(n):
                assert clone is None, f"pure helper {n} was cloned"
                continue
            assert clone is not None, f"{n} needs the rTask context (called from {k.name}) but has no clone {n}__rt"
            params = split_top(out[clone.lparen + 1:clone.rparen], angles=True)
            extra = ["rt::Task&__rt"] + (["__RtL&__rt_sh"] if L.uses_smem(n) else [])
            assert [norm(p) for p in params[:len(extra)]] == extra, params
            assert [p.split()[-1] for p in params[len(extra):]] == [pn for _, pn in L.params(f)]
        for _, o in converted_pairs(stem):
            body = blank(out[o.body:o.end]) if o else ""
            for n in L.clones(k):
                assert not re.search(rf"\b{n}\s*\(", body), f"{o.name} still calls {n} instead of {n}__rt"
    meta = {m.name: m for m in res.rkernels}
    for k in L.kernels():
        assert set(meta[L.qualname(k)].callees_cloned) == {f"{n}__rt" for n in L.clones(k)}


@pytest.mark.parametrize("stem", STEMS)
def test_warp_intrinsics_get_the_task_lane_mask(stem):
    """Each warp collective's mask argument is wrapped in rt::warp_mask(__rt, ...), in kernels and clones."""
    L = legacy(stem)
    for f, body in converted_bodies(stem):
        calls = []
        for m in WARP_RE.finditer(L.code, f.body, f.end):
            args = split_top(L.text[m.end():closing(L.code, m.end() - 1)])
            calls.append(f"{m.group(1)}(rt::warp_mask(__rt, {args[0]})" if args else
                         f"{m.group(1)}(rt::warp_mask(__rt, 0xffffffffu))")
        for c in calls:
            assert norm(c) in norm(body), f"{f.name}: expected {c}"
        assert len(WARP_RE.findall(blank(body))) == len(calls) == body.count("rt::warp_mask(__rt,")


def test_cooperative_groups_become_task_groups():
    """cg::thread_block -> rt::TaskGroup, tiles -> rt::Tile, cg::sync/reduce -> rt::, in the kernel and its helper."""
    out = converted("coop_groups").output
    O = out_fns("coop_groups")
    body = out[O["cg_block_sums__rtask"].body:O["cg_block_sums__rtask"].end]
    assert "rt::TaskGroup block = rt::this_task(__rt);" in body
    assert "rt::Tile<32> tile = rt::tiled_partition<32>(block);" in body
    assert "rt::reduce(tile, v, cg::plus<float>())" in body
    assert "rt::sync(block);" in body and "block.sync();" in body
    assert not re.search(r"\bcg::(thread_block\w*|this_thread_block|tiled_partition|sync|reduce)\b", blank(body))
    clone = O.get("tile_sum__rt")
    assert clone is not None, "tile_sum(cg::thread_block_tile<32>, float) is called with an rt::Tile but not cloned"
    assert norm(out[clone.lparen:clone.rparen + 1]) == norm("(rt::Task& __rt, rt::Tile<32> tile, float v)")
    assert "tile_sum__rt(__rt, tile, v * v)" in body


# ---- what must not change -------------------------------------------------------------------------------------
def assert_in_order(lines: list[tuple[int, str]], out_lines: list[str], where: str) -> None:
    """Every (line number, text) appears, byte-identical, in out_lines and in the same order."""
    pos = 0
    for n, text in lines:
        while pos < len(out_lines) and out_lines[pos] != text:
            pos += 1
        assert pos < len(out_lines), f"{where}:{n} is missing or changed in the output: {text!r}"
        pos += 1


@pytest.mark.parametrize("stem", STEMS)
def test_code_outside_kernels_is_byte_identical(stem):
    """Every line outside the converted kernels (callees, macros, host code) appears unchanged, in order."""
    L = legacy(stem)
    inside = L.span_lines(L.kernels())
    kept = [(i + 1, t) for i, t in enumerate(L.text.splitlines()) if i + 1 not in inside]
    assert_in_order(kept, converted(stem).output.splitlines(), str(L.path))


def line_map(output: str) -> list[tuple[int | None, str]]:
    """(legacy line number per the #line directives or None for generated lines, text) of each output line."""
    cur: int | None = None
    out = []
    for line in output.splitlines():
        m = re.match(r"\s*#\s*line\s+(\d+)", line)
        if m:
            cur = int(m.group(1))
            continue
        if line.startswith("// rtransform:"):
            cur = None
        out.append((cur, line))
        cur = None if cur is None else cur + 1
    return out


EDITED_RE = re.compile(r"__shared__|__syncthreads|\b__\w+_sync\s*\(|__syncwarp|\bcg::|\.sync\s*\(|<<<")


@pytest.mark.parametrize("stem", STEMS)
def test_line_directives_map_back_to_the_legacy_lines(stem):
    """A line after `#line N` is legacy line N, and so on down to the next directive (unedited lines only)."""
    L, res = legacy(stem), converted(stem)
    src = L.text.splitlines()
    rewritten = L.kernels() + [L.fns[c] for c in dict.fromkeys(c for k in L.kernels() for c in L.clones(k))]
    inside = L.span_lines(rewritten)  # kernels, and callees whose clones copy their lines
    headers = {n for f in rewritten for n in range(line_of(L.text, f.start), line_of(L.text, f.body) + 1)}
    clone_calls = re.compile(r"\b(" + "|".join(sorted({c for k in L.kernels() for c in L.clones(k)}) or ["$^"]) + r")\s*\(")
    blank_src = L.code.splitlines()
    tails = {line_of(L.text, f.end): src[line_of(L.text, f.end) - 1][col_of(L.text, f.end):] for f in rewritten}
    mapped = [(n, t) for n, t in line_map(res.output) if n is not None]
    assert mapped, "no #line directive in the output"
    for n, text in mapped:
        assert 1 <= n <= len(src), f"#line maps an output line to {n}, past the end of the file"
        if n in headers or (n in inside and (EDITED_RE.search(blank_src[n - 1]) or clone_calls.search(blank_src[n - 1]))):
            continue
        allowed = {src[n - 1]} | {tail for e, tail in tails.items() if e == n}  # text after a rewritten body's '}'
        assert text in allowed, f"output line mapped to {L.path.name}:{n} is {text!r}; that line is {src[n - 1]!r}"


# ---- metadata --------------------------------------------------------------------------------------------------
def expected_features(L: Legacy, k: Fn) -> set[str]:
    fns = [k] + [L.fns[c] for c in L.clones(k)]
    code = "".join(L.inside(f) for f in fns)
    ids = identifiers(code, L.defs)
    feats = {"indices"} if ids & INDEX_VARS else set()
    feats |= {"template"} if L.template_params(k) else set()
    feats |= {"launch_bounds"} if "__launch_bounds__" in L.code[k.start:k.lparen] else set()
    feats |= {"extern_c"} if 'extern "C"' in L.text[k.start:k.lparen] else set()
    feats |= {"namespace"} if "::" in L.qualname(k) else set()
    feats |= {"barrier"} if "__syncthreads" in ids else set()
    feats |= {"barrier_reduction"} if ids & {"__syncthreads_count", "__syncthreads_and", "__syncthreads_or"} else set()
    feats |= {"macro_barrier"} if set(re.findall(r"\b(\w+)\s*\(", code)) & L.barrier_macros().keys() else set()
    feats |= {"warp_intrinsics"} if WARP_RE.search(code) else set()
    feats |= {"cooperative_groups"} if ids & CG_BLOCK_NAMES else set()
    feats |= {"static_shared"} if any(L.static_shared(f) for f in fns) else set()
    feats |= {"dynamic_shared"} if any(d.extern for f in fns for d in shared_decls(L.code, f.body, f.end)) else set()
    return feats


@pytest.mark.parametrize("stem", STEMS)
def test_metadata_describes_each_rkernel(stem):
    """Names, parameter C types, template parameters, shared memory, launch bounds, features, source line."""
    L, res = legacy(stem), converted(stem)
    meta = {m.name: m for m in res.rkernels}
    assert set(meta) == {L.qualname(k) for k in L.kernels()}
    for k in L.kernels():
        m = meta[L.qualname(k)]
        assert (m.rkernel, m.wrapper) == (f"{k.name}__rtask", k.name)
        assert [(p.name, norm_type(p.type)) for p in m.params] == [(n, norm_type(t)) for t, n in L.params(k)]
        assert [(t.name, t.kind, t.type) for t in m.template_params] == L.template_params(k)
        sizes = [shared_bytes(d, L.defs) for d, _, _ in L.layout_members(k)]
        assert m.static_smem_bytes == (None if None in sizes else sum(sizes))  # 4-byte types: no padding
        assert m.layout == (f"{k.name}__rt_shared" if sizes else None)
        fns = [k] + [L.fns[c] for c in L.clones(k)]
        assert m.dynamic_smem == any(d.extern for f in fns for d in shared_decls(L.code, f.body, f.end))
        lb = re.search(r"__launch_bounds__\s*\((.*?)\)", L.code[k.start:k.lparen])
        assert (m.launch_bounds and norm(m.launch_bounds)) == (lb and norm(lb.group(1)))
        missing = expected_features(L, k) - set(m.features)
        assert not missing, f"features {m.features} lack {sorted(missing)}"
        assert m.source == SourceLocation(str(L.path), line_of(L.text, k.start))


@pytest.mark.parametrize("stem", STEMS)
def test_metadata_json_keeps_its_format_and_reads_back(stem):
    """The .rkernels.json objects keep the field names as keys (the format from before the parts were typed) and
    RKernelMeta.from_json reads them back to the same metadata."""
    for m in converted(stem).rkernels:
        obj = json.loads(json.dumps(m.to_json()))
        assert all(set(p) == {"name", "type"} for p in obj["params"])
        assert all(set(t) == {"name", "kind", "type"} and t["kind"] in ("type", "value") for t in obj["template_params"])
        assert all(set(v) == {"member", "decl", "bytes"} for v in obj["shared_variables"])
        assert all(set(b) == {"line", "col", "kind", "function"} for b in obj["barrier_sites"])
        assert set(obj["source"]) == {"file", "line"} and "ptxas" not in obj
        assert RKernelMeta.from_json(obj) == m


def expected_barrier_sites(L: Legacy, k: Fn) -> dict[tuple[int, int], str | None]:
    """(line, col) of every block barrier the kernel reaches, with the intrinsic's name where it has one."""
    sites: dict[tuple[int, int], str | None] = {}
    for f in [k] + [L.fns[n] for n in L.reachable(k)]:
        code = L.code[:f.end]
        for m in BARRIER_RE.finditer(code, f.body):
            sites[(line_of(L.text, m.start()), col_of(L.text, m.start()))] = m.group(1)
        for m in re.finditer(r"\b(\w+)\s*\(", code[f.body:]):
            if m.group(1) in L.barrier_macros():
                off = f.body + m.start()
                sites[(line_of(L.text, off), col_of(L.text, off))] = L.barrier_macros()[m.group(1)]
        blocks = re.findall(r"\bthread_block\s+(\w+)", L.code[f.lparen:f.end])
        for pat in [r"\bcg::sync\s*\("] + [rf"\b{b}\.sync\s*\(" for b in blocks]:
            for m in re.finditer(pat, code[f.body:]):
                sites[(line_of(L.text, f.body + m.start()), col_of(L.text, f.body + m.start()))] = None
    return sites


@pytest.mark.parametrize("stem", STEMS)
def test_barrier_sites_point_at_the_barriers(stem):
    """Metadata barrier sites are exactly the barriers of the kernel and its callees, at their line and column."""
    L, res = legacy(stem), converted(stem)
    meta = {m.name: m for m in res.rkernels}
    for k in L.kernels():
        want = expected_barrier_sites(L, k)
        got = {(s.line, s.col): s.kind for s in meta[L.qualname(k)].barrier_sites}
        assert set(got) == set(want), f"{k.name}: sites {sorted(got)}, barriers at {sorted(want)}"
        for where, kind in want.items():
            assert kind is None or got[where] == kind, f"{k.name} at {where}: {got[where]} != {kind}"


# ---- nvcc --------------------------------------------------------------------------------------------------------
def instantiation(stem: str) -> str:
    """An explicit instantiation of the spec's template kernel with the spec's template arguments."""
    spec = load_spec(KDIR / f"{stem}.spec.yaml")
    if not spec.template_args:
        return ""
    L = legacy(stem)
    k = L.fns[spec.kernel.split("::")[-1]]
    subst = {n: template_arg_text(a) for (n, _, _), a in zip(L.template_params(k), spec.template_args)}
    types = [IDENT.sub(lambda m: subst.get(m.group(0), m.group(0)), t) for t, _ in L.params(k)]
    return f"\ntemplate __global__ void {spec.kernel}<{', '.join(subst.values())}>({', '.join(types)});\n"


@pytest.fixture(scope="session")
def nvcc_builds(nvcc_path, tmp_path_factory) -> dict[str, tuple[int, str]]:
    """Every converted feature file compiled for sm_90: stem -> (exit code, messages).

    Device code only (a cubin, as NVRTC would build an rKernel), except files with host code (`main`), which
    get the full host + device compile so the host launch of the wrapper is checked too.
    """
    root = tmp_path_factory.mktemp("nvcc")
    stubs = root / "absent_headers"
    stubs.mkdir()
    (stubs / "cublas_v2.h").write_text("// stands in for the cuBLAS header a CUDA machine would have\n")

    flags = {}
    for stem in STEMS:  # every libclang/parse step on this thread: the pool below only runs nvcc
        (root / f"{stem}.rtask.cu").write_text(converted(stem).output + instantiation(stem))
        flags[stem] = [] if re.search(r"\bint\s+main\s*\(", legacy(stem).code) else ["-cubin"]

    def build(stem: str) -> tuple[str, tuple[int, str]]:
        src = root / f"{stem}.rtask.cu"
        try:
            device_only = flags[stem]
            r = nvcc_compile(src, root / f"{stem}.o", "sm_90", ["-I", str(stubs)] + device_only, timeout=300,
                             include_dirs=[str(RUNTIME_INCLUDE)])
            return stem, (r.returncode, r.stdout + r.stderr)
        except subprocess.TimeoutExpired:
            return stem, (-1, "nvcc timed out after 300 s")

    # sequential on purpose: starting a thread here once hung in CI-like runs (Thread.start never returned
    # after earlier tests had run the emulator in this process); nvcc itself is the cost, not the loop
    return dict(build(stem) for stem in STEMS)


@pytest.mark.nvcc
@pytest.mark.parametrize("stem", STEMS)
def test_converted_file_compiles_with_nvcc(stem, nvcc_builds):
    """The converted file (with the spec's template instantiation) compiles for sm_90."""
    code, messages = nvcc_builds[stem]
    assert code == 0, messages[-4000:]


# ---- refusals and bad input ----------------------------------------------------------------------------------
ERROR_LINE = re.compile(r"(.+):(\d+):(\d+): error: (.+)")


@pytest.mark.parametrize("name", REFUSED_MARKED)
def test_refused_construct_is_reported_at_the_construct(name, tmp_path):
    """One `file:line:col: error:` line per refused construct, pointing at it; exit non-zero; no output file."""
    path = RDIR / name
    lines = path.read_text().splitlines()
    marks = {i + 1: m.group(1).split("|") for i, t in enumerate(lines) if (m := re.search(r"REFUSED:\s*(\S+)", t))}
    out = tmp_path / "out.cu"
    r = run_cli("convert", str(path), "-o", str(out))
    assert r.returncode != 0
    assert list(tmp_path.iterdir()) == [], "a refused conversion wrote files"
    # error lines; a note may follow naming the kernels of the file that --kernel can still convert
    errors = [t for t in r.stderr.splitlines() if t.strip() and ": note: " not in t]
    assert errors and "Traceback" not in r.stderr
    for e in errors:
        m = ERROR_LINE.fullmatch(e)
        assert m and m.group(1) == str(path), f"not a '{path}:line:col: error: ...' line: {e}"
        ln, col = int(m.group(2)), int(m.group(3))
        assert ln in marks, f"{e}: line {ln} holds no refused construct"
        assert any(lines[ln - 1][col - 1:].startswith(tok) for tok in marks[ln]), f"{e}: column is not at {marks[ln]}"
    assert len(errors) == len(marks), f"{len(marks)} refused construct(s), {len(errors)} error lines:\n{r.stderr}"


@pytest.mark.parametrize("case", ["no_kernel.cu", "prose.txt", "<missing>"])
def test_unconvertible_input_gives_one_error_line(case, tmp_path):
    """No kernel, not CUDA at all, or no file: one error line naming the file, non-zero exit, nothing written; a
    missing file has no line to point at, so its line has no position (exit 2, bad input)."""
    path = tmp_path / "absent.cu" if case == "<missing>" else RDIR / case
    out_dir = tmp_path / "out"
    r = run_cli("convert", str(path), "-o", str(out_dir / "x.cu"))
    assert r.returncode != 0
    errors = [t for t in r.stderr.splitlines() if t.strip()]
    if case == "<missing>":
        assert r.returncode == 2 and errors == [f"{path}: error: no such file"], r.stderr
        return
    assert len(errors) == 1 and ERROR_LINE.fullmatch(errors[0]), r.stderr
    assert ERROR_LINE.fullmatch(errors[0]).group(1) == str(path)
    assert not out_dir.exists() or not any(out_dir.iterdir())


def test_api_converts_what_it_can_and_lists_the_refused():
    """Without strict, the convertible kernels convert and the refused one is listed with its diagnostics."""
    path = RDIR / "dyn_parallel.cu"
    res = convert_file(str(path))
    assert [m.name for m in res.rkernels] == ["child"]
    assert [r["name"] for r in res.refused] == ["parent"]
    launch_line = next(i + 1 for i, t in enumerate(path.read_text().splitlines()) if "<<<" in t)
    assert any(d.startswith(f"{path}:{launch_line}:") for d in res.refused[0]["diagnostics"])
    assert "child__rtask" in res.output and "parent__rtask" not in res.output
    with pytest.raises(ConversionError) as err:
        convert_file(str(path), strict=True)
    assert err.value.diagnostics and all(ERROR_LINE.fullmatch(d) for d in err.value.diagnostics)


# ---- the command line, includes, selection, speed ---------------------------------------------------------------
def test_cli_writes_output_and_metadata_beside_the_input(tmp_path):
    """Without -o the result is FILE.rtask.cu with FILE.rtask.rkernels.json, the same as the API's."""
    src = tmp_path / "saxpy.cu"
    shutil.copy(KDIR / "saxpy_bounds.cu", src)
    r = run_cli("convert", str(src))
    assert r.returncode == 0, r.stderr
    api = convert_file(str(src))
    assert (tmp_path / "saxpy.rtask.cu").read_text() == api.output
    meta = json.loads((tmp_path / "saxpy.rtask.rkernels.json").read_text())
    assert meta["rkernels"] == [m.to_json() for m in api.rkernels] and meta["refused"] == []


def test_missing_unrelated_headers_do_not_stop_conversion(tmp_path):
    """Includes that do not resolve are warned about, kept as written, and the kernel still converts."""
    src = tmp_path / "uses_helpers.cu"
    text = ('#include "not_here/helpers.h"\n#include <vendor_blas.h>\n\n'
            "__global__ void twice(float* p, int n) {\n"
            "  const int i = blockIdx.x * blockDim.x + threadIdx.x;\n  if (i < n) p[i] *= 2.f;\n}\n")
    src.write_text(text)
    res = convert_file(str(src))
    assert [m.name for m in res.rkernels] == ["twice"]
    assert all(h in res.output.splitlines() for h in text.splitlines()[:2])
    assert any("not_here/helpers.h" in w for w in res.warnings) and any("vendor_blas.h" in w for w in res.warnings)
    r = run_cli("convert", str(KDIR / "host_mixed.cu"), "-o", str(tmp_path / "host.cu"))
    # cuBLAS resolves to the vendor stub (toolchain/include/stubs/host): no warning about it
    assert r.returncode == 0 and "cublas_v2.h" not in r.stderr and (tmp_path / "host.cu").exists()


def test_kernel_option_selects(tmp_path):
    """--kernel converts only the named kernel; the other stays byte-identical; an unknown name is an error."""
    L = legacy("select_kernels")
    out = tmp_path / "sel.cu"
    r = run_cli("convert", str(L.path), "--kernel", "negate_odd", "-o", str(out), "--json")
    assert r.returncode == 0, r.stderr
    meta = json.loads(r.stdout)
    assert [m["name"] for m in meta["rkernels"]] == ["negate_odd"]
    assert json.loads((tmp_path / "sel.rkernels.json").read_text()) == meta
    text = out.read_text()
    fill = L.fns["fill_iota"]
    assert L.text[fill.start:fill.end + 1] in text and "fill_iota__rtask" not in text and "negate_odd__rtask" in text
    r = run_cli("convert", str(L.path), "--kernel", "no_such_kernel", "-o", str(tmp_path / "none.cu"))
    errors = [t for t in r.stderr.splitlines() if t.strip()]
    assert r.returncode != 0 and len(errors) == 1 and "no_such_kernel" in errors[0]
    assert not (tmp_path / "none.cu").exists()


def test_kernels_without_indices_or_parameters(tmp_path):
    """No index prelude when no index is read; a kernel without parameters gets just the task parameter."""
    text = ("__global__ void set_first(float* p, float v) {\n  p[0] = v;\n}\n\n"
            "__global__ void noop() {\n}\n")
    res = convert_source(text, str(tmp_path / "plain.cu"))
    assert "RT_LEGACY_INDICES" not in res.output
    assert re.search(r"__device__ void set_first__rtask\(rt::Task& __rt, float\* p, float v\)", res.output)
    assert re.search(r"__device__ void noop__rtask\(rt::Task& __rt\)", res.output)
    assert all("indices" not in m.features for m in res.rkernels)


def hundred_line_kernel() -> str:
    """A legitimate ~100-line kernel: staged loads, a long unrolled body, barriers every few lines."""
    body = [f"  acc += buf[(t + {k}) % 128] * {k + 1}.0f;" if k % 10 else "  __syncthreads();"
            for k in range(88)]
    return "\n".join(["// generated: a long kernel for the conversion-time measurement",
                      "__global__ void long_kernel(float* out, const float* in, int n) {",
                      "  __shared__ float buf[128];",
                      "  const int t = threadIdx.x, i = blockIdx.x * blockDim.x + t;",
                      "  buf[t] = i < n ? in[i] : 0.f;",
                      "  __syncthreads();",
                      "  float acc = 0.f;", *body,
                      "  if (i < n) out[i] = acc;", "}", ""])


def test_hundred_line_kernel_converts(tmp_path):
    """A 100-line kernel file converts with every barrier found; the time is printed, never asserted (README
    "Measured" quotes it)."""
    text = hundred_line_kernel()
    assert 95 <= len(text.splitlines()) <= 105
    name = str(tmp_path / "long.cu")
    convert_source(text, name)  # libclang loaded and warm
    times = []
    for _ in range(3):
        t0 = time.perf_counter()
        res = convert_source(text, name)
        times.append(time.perf_counter() - t0)
    print(f"\n100-line kernel: conversion {min(times) * 1e3:.0f} ms (best of 3), {max(times) * 1e3:.0f} ms worst")
    assert len(res.rkernels[0].barrier_sites) == text.count("__syncthreads")


# ---- regressions: #line after generated code, __launch_bounds__, extern "C", refusals, errors, output files --------
def test_line_numbers_survive_conversion_at_run_time(tmp_path):
    """`__LINE__` read in the kernel, in a cloned helper and in functions right after a clone and after the kernel
    gives the legacy line numbers once converted: `#line N` names the line after it, and removing
    `__launch_bounds__(...)` alone on its line keeps the line break after it."""
    from rtransform.run import run_file
    stem = "line_numbers"
    spec = KDIR / f"{stem}.spec.yaml"
    want = load_refs().REFS[stem]({})["lines"]
    assert run_file(str(KDIR / f"{stem}.cu"), str(spec)).outputs["lines"].tolist() == want.tolist()
    out = tmp_path / f"{stem}.rtask.cu"
    out.write_text(converted(stem).output)
    assert run_file(str(out), str(spec), converted=True).outputs["lines"].tolist() == want.tolist()


@pytest.mark.parametrize("stem", ["saxpy_bounds", "line_numbers"])
def test_launch_bounds_removal_keeps_the_line_break(stem):
    """`__global__ void __launch_bounds__(..)` + newline + name: the rKernel's name stays on the name's own line
    (per the #line map) and only `__launch_bounds__(...)` itself is deleted."""
    L, out = legacy(stem), converted(stem).output
    for k in L.kernels():
        name_line = line_of(L.text, k.lparen)
        got = [n for n, t in line_map(out) if n is not None and re.search(rf"\b{k.name}__rtask\s*\(", t)]
        assert got == [name_line], f"{k.name}__rtask( is on legacy line(s) {got}, the name is on {name_line}"
        lb = re.search(r"__launch_bounds__\s*\([^)]*\)", L.text[k.start:k.lparen])
        head = L.text[k.start:k.start + lb.start()] + L.text[k.start + lb.end():k.lparen]
        head = re.sub(rf"\b{k.name}\s*$", "", head.replace("__global__", "__device__"))
        assert head + f"{k.name}__rtask(" in out, f"the declaration head is not kept as written: {head!r}"


EXTERN_C_VARIANTS = """#define EXTERN_C extern "C"
extern "C" __global__ void __launch_bounds__(64) k_attr(float* p) { p[threadIdx.x] = 1.f; }
extern "C" {
__global__ void k_block(float* p) { p[threadIdx.x] = 2.f; }
}
EXTERN_C __global__ void k_macro(float* p) { p[threadIdx.x] = 3.f; }
__global__ void k_cxx(float* p) { p[threadIdx.x] = 4.f; }
extern "C++" __global__ void k_cxx_spec(float* p) { p[threadIdx.x] = 5.f; }
namespace ns { extern "C" __global__ void k_ns(float* p) { p[threadIdx.x] = 6.f; } }
"""


def test_extern_c_is_kept_on_the_wrapper(tmp_path):
    """C linkage reaches the wrapper however it is spelled: before `__launch_bounds__`, as a block, through a
    macro, inside a namespace; C++ kernels (plain or `extern "C++"`) stay C++."""
    res = convert_source(EXTERN_C_VARIANTS, str(tmp_path / "ext.cu"))
    out, O = res.output, functions(res.output)
    c_linkage = {"k_attr", "k_block", "k_macro", "k_ns"}
    meta = {m.wrapper: m for m in res.rkernels}
    for name in ["k_attr", "k_block", "k_macro", "k_cxx", "k_cxx_spec", "k_ns"]:
        w = O[name]
        assert w.is_kernel
        head = out[w.start:w.lparen]
        assert ('extern "C"' in head and 'extern "C++"' not in head) == (name in c_linkage), f"{name}: {head!r}"
        assert ("extern_c" in meta[name].features) == (name in c_linkage), name
    assert "__launch_bounds__(64) k_attr(" in out


def test_refused_texture_reads_parse_with_their_read_modes():
    """Texture references declared with cudaReadModeElementType / cudaTextureType2D (and read in device code, as
    CUDA allows) parse without any clang error: the converter's refusal at each texture read is the one report."""
    from converter import parse_cuda
    for name in ["texture_readmode.cu", "texture_ref.cu"]:
        path = RDIR / name
        src = parse_cuda(path.read_text(), str(path))
        assert [d.spelling for d in src.errors()] == [], name


def test_nothing_converted_error_lists_the_refused_kernels():
    """When no kernel converts, ConversionError keeps one diagnostic per problem and the refusals per kernel."""
    path = RDIR / "texture_readmode.cu"
    with pytest.raises(ConversionError) as err:
        convert_file(str(path))
    e = err.value
    assert [r["name"] for r in e.refused] == ["sample"]
    lines = [i + 1 for i, t in enumerate(path.read_text().splitlines()) if "REFUSED:" in t]
    assert [int(ERROR_LINE.fullmatch(d).group(2)) for d in e.refused[0]["diagnostics"]] == lines
    assert e.diagnostics == e.refused[0]["diagnostics"]
    with pytest.raises(ConversionError) as err:
        convert_file(str(RDIR / "no_kernel.cu"))
    assert err.value.refused == [] and len(err.value.diagnostics) == 1


def test_one_error_line_per_problem_in_a_shared_callee(tmp_path):
    """Two kernels reaching the same refused helper: with strict, its problem is reported once, not per kernel."""
    text = ("texture<float, 1, cudaReadModeElementType> t;\n"
            "__device__ float fetch(int i) { return tex1Dfetch(t, i); }\n"
            "__global__ void a(float* o) { o[threadIdx.x] = fetch(threadIdx.x); }\n"
            "__global__ void b(float* o) { o[threadIdx.x] = 2.f * fetch(threadIdx.x); }\n")
    with pytest.raises(ConversionError) as err:
        convert_source(text, str(tmp_path / "shared_tex.cu"), strict=True)
    col = text.splitlines()[1].index("tex1Dfetch") + 1
    assert len(err.value.diagnostics) == 1, err.value.diagnostics
    assert f":2:{col}: error: texture/surface access tex1Dfetch" in err.value.diagnostics[0]
    assert [r["name"] for r in err.value.refused] == ["a", "b"]


def test_written_outputs_get_ordinary_permissions(tmp_path):
    """converter.write_atomic: the content lands in one rename and the file is 0666 less the umask, not 0600."""
    import os
    import stat
    from converter import write_atomic
    old = os.umask(0o022)
    try:
        target = tmp_path / "deep" / "out.rtask.cu"
        write_atomic(target, "x\n")
        write_atomic(target, "y\n")
    finally:
        os.umask(old)
    assert target.read_text() == "y\n"
    assert stat.S_IMODE(target.stat().st_mode) == 0o644
    assert [p.name for p in target.parent.iterdir()] == ["out.rtask.cu"]
