"""How many vEUs fit on one SM: the arithmetic of cudaOccupancyMaxActiveBlocksPerMultiprocessor applied to ptxas'
figures for the interpreter, so a build without a GPU picks the same vEU count a GPU would allow, and the choice
of `__launch_bounds__(threads, vEUs per SM)` that gives the most co-resident vEUs with no spills.

The figures come from the module the runtime will load (issue 28): NVRTC with the runtime's own options
(vdevice.gpu.runtime_options, compiled by vdevice.nvrtc as the runtime compiles it) wherever libnvrtc loads; nvcc's
ptxas only where it does not (then the runtime's occupancy check and launch-what-fits cover a difference)."""
from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable


@dataclass(frozen=True)
class SmLimits:
    """Per-SM resources of one GPU architecture (the figures the CUDA occupancy calculator uses)."""

    name: str
    sms: int
    regs_per_sm: int
    regs_per_block: int
    reg_alloc_unit: int  # registers are given to a warp in units of this many
    sub_partitions: int  # each has its own register file; warps are spread over them round-robin
    max_threads_per_sm: int
    max_threads_per_block: int
    max_blocks_per_sm: int
    smem_per_sm: int  # bytes, the largest shared-memory carve-out
    smem_per_block: int  # bytes a block may opt in to
    smem_reserved_per_block: int  # bytes the driver keeps per resident block
    smem_alloc_unit: int
    warp: int = 32


# Compute capability 9.0 (H100 SXM): CUDA C++ Programming Guide, "Compute Capabilities", Table 21 (technical
# specifications per compute capability: 64 K registers/SM and /block, 2048 threads and 32 blocks per SM, 228 KB
# shared memory per SM of which 227 KB per block) and the occupancy calculator's allocation units (registers per
# warp in units of 256, 4 sub-partitions, shared memory in units of 128 bytes, 1 KB reserved per block since sm_80).
# 132 SMs: results/h100-2026-11-23/device.txt.
SM90 = SmLimits(name="sm_90 (H100)", sms=132, regs_per_sm=65536, regs_per_block=65536, reg_alloc_unit=256,
                sub_partitions=4, max_threads_per_sm=2048, max_threads_per_block=1024, max_blocks_per_sm=32,
                smem_per_sm=228 * 1024, smem_per_block=227 * 1024, smem_reserved_per_block=1024, smem_alloc_unit=128)


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


def blocks_per_sm(threads: int, registers: int, smem_bytes: int, sm: SmLimits = SM90) -> Occupancy:
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
    """The vEUs per SM a build uses, and the figures it was chosen from."""

    veus_per_sm: int
    usage: Usage
    occupancy: Occupancy
    tried: tuple[tuple[int, Usage, Occupancy], ...]

    def describe(self) -> str:
        """One line for the build log and report."""
        tried = "; ".join(f"bounds {k}: {u.registers} regs, {u.spill_bytes} B spilled, {o}" for k, u, o in self.tried)
        return f"{self.veus_per_sm} vEU(s) per SM by {self.usage.compiler} ({tried})"


def choose_veus_per_sm(compile_with: Callable[[int], Usage], threads: int, smem_bytes: int, sm: SmLimits = SM90,
                       most: int = 4) -> Choice:
    """The most vEUs per SM (at most `most`) for which ptxas, told to fit that many by __launch_bounds__, spills
    nothing and the occupancy arithmetic confirms they are co-resident; 1 when none does (a vEU always fits one
    per SM or the program is refused at launch)."""
    tried = []
    for k in range(most, 0, -1):
        usage = compile_with(k)
        occ = blocks_per_sm(threads, usage.registers, smem_bytes + usage.static_smem, sm)
        tried.append((k, usage, occ))
        if usage.spill_bytes == 0 and occ.blocks >= k:
            return Choice(k, usage, occ, tuple(tried))
    k, usage, occ = tried[-1]
    return Choice(1, usage, occ, tuple(tried))


def interpreter_usage(source: str, include_dirs: list[str] | tuple[str, ...], arch: str = "sm_90") -> Usage:
    """Registers, spills and static shared memory of the interpreter in a generated module as the GPU runtime
    will load it: NVRTC with the runtime's options when libnvrtc loads (nvrtc_usage), else nvcc's ptxas."""
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


def smem_share(veus_per_sm: int, sm: SmLimits = SM90) -> int:
    """The most shared memory (static + dynamic) each of `veus_per_sm` co-resident vEUs may use: the SM's carve-out
    split k ways in the allocation unit, less the driver's per-block reservation, and at most what one block may opt
    in to (blocks_per_sm's arithmetic inverted; 227 KB, 113 KB, 75 KB, 56 KB for 1-4 on sm_90)."""
    split = sm.smem_per_sm // max(1, veus_per_sm) // sm.smem_alloc_unit * sm.smem_alloc_unit
    return max(0, min(sm.smem_per_block, split - sm.smem_reserved_per_block))


def register_budget(threads: int, smem_bytes: int, veus_per_sm: int, sm: SmLimits = SM90) -> int:
    """The most registers per thread with which `veus_per_sm` vEUs of `threads` threads and `smem_bytes` shared
    memory each stay co-resident on one SM (0 when no register count allows it)."""
    for regs in range(255, 0, -1):  # ptxas gives a thread at most 255
        if blocks_per_sm(threads, regs, smem_bytes, sm).blocks >= veus_per_sm:
            return regs
    return 0


def instantiation_usage(ops: Sequence[Any], texts: Mapping[str, str], arch: str = "sm_90",
                        cache: Path | None = None) -> dict[str, Usage]:
    """ptxas' figures (interpreter_usage: the runtime's compiler) for an interpreter holding only one rKernel
    instantiation, unbounded, per kernel expression the ops launch (the interpreter's registers are the max over
    its instantiations, so this is what each one costs). Cached by the generated source's digest and the compiler,
    as profiles are (NVRTC or nvcc needed for what the cache lacks)."""
    from toolchain.cache import cache_dir, content_key
    from toolchain.cxx import kernel_expr

    from .codegen import generate

    path = (cache or cache_dir("registers")) / f"{arch}-usage.json"  # {digest: [registers, spill bytes, smem]}
    known: dict[str, list[int]] = json.loads(path.read_text()) if path.is_file() else {}
    out: dict[str, Usage] = {}
    tag = usage_compiler()
    for op in ops:
        expr = kernel_expr(op.kernel.wrapper_name, op.kernel.template_args)
        if expr in out:
            continue
        gen = generate([op], texts)
        key = content_key(gen.source, arch, tag)
        if not (isinstance(known.get(key), list) and len(known[key]) == 3):  # absent, or written by another version
            u = interpreter_usage(gen.source, gen.include_dirs, arch)
            known[key] = [u.registers, u.spill_bytes, u.static_smem]
        out[expr] = Usage(*known[key], compiler=tag)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(known, indent=1, sort_keys=True))
    tmp.replace(path)
    return out


def device_layout_sizes(ops: Sequence[Any], texts: Mapping[str, str], arch: str = "sm_90") -> list[int]:
    """The vEU header and each instantiation's aligned layout bytes as the device compiler lays them out (the
    figures LAYOUT_QUERY reports at run time, in generate(ops, texts)'s instantiation order), read from the PTX of
    codegen.layout_table_source: the converted layouts live in dynamic shared memory, which ptxas' figures leave
    out (nvcc needed)."""
    import re
    import tempfile

    from toolchain.nvcc import nvcc_compile

    from .codegen import LAYOUT_TABLE, generate, layout_table_source

    with tempfile.TemporaryDirectory(prefix="rt-layouts-") as tmp:
        src, ptx = Path(tmp) / "layouts.cu", Path(tmp) / "layouts.ptx"
        src.write_text(layout_table_source(ops, texts))
        proc = nvcc_compile(src, ptx, arch, include_dirs=list(generate(ops, texts).include_dirs), phase="--ptx")
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
