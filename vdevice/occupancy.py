"""How many vEUs fit on one SM: the arithmetic of cudaOccupancyMaxActiveBlocksPerMultiprocessor applied to ptxas'
figures for the interpreter, so a build without a GPU picks the same vEU count a GPU would allow, and the choice
of `__launch_bounds__(threads, vEUs per SM)` that gives the most co-resident vEUs with no spills.

The figures come from the module the runtime will load (issue 28): NVRTC with the runtime's own options
(vdevice.gpu.runtime_options, compiled by vdevice.nvrtc as the runtime compiles it) wherever libnvrtc loads; nvcc's
ptxas only where it does not (then the runtime's occupancy check and launch-what-fits cover a difference)."""
from __future__ import annotations

import json
import os
import threading
from concurrent.futures import Future, ThreadPoolExecutor
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from toolchain.cache import cache_dir, content_key

from .target import H100, Device


@dataclass(frozen=True)
class Occupancy:
    """Resident blocks per SM for one kernel configuration and the limit that binds."""

    blocks: int
    limit: str  # threads | blocks | registers | shared memory

    def __str__(self) -> str:
        return f"{self.blocks} per SM (limited by {self.limit})"


def _ceil_to(n: int, unit: int) -> int:
    """n rounded up to a multiple of unit."""
    return -(-n // unit) * unit


def blocks_per_sm(threads: int, registers: int, smem_bytes: int, sm: Device = H100) -> Occupancy:
    """Blocks of `threads` threads, `registers` per thread and `smem_bytes` (static + dynamic) shared memory that
    one SM holds at once: the minimum of the thread, block, register and shared-memory limits."""
    warps = -(-threads // sm.warp)
    if threads < 1 or threads > sm.max_threads_per_block or smem_bytes > sm.smem_per_block:
        return Occupancy(0, "threads" if threads > sm.max_threads_per_block or threads < 1 else "shared memory")
    limits = {"threads": sm.max_threads_per_sm // (warps * sm.warp), "blocks": sm.max_blocks_per_sm}
    per_warp = _ceil_to(max(1, registers) * sm.warp, sm.reg_alloc_unit)
    if per_warp * warps > sm.regs_per_block:
        return Occupancy(0, "registers")
    warps_per_partition = sm.regs_per_sm // sm.sub_partitions // per_warp
    limits["registers"] = warps_per_partition * sm.sub_partitions // warps
    per_block = _ceil_to(smem_bytes + sm.smem_reserved_per_block, sm.smem_alloc_unit)
    if per_block:
        limits["shared memory"] = sm.smem_per_sm // per_block
    limit = min(limits, key=lambda k: limits[k])
    return Occupancy(limits[limit], limit)


@dataclass(frozen=True)
class Usage:
    """ptxas' figures for the interpreter under one `__launch_bounds__`."""

    registers: int
    spill_bytes: int  # spill stores + loads
    static_smem: int
    compiler: str = "nvcc"  # what produced the figures: "NVRTC 13.5" (the runtime's compiler) or "nvcc"


@dataclass(frozen=True)
class Choice:
    """The vEUs per SM a build uses, and the figures it was chosen from (`capped`: ptxas allows no more than
    `veus_per_sm`, and counts that low were not compiled)."""

    veus_per_sm: int
    usage: Usage
    occupancy: Occupancy
    tried: tuple[tuple[int, Usage, Occupancy], ...]
    capped: bool = False

    def describe(self) -> str:
        """One line for the build log and report."""
        tried = "; ".join(f"bounds {k}: {u.registers} regs, {u.spill_bytes} B spilled, {o}" for k, u, o in self.tried)
        return (f"{'at most ' if self.capped else ''}{self.veus_per_sm} vEU(s) per SM by {self.usage.compiler} "
                f"({tried or 'none compiled'})")


def choose_veus_per_sm(compile_with: Callable[[int], Usage], threads: int, smem_bytes: int, sm: Device = H100,
                       most: int = 4, floor: int = 0) -> Choice:
    """The most vEUs per SM (at most `most`) for which ptxas, told to fit that many by __launch_bounds__, spills
    nothing and the occupancy arithmetic confirms they are co-resident; 1 when none does (a vEU always fits one
    per SM or the program is refused at launch). A count the threads or shared memory alone rule out (with the
    fewest registers) is not compiled, nor one at or below `floor` (a count the caller cannot use: the choice is
    then `floor`, capped)."""
    tried = []
    counts = feasible_counts(threads, smem_bytes, most, sm)
    for k in range(most, floor, -1):
        if k not in counts:
            continue
        usage = compile_with(k)
        occ = blocks_per_sm(threads, usage.registers, smem_bytes + usage.static_smem, sm)
        tried.append((k, usage, occ))
        if usage.spill_bytes == 0 and occ.blocks >= k:
            return Choice(k, usage, occ, tuple(tried))
    if floor:
        k, usage, occ = tried[-1] if tried else (floor, Usage(0, 0, 0), Occupancy(0, "shared memory"))
        return Choice(floor, usage, occ, tuple(tried), capped=True)
    k, usage, occ = tried[-1]
    return Choice(1, usage, occ, tuple(tried))


def feasible_counts(threads: int, smem_bytes: int, most: int, sm: Device = H100) -> list[int]:
    """The vEUs per SM choose_veus_per_sm may compile, most first: those the threads and shared memory allow."""
    return [k for k in range(most, 0, -1) if k == 1 or blocks_per_sm(threads, 1, smem_bytes, sm).blocks >= k]


def interpreter_usage(source: str, include_dirs: list[str] | tuple[str, ...], arch: str = "sm_90",
                      cache: Path | None = None) -> Usage:
    """Registers, spills and static shared memory of the interpreter in a generated module as the GPU runtime will
    load it: NVRTC with the runtime's options when libnvrtc loads (nvrtc_usage), else nvcc's ptxas (nvcc_usage);
    cached by the source's digest and the compiler (FigureCache)."""
    return interpreter_usages([source], include_dirs, arch, cache)[0]


def interpreter_usages(sources: Sequence[str], include_dirs: list[str] | tuple[str, ...], arch: str = "sm_90",
                       cache: Path | None = None) -> list[Usage]:
    """interpreter_usage of each source; what the cache lacks is compiled PTXAS_JOBS at a time (a compile already
    under way, say a prefetch, is waited for rather than started again)."""
    figures = FigureCache("usage", arch, cache)
    keys = [compile_key(src, include_dirs, arch) for src in sources]
    futures = start_compiles(figures, dict(zip(keys, sources)), include_dirs, arch, COMPILES)
    for future in futures.values():
        future.result()
    if futures:
        figures.save()
    tag = usage_compiler()
    return [_usage(figures.get(k, 3), tag) for k in keys]


def _usage(figures: list[int] | None, compiler: str) -> Usage:
    """A Usage from the cache's [registers, spill bytes, static shared bytes] (present: compiled just before)."""
    if figures is None:
        raise RuntimeError("the interpreter's figures were compiled but are not in the cache")
    registers, spills, smem = figures
    return Usage(registers, spills, smem, compiler)


def start_compiles(figures: "FigureCache", sources: Mapping[str, str], include_dirs: Sequence[str], arch: str,
                   pool: ThreadPoolExecutor) -> dict[str, Future]:
    """Futures of the compiles the cache lacks (by key), started on `pool` unless one is already under way; each
    puts its figures into the cache when done."""
    out: dict[str, Future] = {}
    with _LOCK:
        for key, source in sources.items():
            if figures.get(key, 3) is not None:
                continue
            if key not in _UNDER_WAY or _UNDER_WAY[key].cancelled():
                _UNDER_WAY[key] = pool.submit(_compile_into, figures, key, source, tuple(include_dirs), arch)
            out[key] = _UNDER_WAY[key]
    return out


def _compile_into(figures: "FigureCache", key: str, source: str, include_dirs: tuple[str, ...], arch: str) -> None:
    """One compile, its figures kept in the cache (a thread of a compile pool)."""
    try:
        u = _compile_usage(source, include_dirs, arch)
        figures.put(key, [u.registers, u.spill_bytes, u.static_smem])
    finally:
        with _LOCK:
            _UNDER_WAY.pop(key, None)


# Compiles run at once when a figure needs several (nvcc is a subprocess: threads only wait for it); one more thread
# compiles figures a search will likely ask for next while the build plans (prefetch_instantiation_usage).
PTXAS_JOBS = max(1, min(4, os.cpu_count() or 1))
COMPILES = ThreadPoolExecutor(max_workers=PTXAS_JOBS, thread_name_prefix="ptxas")
PREFETCH = ThreadPoolExecutor(max_workers=1, thread_name_prefix="ptxas-prefetch")
_UNDER_WAY: dict[str, Future] = {}
_PREFETCHED: set[Future] = set()
_LOCK = threading.Lock()


def _compile_usage(source: str, include_dirs: list[str] | tuple[str, ...], arch: str) -> Usage:
    """The interpreter's figures for one source, compiled now by the runtime's compiler where it loads."""
    from . import nvrtc

    if nvrtc.available()[0]:
        return nvrtc_usage(source, include_dirs, arch)
    return nvcc_usage(source, include_dirs, arch)


def nvrtc_usage(source: str, include_dirs: list[str] | tuple[str, ...], arch: str = "sm_90") -> Usage:
    """The interpreter compiled exactly as vdevice.gpu.GpuModule compiles it (vdevice.nvrtc, runtime_options), plus
    `-Xptxas -v`, which only makes ptxas print its figures (tests/test_vdevice.py checks the CUBIN is the same)."""
    from toolchain.ptxas import parse_ptxas

    from . import nvrtc
    from .codegen import INTERPRETER
    from .gpu import runtime_options

    try:
        out = nvrtc.compile_cubin(source, [*runtime_options(arch, include_dirs), "-Xptxas", "-v"], [INTERPRETER])
    except nvrtc.NvrtcError as exc:
        raise RuntimeError(f"NVRTC cannot compile the generated program: {exc}") from None
    entry = parse_ptxas(out.log).get(out.lowered[INTERPRETER])
    if entry is None or entry["registers"] is None:
        raise RuntimeError(f"NVRTC's ptxas reported no figures for {INTERPRETER}")
    return Usage(int(entry["registers"]), int(entry["spill_stores"]) + int(entry["spill_loads"]),
                 int(entry["static_smem_bytes"]), f"NVRTC {out.version[0]}.{out.version[1]}")


def nvcc_usage(source: str, include_dirs: list[str] | tuple[str, ...], arch: str = "sm_90") -> Usage:
    """ptxas' registers, spills and static shared memory of the interpreter compiled by nvcc (nvcc needed)."""
    from toolchain.nvcc import find_nvcc
    from toolchain.ptxas import parse_ptxas, run_ptxas

    from .codegen import INTERPRETER

    nvcc = find_nvcc()
    if nvcc is None:
        raise RuntimeError("neither libnvrtc nor nvcc found: the vEUs per SM come from the compiler's figures")
    ok, log = run_ptxas(source, nvcc, list(include_dirs), arch)
    if not ok:
        raise RuntimeError(f"nvcc cannot compile the generated program: {log}")
    for name, entry in parse_ptxas(log).items():
        if INTERPRETER in name and entry["registers"] is not None:
            return Usage(int(entry["registers"]), int(entry["spill_stores"]) + int(entry["spill_loads"]),
                         int(entry["static_smem_bytes"]))
    raise RuntimeError(f"ptxas reported no figures for {INTERPRETER}")


def usage_compiler() -> str:
    """Which compiler interpreter_usage uses here ("NVRTC 13.5" or "nvcc"): part of cache keys of its figures."""
    from . import nvrtc

    ok, what = nvrtc.available()
    return what if ok else "nvcc"


def compile_key(source: str, include_dirs: Sequence[str], arch: str) -> str:
    """What a compile's figures depend on: the source, the headers it can include, the architecture and the
    compiler (NVRTC's version, else the nvcc found)."""
    from toolchain.nvcc import find_nvcc
    tag = usage_compiler()
    return content_key(source, arch, tag, (find_nvcc() or "") if tag == "nvcc" else "",
                       *(headers_digest(d) for d in include_dirs))


def headers_digest(folder: str) -> str:
    """A digest of the headers in one include folder (re-read only when one changes)."""
    root = Path(folder)
    files = sorted(p for p in root.iterdir() if p.suffix in (".h", ".cuh", ".hpp") and p.is_file()) \
        if root.is_dir() else []
    stamp = tuple((p.name, p.stat().st_mtime_ns, p.stat().st_size) for p in files)
    hit = _HEADERS.get(folder)
    if hit is None or hit[0] != stamp:
        hit = (stamp, content_key(*(part for p in files for part in (p.name, p.read_bytes()))))
        _HEADERS[folder] = hit
    return hit[1]


_HEADERS: dict[str, tuple[tuple, str]] = {}


class FigureCache:
    """Compiler figures (lists of ints) by compile_key: in memory for the process, so a search that generates one
    source twice compiles it once, and on disk between builds ($RAMMER_CACHE/registers/<arch>-<kind>.json; writes
    are atomic renames, concurrent builds at worst compile one source twice)."""

    _memory: dict[Path, dict[str, list[int]]] = {}

    def __init__(self, kind: str, arch: str, folder: Path | None = None) -> None:
        self.path = (folder or cache_dir("registers")) / f"{arch}-{kind}.json"
        if self.path not in self._memory:
            try:
                known = json.loads(self.path.read_text()) if self.path.is_file() else {}
            except (OSError, ValueError):
                known = {}  # a damaged file is a cold cache: the figures are compiled again
            self._memory[self.path] = known if isinstance(known, dict) else {}
        self.known = self._memory[self.path]

    def get(self, key: str, size: int | None = None) -> list[int] | None:
        """The figures of a compile, or None when absent (or written by another version: not `size` ints)."""
        hit = self.known.get(key)
        ok = isinstance(hit, list) and all(isinstance(v, int) for v in hit) and size in (None, len(hit))
        return hit if ok else None

    def put(self, key: str, values: list[int]) -> None:
        """Remember one compile's figures (save writes them)."""
        self.known[key] = [int(v) for v in values]

    def save(self) -> None:
        """Write the figures, merged with what other builds wrote meanwhile."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        try:
            on_disk = json.loads(self.path.read_text()) if self.path.is_file() else {}
        except (OSError, ValueError):
            on_disk = {}
        merged = (on_disk if isinstance(on_disk, dict) else {}) | self.known
        tmp = self.path.with_name(f"{self.path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
        tmp.write_text(json.dumps(merged, indent=1, sort_keys=True))
        tmp.replace(self.path)


def register_budget(threads: int, smem_bytes: int, veus_per_sm: int, sm: Device = H100) -> int:
    """The most registers per thread with which `veus_per_sm` vEUs of `threads` threads and `smem_bytes` shared
    memory each stay co-resident on one SM (0 when no register count allows it)."""
    for regs in range(255, 0, -1):  # ptxas gives a thread at most 255
        if blocks_per_sm(threads, regs, smem_bytes, sm).blocks >= veus_per_sm:
            return regs
    return 0


def instantiation_usage(ops: Sequence[Any], texts: Mapping[str, str], arch: str = "sm_90",
                        cache: Path | None = None) -> dict[str, Usage]:
    """The figures (interpreter_usage: the runtime's compiler) of an interpreter holding only one rKernel
    instantiation, unbounded, per kernel expression the ops launch (the interpreter's registers are the max over
    its instantiations, so this is what each one costs). Cached by the generated source's digest and the compiler
    (FigureCache); what the cache lacks is compiled PTXAS_JOBS at a time (NVRTC or nvcc needed)."""
    gens = instantiation_modules(ops, texts)
    figures = FigureCache("usage", arch, cache)
    out: dict[str, Usage] = {}
    todo: dict[str, Any] = {}
    tag = usage_compiler()
    for expr, gen in gens.items():
        hit = figures.get(compile_key(gen.source, gen.include_dirs, arch), 3)
        if hit is None:
            todo[expr] = gen
        else:
            out[expr] = _usage(hit, tag)
    if todo:
        include_dirs = next(iter(todo.values())).include_dirs
        found = interpreter_usages([g.source for g in todo.values()], include_dirs, arch, cache)
        out.update(zip(todo, found))
    return {expr: out[expr] for expr in gens}


def instantiation_modules(ops: Sequence[Any], texts: Mapping[str, str]) -> dict[str, Any]:
    """Per kernel expression the ops launch, the generated module holding only it."""
    from toolchain.cxx import kernel_expr

    from .codegen import generate

    gens: dict[str, Any] = {}
    for op in ops:
        expr = kernel_expr(op.kernel.wrapper_name, op.kernel.template_args)
        if expr not in gens:
            gens[expr] = generate([op], texts)
    return gens


def prefetch_instantiation_usage(ops: Sequence[Any], texts: Mapping[str, str], arch: str = "sm_90") -> None:
    """Start compiling, on one background thread, what instantiation_usage of these ops will ask the cache for: a
    search starts it when it will likely need the figures, and plans meanwhile."""
    gens = instantiation_modules(ops, texts)
    if not gens:
        return
    figures = FigureCache("usage", arch)
    include_dirs = next(iter(gens.values())).include_dirs
    started = start_compiles(figures, {compile_key(g.source, include_dirs, arch): g.source for g in gens.values()},
                             include_dirs, arch, PREFETCH)
    _PREFETCHED.update(started.values())


def cancel_prefetch() -> None:
    """Drop the prefetches not started yet (a finished search will not ask for them; a process does not exit
    before its pools' queued work is done)."""
    with _LOCK:
        for future in _PREFETCHED:
            future.cancel()
        for key in [k for k, f in _UNDER_WAY.items() if f.cancelled()]:
            del _UNDER_WAY[key]
        _PREFETCHED.clear()


def device_layout_sizes(ops: Sequence[Any], texts: Mapping[str, str], arch: str = "sm_90",
                        cache: Path | None = None) -> list[int]:
    """The vEU header and each instantiation's aligned layout bytes as the device compiler lays them out (the
    figures LAYOUT_QUERY reports at run time, in generate(ops, texts)'s instantiation order), read from the PTX of
    codegen.layout_table_source: the converted layouts live in dynamic shared memory, which ptxas' figures leave
    out. Each instantiation's size depends on its own source only, so it is cached on its own (FigureCache) and
    only instantiations the cache lacks are compiled (nvcc needed for them)."""
    from .codegen import generate, layout_table_source

    gen = generate(ops, texts)
    figures = FigureCache("layout-sizes", arch, cache)
    header = content_key("vEU header", arch, *(headers_digest(d) for d in gen.include_dirs))
    keys = layout_keys(ops, texts, gen, header)
    missing = [i for i, key in enumerate(keys) if figures.get(key, 1) is None]
    if missing or figures.get(header, 1) is None:
        first = dict(reversed([(i, j) for j, i in enumerate(gen.op_kernel)]))
        sub = [ops[first[i]] for i in missing] or list(ops[:1])
        sub_gen = generate(sub, texts)
        sizes = _layout_sizes_now(layout_table_source(sub, texts), gen.include_dirs, arch)
        figures.put(header, sizes[:1])
        for key, size in zip(layout_keys(sub, texts, sub_gen, header), sizes[1:]):
            figures.put(key, [size])
        figures.save()
    return [(figures.get(key, 1) or [0])[0] for key in [header, *keys]]


def layout_keys(ops: Sequence[Any], texts: Mapping[str, str], gen: Any, header: str) -> list[str]:
    """The cache key of each instantiation's layout size: its source, rKernel, layout and template arguments."""
    first = dict(reversed([(i, j) for j, i in enumerate(gen.op_kernel)]))
    return [content_key(header, texts[ops[first[i]].kernel.source_id], inst.rkernel, str(inst.layout),
                        repr(inst.template_args)) for i, inst in enumerate(gen.instantiations)]


def _layout_sizes_now(source: str, include_dirs: Sequence[str], arch: str) -> list[int]:
    """device_layout_sizes of one layout-table source, compiled now."""
    import re
    import tempfile

    from toolchain.nvcc import nvcc_compile

    from .codegen import LAYOUT_TABLE

    with tempfile.TemporaryDirectory(prefix="rt-layouts-") as tmp:
        src, ptx = Path(tmp) / "layouts.cu", Path(tmp) / "layouts.ptx"
        src.write_text(source)
        proc = nvcc_compile(src, ptx, arch, include_dirs=list(include_dirs), phase="--ptx")
        if proc.returncode != 0:
            raise RuntimeError(f"nvcc cannot compile the program's layouts: {(proc.stderr or proc.stdout).strip()}")
        text = ptx.read_text()
    m = re.search(rf"\.(b8|u64|b64)\s+{LAYOUT_TABLE}\[(\d+)\]\s*=\s*\{{([^}}]*)\}}", text)
    if m is None:
        raise RuntimeError(f"the PTX of the program's layouts has no {LAYOUT_TABLE} initialiser")
    listed = [int(v) for v in m.group(3).split(",")]
    values = listed + [0] * (int(m.group(2)) - len(listed))  # nvcc leaves trailing zeros out of the initialiser
    if m.group(1) == "b8":  # an initialised array is written as little-endian bytes
        return [int.from_bytes(bytes(values[i:i + 8]), "little") for i in range(0, len(values), 8)]
    return values
