"""One persistent interpreter kernel per module: code size follows distinct rKernels, rTasks live in tables."""
from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Mapping, Sequence

import numpy as np

from toolchain.cxx import template_arg_text

from .counters import Counters, group_waits
from .program import KernelRef, Op, Program, ProgramError, Run, check_resident, resident_bytes, used_ops
from .tables import (INSTR, TARGET, VD_NAMED, VD_PREPARE, VD_RESIDENT, VD_WAIT, c_declarations, pack_block,
                     pack_grid_yz)

INCLUDE_DIR = Path(__file__).resolve().parent / "include"
INTERPRETER = "vd_interpreter"
LAYOUT_QUERY = "vd_layout_sizes"
GENERATED_NAME = "vd_generated.cu"
_LINE_MARK = "//@@vd-line@@"
WARP = 32

_INCLUDE_RE = re.compile(r'^[ \t]*#[ \t]*include[ \t]*([<"][^>"]+[>"])', re.MULTILINE)
_PRAGMA_ONCE_RE = re.compile(r"^[ \t]*#[ \t]*pragma[ \t]+once\b.*$", re.MULTILINE)
_OWN_HEADERS = {'"rtask_runtime.cuh"', "<rtask_runtime.cuh>", '"vdevice_runtime.cuh"'}


@dataclass(frozen=True)
class Instantiation:
    """One distinct rKernel instantiation: the unit of generated code."""

    namespace: str
    rkernel: str
    layout: str | None
    template_args: tuple
    wrapper: str
    may_exit_early: bool = True  # the rKernel body has a `return` (or could not be found): keep the mbarrier
    reduces: bool = True  # the source uses __syncthreads_count/and/or: the reduction slots need resetting
    layout_offset: int | None = None  # the same for every launch of it in the module: a compile-time constant
    named: bool | None = None  # every launch of it synchronises with the named barrier (True) or none does (False)

    def _targs(self) -> str:
        """`<a, b>` or '' when the rKernel is not a template."""
        return f"<{', '.join(_template_arg(a) for a in self.template_args)}>" if self.template_args else ""

    def _qualified(self, name: str) -> str:
        """Name inside the source's namespace, in the rKernel's own C++ namespace when it has one."""
        if "::" not in name and "::" in self.rkernel:
            name = f"{self.rkernel.rsplit('::', 1)[0]}::{name}"
        return f"{self.namespace}::{name}{self._targs()}"

    @property
    def rtask_expr(self) -> str:
        """The qualified K__rtask instantiation."""
        return self._qualified(self.rkernel)

    @property
    def wrapper_expr(self) -> str:
        """The qualified plain __global__ wrapper (one block per rTask)."""
        return self._qualified(self.wrapper)

    @property
    def layout_expr(self) -> str | None:
        """The qualified shared-memory layout struct, or None when the rKernel has no static shared memory."""
        return self._qualified(self.layout.split("<", 1)[0].strip()) if self.layout else None


def _template_arg(value: object) -> str:
    """C++ spelling of one template argument: ints, bools, or type/expression strings (others are refused)."""
    if isinstance(value, (bool, np.bool_)):
        return template_arg_text(bool(value))
    if isinstance(value, (int, np.integer)):
        return template_arg_text(int(value))
    if isinstance(value, str) and value.strip():
        return template_arg_text(value.strip())
    raise ProgramError(f"unsupported template argument {value!r}: use ints, bools or C++ type strings")


@dataclass(frozen=True)
class GeneratedModule:
    """The generated source and how ops map onto its rKernel instantiations."""

    source: str
    instantiations: tuple[Instantiation, ...]
    op_kernel: tuple[int, ...]
    include_dirs: tuple[str, ...]

    @property
    def kernel_names(self) -> list[str]:
        """Every __global__ a backend must export: interpreter, layout query, distinct wrappers."""
        wrappers = dict.fromkeys(inst.wrapper_expr for inst in self.instantiations)
        return [INTERPRETER, LAYOUT_QUERY, *wrappers]


def generate(ops: Sequence[Op], sources: Mapping[str, str], include_dirs: Sequence[str] = (),
             catalog: Sequence[KernelRef] = (), veus_per_sm: int = 1) -> GeneratedModule:
    """Emit one translation unit: each source in its own namespace, one switch over distinct instantiations.

    `catalog` adds instantiations no op uses yet, so one module (and one compile) serves many programs.
    `veus_per_sm` goes into the interpreter's __launch_bounds__ (ptxas then keeps registers low enough for that
    many vEUs of the largest rTask's threads per SM; see vdevice.occupancy). The text depends only on the set of
    instantiations, their block sizes and veus_per_sm, never on grids, rTask counts or op order."""
    kernels = [op.kernel for op in ops] + list(catalog)
    namespaces = _namespaces(kernels, sources)
    kernel_keys = _keys(kernels, sources)
    by_key = {key: k for key, k in zip(reversed(kernel_keys), reversed(kernels))}
    keys = sorted(by_key, key=repr)
    launches: dict[tuple, list[KernelRef]] = {}
    for key, k in zip(kernel_keys, kernels):
        launches.setdefault(key, []).append(k)
    insts = tuple(_instantiation(namespaces[key[0]], key, by_key[key].wrapper_name, sources[key[0]], launches[key])
                  for key in keys)
    index = {key: i for i, key in enumerate(keys)}
    text = _restore_line_numbers("\n".join([
        f"// generated by vdevice.codegen: {len(insts)} rKernel instantiations from {len(namespaces)} sources",
        *_module_prelude(namespaces, sources),
        _dispatch(insts),
        _interpreter(_align_warp(max(k.threads for k in kernels)) if kernels else WARP, veus_per_sm),
        _layout_query(insts),
    ]))
    dirs = (str(INCLUDE_DIR), *(str(d) for d in include_dirs))
    return GeneratedModule(text, insts, tuple(index[key] for key in kernel_keys[:len(ops)]), dirs)


def _module_prelude(namespaces: Mapping[str, str], sources: Mapping[str, str]) -> list[str]:
    """The runtime headers and every rKernel source in its namespace: what a module declares before its code."""
    return ['#include "rtask_runtime.cuh"', c_declarations(), '#include "vdevice_runtime.cuh"',
            *_hoisted_includes(sources[s] for s in namespaces),
            *(_wrapped_source(sid, ns, sources[sid]) for sid, ns in namespaces.items())]


LAYOUT_TABLE = "vd_layout_table"


def layout_table_source(ops: Sequence[Op], sources: Mapping[str, str]) -> str:
    """A translation unit holding only the module's declarations and `vd_layout_table`, a device array of the vEU
    header and each instantiation's aligned layout bytes (what LAYOUT_QUERY reports at run time, in the order of
    generate(ops, sources).instantiations): compiled to PTX it gives the device compiler's own sizes without a GPU
    (vdevice.occupancy.device_layout_sizes)."""
    namespaces = _namespaces([op.kernel for op in ops], sources)
    sizes = _layout_size_exprs(generate(ops, sources).instantiations)
    return "\n".join([*_module_prelude(namespaces, sources),
                      f"__device__ vd::u64 {LAYOUT_TABLE}[{len(sizes)}] = {{{', '.join(sizes)}}};"])


def _keys(kernels: Sequence[KernelRef], sources: Mapping[str, str]) -> list[tuple]:
    """_key of each kernel, worked out once per distinct instantiation (it may search the source)."""
    memo: dict[tuple, tuple] = {}
    return [memo.get(k.instantiation()) or memo.setdefault(k.instantiation(), _key(k, sources)) for k in kernels]


def _key(kernel: KernelRef, sources: Mapping[str, str]) -> tuple:
    """Instantiation key with the layout filled in by the converter's naming (K__rt_shared) when not given."""
    source_id, rkernel, layout, targs = kernel.instantiation()
    if layout is None:
        base = rkernel.rsplit("::", 1)[-1]
        base = base[: -len("__rtask")] if base.endswith("__rtask") else base
        if re.search(rf"\bstruct\s+{re.escape(base)}__rt_shared\b", sources[source_id]):
            layout = f"{base}__rt_shared"
    return source_id, rkernel, layout, targs


def _instantiation(namespace: str, key: tuple, wrapper: str, source: str, launches: list[KernelRef]) -> Instantiation:
    """One instantiation, with what every launch of it in the module agrees on (compile-time constants)."""
    exits, reduces = _body_traits(source, key[1])
    offsets = {_align16(k.dynamic_smem) for k in launches}
    named = {k.threads % WARP == 0 and not exits for k in launches}
    return Instantiation(namespace, key[1], key[2], key[3], wrapper, exits, reduces,
                         offsets.pop() if len(offsets) == 1 else None, named.pop() if len(named) == 1 else None)


def uses_named_barrier(kernel: KernelRef, inst: Instantiation) -> bool:
    """Whether rTasks of this launch synchronise with bar.sync: whole warps and no early exit."""
    return kernel.threads % WARP == 0 and not inst.may_exit_early


_COMMENT_RE = re.compile(r"//[^\n]*|/\*.*?\*/", re.DOTALL)
_REDUCTION_RE = re.compile(r"\b(sync_count|sync_and|sync_or|live_count|__syncthreads_count|__syncthreads_and|"
                           r"__syncthreads_or|RT_SHADOW_INTRINSICS)\b")


def _body_traits(source: str, rkernel: str) -> tuple[bool, bool]:
    """(may the rKernel's threads leave early, does its source reduce over the block): what decides whether its
    rTasks can synchronise with a named bar.sync and skip setting up the vEU's TaskSlot. Conservative: a body
    that cannot be found, or any `return` in it, counts as an early exit."""
    text = _COMMENT_RE.sub(" ", source)
    reduces = bool(_REDUCTION_RE.search(text))
    name = re.escape(rkernel.rsplit("::", 1)[-1])
    for m in re.finditer(rf"\b{name}\s*\(", text):
        body = _definition_body(text, m.end() - 1)
        if body is not None:
            return bool(re.search(r"\breturn\b", body)), reduces
    return True, reduces


def _definition_body(text: str, open_paren: int) -> str | None:
    """The `{...}` body after the parameter list opening at `open_paren`, or None for a call or declaration."""
    depth, i = 0, open_paren
    while i < len(text):
        depth += {"(": 1, ")": -1}.get(text[i], 0)
        i += 1
        if depth == 0:
            break
    rest = text[i:].lstrip()
    if not rest.startswith("{"):
        return None
    start = len(text) - len(rest)
    depth = 0
    for j in range(start, len(text)):
        depth += {"{": 1, "}": -1}.get(text[j], 0)
        if depth == 0:
            return text[start + 1:j]
    return None


def _namespaces(kernels: Sequence[KernelRef], sources: Mapping[str, str]) -> dict[str, str]:
    """source_id -> namespace, sorted by id; every used source must be given."""
    used = sorted({k.source_id for k in kernels})
    for sid in used:
        if sid not in sources:
            raise ProgramError(f"rKernel source '{sid}' not given (have {sorted(sources)})")
    return {sid: f"vd_s{i}" for i, sid in enumerate(used)}


def _hoisted_includes(texts) -> list[str]:
    """Every #include of the sources, once, at global scope (so namespaces never wrap a header)."""
    seen: dict[str, None] = {}
    for text in texts:
        for target in _INCLUDE_RE.findall(text):
            if target not in _OWN_HEADERS:
                seen.setdefault(f"#include {target}")
    return list(seen)


def _wrapped_source(source_id: str, namespace: str, text: str) -> str:
    """The source in its namespace, include and pragma-once lines blanked, line numbers kept for diagnostics."""
    body = _PRAGMA_ONCE_RE.sub("", _INCLUDE_RE.sub("", text))
    name = source_id.replace("\\", "/").replace('"', "")
    return f'namespace {namespace} {{\n#line 1 "{name}"\n{body}\n{_LINE_MARK}\n}}  // namespace {namespace}'


def _restore_line_numbers(text: str) -> str:
    """After each embedded source, point diagnostics back at the generated file's own lines."""
    lines = text.split("\n")
    for number, line in enumerate(lines, start=1):
        if line == _LINE_MARK:
            lines[number - 1] = f'#line {number + 1} "{GENERATED_NAME}"'
    return "\n".join(lines)


def _dispatch(insts: Sequence[Instantiation]) -> str:
    """The switch over distinct rKernel instantiations. What the module knows about an instantiation is written
    into its case as a constant (its layout's offset, which barrier it uses), so the inlined body sees a
    16-byte-aligned layout at a fixed offset in shared memory and no run-time choice of barrier."""
    cases = "\n".join(f"      case {k}u: {{{_known(inst)} vd::invoke<&{inst.rtask_expr}>(t, a); break; }}"
                      for k, inst in enumerate(insts))
    return ("struct vd_dispatch {\n"
            "  __device__ __forceinline__ void operator()(unsigned kid, rt::Task& t, const vd::u64* a) const {\n"
            "    switch (kid) {\n" + cases + "\n      default: break;\n    }\n  }\n};")


def _known(inst: Instantiation) -> str:
    """Assignments that turn the Task's run-time fields into constants for one case."""
    known = "" if inst.layout_offset is None else f" t.smem = t.dyn_smem + {inst.layout_offset}u;"
    barrier = "rt::RT_NAMED" if inst.named else "rt::RT_MBARRIER"
    return known + ("" if inst.named is None else f" t.named = {barrier};")


def _align_warp(threads: int) -> int:
    """Threads rounded up to whole warps (a vEU's size)."""
    return (threads + WARP - 1) // WARP * WARP


def _interpreter(max_threads: int, veus_per_sm: int) -> str:
    """The persistent __global__: one vEU per block, interpreting its instruction list."""
    if veus_per_sm < 1:
        raise ProgramError(f"veus_per_sm must be >= 1, got {veus_per_sm}")
    return (f"__global__ void __launch_bounds__({max_threads}, {veus_per_sm})\n"
            f"{INTERPRETER}(const vd::Instr* __restrict__ instr,\n"
            "    const unsigned* __restrict__ veu_begin, const vd::Target* __restrict__ targets,\n"
            "    const vd::u64* __restrict__ argtab, unsigned* counters, unsigned* progress, unsigned* err,\n"
            "    unsigned run, unsigned ctl_offset, vd::u64 budget) {\n"
            "  vd::interpret(instr, veu_begin, targets, argtab, counters, progress, err, run, ctl_offset, budget,\n"
            "                vd_dispatch{});\n}")


def _layout_size_exprs(insts: Sequence[Instantiation]) -> list[str]:
    """C++ expressions of the vEU header bytes and each instantiation's aligned layout bytes, in that order."""
    return ["vd::kHeaderBytes"] + [f"vd::layout_bytes<{inst.layout_expr}>()" if inst.layout_expr else "0"
                                  for inst in insts]


def _layout_query(insts: Sequence[Instantiation]) -> str:
    """A one-thread kernel reporting the vEU header and each instantiation's aligned layout size."""
    lines = [f"  out[{k}] = {expr};" for k, expr in enumerate(_layout_size_exprs(insts))]
    return f"__global__ void {LAYOUT_QUERY}(vd::u64* out) {{\n" + "\n".join(lines) + "\n}"


# ---- tables ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ProgramTables:
    """Device-memory tables of one program for the interpreter, and what the host needs to read its results."""

    instr: np.ndarray
    veu_begin: np.ndarray
    targets: np.ndarray
    num_veus: int
    threads: int
    counters: Counters
    regions: tuple[tuple[int, int], ...]  # (instantiation, layout offset) of every op the program runs
    resident_bytes: int = 0  # each vEU's resident region (its largest resident slice), after the control block

    @property
    def max_count(self) -> int:
        """The largest per-run increment of a counter (bounds the runs before the counters would overflow)."""
        return max([1, *self.counters.sizes])

    @property
    def num_counters(self) -> int:
        """Counters to allocate (at least one: never a zero-size device allocation)."""
        return max(1, len(self.counters.members))

    def smem_bytes(self, layout_sizes: Sequence[int]) -> tuple[int, int]:
        """(dynamic shared bytes per vEU, offset of the vEU control block).

        Per rTask: its dynamic bytes, then its layout at align16(dynamic); the control block (rt::TaskSlot and
        the barrier flags, layout_sizes[0] bytes) follows the largest such region, and the resident region
        (docs/ARCHITECTURE.md §7) follows the control block."""
        return veu_smem_bytes(self.regions, layout_sizes, self.resident_bytes)


def veu_smem_bytes(regions: Sequence[tuple[int, int]], layout_sizes: Sequence[int],
                   resident: int) -> tuple[int, int]:
    """(dynamic shared bytes per vEU, offset of its control block) for rTask regions (instantiation, layout offset),
    LAYOUT_QUERY's sizes and the resident region's bytes: the one formula the executors and the build use."""
    region = max((offset + int(layout_sizes[kernel + 1]) for kernel, offset in regions), default=0)
    ctl_offset = _align16(region)
    return ctl_offset + int(layout_sizes[0]) + resident, ctl_offset


def program_regions(program: Program, module: GeneratedModule,
                    ops_run: Sequence[int] | None = None) -> tuple[tuple[int, int], ...]:
    """(instantiation, layout offset) of every op the program runs (`ops_run`, else read from its vEUs)."""
    used = ops_run if ops_run is not None else used_ops(program)
    return tuple(sorted({(module.op_kernel[i], _align16(program.ops[i].kernel.dynamic_smem)) for i in used}))


def _align16(n: int) -> int:
    """Round up to a multiple of 16 bytes."""
    return (n + 15) // 16 * 16


def encode(program: Program, module: GeneratedModule, argtab: "ArgTable") -> ProgramTables:
    """Flatten a program into the interpreter's tables: one Instr record per instruction (vdevice/tables.py), the
    counters each wait polls, and for each awaited rTask the counter it publishes to."""
    check_resident(program)
    counters = group_waits(program)
    instr: list[dict[str, int]] = []
    targets: list[dict[str, int]] = []
    begin = [0]
    used_ops: set[int] = set()
    nwait = 0
    for v, instrs in enumerate(program.veus):
        order = 0
        for item in instrs:
            if isinstance(item, Run):
                counter = counters.of_step.get((v, order))
                instr.append(_run_record(program.ops[item.task.op], item.task.rtask, module, argtab, item.task.op,
                                         0 if counter is None else counter + 1))
                used_ops.add(item.task.op)
                order += 1
                continue
            polled = counters.waits[nwait]
            nwait += 1
            instr.append({"code": VD_WAIT, "a": len(targets), "b": len(polled), "publish": 0,
                          "grid_x": polled[0] if polled else 0, "grid_yz": counters.sizes[polled[0]] if polled else 0,
                          "block": 0, "layout_offset": 0})
            targets.extend({"counter": c, "count": counters.sizes[c]} for c in polled)
        begin.append(len(instr))
    pad = {name: 0 for name in INSTR.names}  # read by the one-ahead fetch after the last vEU's last instruction
    threads = max((program.ops[i].kernel.threads for i in used_ops), default=1)
    regions = program_regions(program, module, sorted(used_ops))
    return ProgramTables(
        instr=INSTR.pack([*instr, pad]), veu_begin=np.asarray(begin, dtype=np.uint32), targets=TARGET.pack(targets),
        num_veus=program.num_veus, threads=_align_warp(threads), counters=counters, regions=regions,
        resident_bytes=resident_bytes(program))


def _run_record(op: Op, rtask: int, module: GeneratedModule, argtab: "ArgTable", index: int,
                publish: int) -> dict[str, int]:
    """The Instr of one rTask: everything its dispatch needs in one 32-byte row."""
    (gx, gy, gz), (bx, by, bz) = op.kernel.grid, op.kernel.block
    kernel = module.op_kernel[index]
    inst = module.instantiations[kernel]
    named = uses_named_barrier(op.kernel, inst)
    code = kernel | (VD_NAMED if named else 0) | (VD_PREPARE if not named or inst.reduces else 0) | \
        (VD_RESIDENT if op.resident else 0)
    return {"code": code, "a": rtask, "b": argtab.offsets[index], "publish": publish, "grid_x": gx,
            "grid_yz": pack_grid_yz(gy, gz), "block": pack_block(bx, by, bz),
            "layout_offset": _align16(op.kernel.dynamic_smem)}


@dataclass(frozen=True)
class ArgTable:
    """Argument slots of all ops: scalars fixed at build, buffer pointers filled per backend/run."""

    base: np.ndarray
    pointer_slots: tuple[tuple[int, str], ...]
    offsets: tuple[int, ...]

    @staticmethod
    def build(ops: Sequence[Op]) -> "ArgTable":
        """Lay out 8-byte slots op after op."""
        offsets, slots, values = [], [], []  # type: list[int], list[tuple[int, str]], list[int]
        for op in ops:
            offsets.append(len(values))
            for arg in op.args:
                if arg.buffer is not None:
                    slots.append((len(values), arg.buffer))
                    values.append(0)
                else:
                    values.append(scalar_bits(arg.dtype, arg.value))
        base = np.zeros(max(1, len(values)), dtype=np.uint64)
        base[: len(values)] = np.asarray(values, dtype=np.uint64)
        return ArgTable(base, tuple(slots), tuple(offsets))

    def fill(self, pointer_of: Callable[[str], int]) -> np.ndarray:
        """The table with each buffer slot set to pointer_of(buffer name)."""
        out = self.base.copy()
        for slot, name in self.pointer_slots:
            out[slot] = pointer_of(name)
        return out

    def buffer_names(self) -> set[str]:
        """Buffers the ops use."""
        return {name for _, name in self.pointer_slots}


def scalar_bits(dtype: str | None, value: object) -> int:
    """The scalar's bytes, little-endian in the low bytes of an 8-byte slot (as the device reads them)."""
    raw = np.asarray(value, dtype=np.dtype(dtype)).tobytes()
    return int.from_bytes(raw.ljust(8, b"\0"), "little")
