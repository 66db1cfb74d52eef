"""`rtransform verify`: the legacy kernel against its rKernel run by a small persistent executor.

Public API:
    verify_command(file, spec, device="cpu", json_out=False) -> int
        Prints the comparison (or JSON); exit 0 only if every output agrees, 4 (Exit.LEGACY_ORDER) when they differ
        only because the legacy kernel's own result depends on block order or varies between runs (see
        legacy_dependence), 1 otherwise, 2 on bad input, 3 when there is no GPU.
    verify_file(file, spec_path, device="cpu", transform=None) -> VerifyResult
        transform(converted_text) -> text lets tests corrupt the conversion before it is built.
    executor_source(meta, spec) -> str            # the generated persistent __global__ (appended to the rKernel)
    veu_threads(block_threads) -> int             # vEU width: larger than the legacy block, not a multiple of it
    compare(name, legacy, rkernel, tolerance) -> OutputCheck

The executor stresses what a conversion must survive inside a vDevice: fewer vEUs than rTasks (each vEU runs
several, reusing its shared memory), vEUs wider than the legacy block (surplus threads), rTasks in a seeded
shuffled order, and the rTask protocol of vdevice/include/rtask_runtime.cuh.

Every launch starts from the module's initial globals (`__device__` counters at their initializers: the emulator
loads a fresh copy of the library per launch), so no run sees what an earlier one left there. When the rKernel
differs under a block order, the legacy kernel is run in that order too (the emulator runs its blocks one after
another in a given order) and again in its own: if it then gives the rKernel's result, or a different result of
its own, the difference is the legacy kernel's (races between blocks, clock readings), reported as such.
"""
from __future__ import annotations

import dataclasses
import json
import re
import sys
from dataclasses import asdict, dataclass, field
from typing import Any, Callable, Sequence

import numpy as np

from converter import ConversionError, RKernelMeta, convert_source
from converter.flags import CompileFlags
from rtransform.host_spec import strip_comments
from rtransform.run import RUNTIME_INCLUDE, EXIT_ERROR, Prepared, RunError, launch, make_module, prepare
from rtransform.spec import LaunchSpec, guessed_note, guessed_values, make_inputs
from toolchain.cxx import kernel_expr
from toolchain.exits import Exit
from vdevice.executors import cpu_yield_budget

EXECUTOR = "__rt_verify_exec"
SANITIZE_ALL = ("memcheck", "racecheck", "synccheck")
MAX_VEUS = 3
MAX_THREADS = 1024
# a `__constant__` variable declared without an initializer: its bytes come from the host's cudaMemcpyToSymbol,
# which neither run executes, so both runs read zeros there
_UNSET_CONSTANT = re.compile(r"\b__constant__\b(?![^;{}]*=)[^;{}]*?\b([A-Za-z_]\w*)\s*(?:\[[^\]]*\]\s*)*;")


@dataclass
class OutputCheck:
    """How one output of the rKernel compares with the legacy kernel's."""
    name: str
    ok: bool
    max_error: float
    mismatches: int
    first_index: int | None = None
    legacy: Any = None
    rkernel: Any = None
    schedule: str = ""  # the executor's block order and vEU count that differed (see schedules())

    def line(self, tolerance: float) -> str:
        """Human-readable verdict."""
        if self.ok:
            how = "bit-exact" if tolerance == 0 else f"max error {self.max_error:.3g} <= {tolerance:g}"
            return f"{self.name}: ok ({how})"
        return (f"{self.name}: DIFFERS at index {self.first_index}: legacy {self.legacy} vs rKernel {self.rkernel}; "
                f"max error {self.max_error:.3g}, {self.mismatches} element(s) differ"
                + (f" (under {self.schedule})" if self.schedule else ""))


@dataclass
class VerifyResult:
    """The outcome of one verification."""
    file: str
    kernel: str
    device: str
    rtasks: int
    veus: int
    veu_threads: int
    block_threads: int
    tolerance: float
    outputs: list[OutputCheck] = field(default_factory=list)
    schedules: list[str] = field(default_factory=list)  # every block order and vEU count run
    zero_constants: list[str] = field(default_factory=list)  # __constant__ variables no run sets (see zero_note)
    legacy_dependence: str = ""  # why the difference is the legacy kernel's own (see legacy_dependence); "" if not

    @property
    def ok(self) -> bool:
        """All outputs agree."""
        return all(o.ok for o in self.outputs)

    @property
    def outcome(self) -> str:
        """'verified', 'legacy order-dependent' (the outputs differ because the legacy kernel's own result is not
        fixed by its inputs: see legacy_dependence) or 'differs'."""
        return "verified" if self.ok else ("legacy order-dependent" if self.legacy_dependence else "differs")

    def summary(self) -> str:
        """One line: verified, or which output differs where (and why, when the legacy kernel is the cause)."""
        bad = [o for o in self.outputs if not o.ok]
        if not bad:
            return f"verified: {len(self.outputs)} output(s) of {self.kernel} agree"
        diff = "; ".join(o.line(self.tolerance) for o in bad)
        return f"{self.legacy_dependence}: {diff}" if self.legacy_dependence else diff

    def to_json(self) -> dict:
        """Machine-readable form."""
        d = asdict(self)
        d["ok"] = self.ok
        d["outcome"] = self.outcome
        return d


def veu_threads(block_threads: int) -> int:
    """A vEU width larger than the legacy block and not a multiple of it (when the block allows one)."""
    base = -(-(block_threads + 37) // 32) * 32
    for v in (base, base + 32, block_threads + 37, block_threads + 1):
        if v <= MAX_THREADS and v % block_threads != 0:
            return v
    return min(block_threads + 37, MAX_THREADS) if block_threads < MAX_THREADS else block_threads


def num_veus(rtasks: int) -> int:
    """Fewer vEUs than rTasks, so that vEUs run several rTasks one after another."""
    return max(1, min(MAX_VEUS, rtasks - 1))


def task_order(spec: LaunchSpec, seed: int = 1) -> np.ndarray:
    """A seeded shuffled order in which the vEUs take the rTasks; never the legacy order, and never ending with
    the legacy launch's last block (so a result that depends on which block runs last shows)."""
    order = np.random.default_rng(spec.seed + seed).permutation(spec.num_blocks()).astype(np.uint32)
    if len(order) >= 2 and order[-1] == len(order) - 1:
        order[0], order[-1] = order[-1], order[0]
    return order


@dataclass
class Schedule:
    """One way the persistent executor runs the rTasks: their order and how many vEUs take them."""
    label: str
    order: np.ndarray
    veus: int

    def describe(self) -> str:
        """'block order reverse on 2 vEU(s)'."""
        return f"block order {self.label} on {self.veus} vEU(s)"


SHUFFLE_TRIES = 8  # seeds tried for a shuffle that differs from the orders already chosen


def schedules(spec: LaunchSpec) -> list[Schedule]:
    """The block orders verify runs: reverse and a seeded shuffle on one vEU count, forward and another shuffle on a
    second (two grid sizes of the persistent launch), each distinct: a result that depends on which block runs
    first, last or beside which shows in at least one of them. A shuffle that repeats an order already chosen tries
    the next seed."""
    n = spec.num_blocks()
    many, few = num_veus(n), (1 if num_veus(n) > 1 else min(2, n))
    out: list[Schedule] = []

    def add(label: str, order: np.ndarray, veus: int) -> bool:
        if any(np.array_equal(order, o.order) and veus == o.veus for o in out):
            return False
        out.append(Schedule(label, order, veus))
        return True

    def shuffled(first: int, veus: int) -> None:
        taken = [o.order for o in out if o.veus == veus]
        for seed in range(first, first + SHUFFLE_TRIES):
            order = task_order(spec, seed)
            if not any(np.array_equal(order, t) for t in taken):
                add(f"shuffled (seed {spec.seed + seed})", order, veus)
                return

    add("reverse", np.arange(n, dtype=np.uint32)[::-1].copy(), many)
    shuffled(1, many)
    add("forward", np.arange(n, dtype=np.uint32), few)
    shuffled(1 + SHUFFLE_TRIES, few)
    return out


def executor_source(meta: RKernelMeta, spec: LaunchSpec) -> str:
    """A persistent __global__ that runs the rKernel's rTasks from an order array (rtask_runtime.cuh protocol)."""
    qual = meta.name.rsplit("::", 1)[0] + "::" if "::" in meta.name else ""
    tparams = meta.template_params
    header = ("template <" + ", ".join(f"typename {p.name}" if p.kind == "type" else f"{p.type} {p.name}"
                                      for p in tparams) + ">\n") if tparams else ""
    targs = "<" + ", ".join(p.name for p in tparams) + ">" if tparams else ""
    params = "".join(f"{p.type} {p.name}, " for p in meta.params)
    args = "".join(f", {p.name}" for p in meta.params)
    layout = meta.layout
    ltype = f"{qual}{layout}{targs}"
    layout_decl = (f"  __shared__ __align__(alignof({ltype})) unsigned char __rt_layout[sizeof({ltype})];\n"
                   if layout else "")
    smem = "reinterpret_cast<char*>(__rt_layout)" if layout else "static_cast<char*>(nullptr)"
    g, b = spec.grid, spec.block
    return (
        f"\n// ---- rtransform verify: persistent executor for {meta.name} ----\n"
        f"{header}__global__ void {EXECUTOR}({params}const unsigned* __rt_order, unsigned __rt_ntasks) {{\n"
        f"  __shared__ ::rt::TaskSlot __rt_slot;\n{layout_decl}"
        f"  extern __shared__ __align__(16) char __rt_dyn[];\n"
        f"  const ::dim3 __rt_grid({g[0]}, {g[1]}, {g[2]}), __rt_block({b[0]}, {b[1]}, {b[2]});\n"
        f"  for (unsigned __rt_i = blockIdx.x; __rt_i < __rt_ntasks; __rt_i += gridDim.x) {{\n"
        f"    ::rt::Task __rt = ::rt::make_task(&__rt_slot, __rt_order[__rt_i], __rt_grid, __rt_block, {smem},\n"
        f"                                      __rt_dyn);\n"
        f"    ::rt::begin_task(__rt);\n"
        f"    if (__rt.tid < __rt.nthreads) {{\n"
        f"      {qual}{meta.rkernel}{targs}(__rt{args});\n"
        f"      ::rt::end_task(__rt);\n"
        f"    }}\n"
        f"    __syncthreads();\n"
        f"  }}\n}}\n")


def executor_expr(spec: LaunchSpec) -> str:
    """The executor's name with the spec's template arguments."""
    return kernel_expr(EXECUTOR, spec.template_args)


def convert(prep: Prepared) -> tuple[str, RKernelMeta]:
    """Convert the sliced legacy text; returns (converted text, the kernel's metadata) or RunError."""
    try:
        res = convert_source(prep.text, prep.file, [prep.spec.kernel], include_dirs=prep.include_dirs,
                             flags=prep.flags)
    except ConversionError as e:
        raise RunError(e.diagnostics[0]) from None
    want = prep.spec.kernel
    meta = next((m for m in res.rkernels if want in (m.name, m.wrapper)), None)
    if meta is None:
        refused = [d for r in res.refused for d in r.get("diagnostics", [])]
        raise RunError(refused[0] if refused else f"{prep.file}: error: kernel '{want}' was not converted")
    return res.output, meta


def compare(name: str, legacy: np.ndarray, rkernel: np.ndarray, tolerance: float) -> OutputCheck:
    """tolerance 0: the bits must match; else max |a-b| / (1 + |b|) (b = legacy) must be <= tolerance."""
    a = np.asarray(rkernel).ravel()
    b = np.asarray(legacy).ravel()
    with np.errstate(all="ignore"):
        af, bf = a.astype(np.float64), b.astype(np.float64)
        err = np.abs(af - bf) / (1.0 + np.abs(bf))
        same = (np.isnan(af) & np.isnan(bf)) | (af == bf)  # equal infinities too (inf - inf is nan)
        err = np.where(same, 0.0, np.where(np.isnan(err), np.inf, err))
    if tolerance == 0:
        width = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}[a.dtype.itemsize]
        bad = a.view(width) != b.view(width)
    else:
        bad = err > tolerance
    max_error = float(err.max()) if err.size else 0.0
    if not bad.any():
        return OutputCheck(name, True, max_error, 0)
    i = int(np.argmax(bad))
    return OutputCheck(name, False, max_error, int(bad.sum()), i, b[i].item(), a[i].item())


def verify_file(file: str, spec_path: str, device: str = "cpu",
                transform: Callable[[str], str] | None = None,
                sanitize: Sequence[str] = SANITIZE_ALL, flags: CompileFlags | None = None) -> VerifyResult:
    """Convert FILE's kernel, run legacy and persistent rKernel from the same inputs, compare the outputs; on the
    CPU both run under the emulator's sanitizers (all by default), so a kernel that reads or writes out of
    bounds, races or diverges at a barrier fails instead of agreeing by chance."""
    prep = prepare(file, spec_path, flags=flags)
    spec = prep.spec
    converted, meta = convert(prep)
    if transform is not None:
        converted = transform(converted)
    inputs = make_inputs(spec)
    # every launch of these modules starts from the library's initial globals (fresh_globals)
    legacy_mod = make_module(device, prep.build_source(prep.text), [spec.kernel_expr()], prep.include_dirs, sanitize,
                             prep.file, prep.flags.defines, fresh_globals=True)

    def run_legacy(order: np.ndarray | None = None) -> dict[str, Any]:
        return launch(legacy_mod, spec.kernel_expr(), spec.grid, spec.block, spec.dynamic_smem, inputs, order=order)

    legacy = run_legacy()
    threads = veu_threads(spec.block_threads())
    exec_mod = make_module(device, prep.build_source(converted + executor_source(meta, spec)), [executor_expr(spec)],
                           [*prep.include_dirs, str(RUNTIME_INCLUDE)], sanitize, prep.file, prep.flags.defines,
                           fresh_globals=True)

    def run_rkernel(plan: Schedule) -> dict[str, Any]:
        # a vEU runs its rTasks one after another: each may poll as long as a whole legacy launch may
        budget = cpu_yield_budget(-(-len(plan.order) // plan.veus)) if device == "cpu" else None
        return launch(exec_mod, executor_expr(spec), (plan.veus, 1, 1), (threads, 1, 1), spec.dynamic_smem, inputs,
                      extra=[plan.order, np.uint32(len(plan.order))], yield_budget=budget)

    plans = schedules(spec)
    result = VerifyResult(file, spec.kernel_expr(), device, spec.num_blocks(), plans[0].veus, threads,
                          spec.block_threads(), spec.tolerance, schedules=[p.describe() for p in plans],
                          zero_constants=zero_constants(prep.text))
    for plan in plans:  # the first schedule that differs is reported, and named
        rk = run_rkernel(plan)
        result.outputs = [dataclasses.replace(compare(n, legacy[n], rk[n], spec.tolerance), schedule=plan.describe())
                          for n in spec.outputs]
        if not result.ok:
            if device == "cpu":  # the emulator can run the legacy blocks in a given order
                result.legacy_dependence = legacy_dependence(spec, plan, legacy, rk, run_legacy, run_rkernel)
            break
    return result


def _agree(spec: LaunchSpec, a: dict[str, Any], b: dict[str, Any]) -> bool:
    return all(compare(n, a[n], b[n], spec.tolerance).ok for n in spec.outputs)


def legacy_dependence(spec: LaunchSpec, plan: Schedule, legacy: dict[str, Any], rk: dict[str, Any],
                      run_legacy: Callable[..., dict[str, Any]], run_rkernel: Callable[[Schedule], dict[str, Any]]
                      ) -> str:
    """Why the rKernel's outputs `rk` under `plan` differ from the legacy run's because of the legacy kernel itself,
    or "" when nothing shows that (a difference to report as one). The legacy kernel, from the same inputs:
    - run again in its own block order, gives other outputs: they vary from run to run (clock readings, races);
    - run with its blocks in the plan's order, gives the rKernel's outputs: its result depends on block order;
    - (a plan of several vEUs, whose rTasks also ran concurrently) run in the plan's order, gives other outputs than
      in its own order, and the rKernel run in that order on one vEU gives them too."""
    if not _agree(spec, legacy, run_legacy()):
        return ("the legacy kernel's own result varies between two runs in the same block order (clock readings, "
                "races)")
    where = f"block order {plan.label}"
    in_order = run_legacy(plan.order)
    if _agree(spec, in_order, rk):
        return (f"the legacy kernel's own result depends on block order (races between blocks): with its blocks in "
                f"{where} it gives the rKernel's result")
    if plan.veus > 1 and not _agree(spec, in_order, legacy):
        one = Schedule(plan.label, plan.order, 1)
        if _agree(spec, in_order, run_rkernel(one)):
            return (f"the legacy kernel's own result depends on block order (races between blocks): with its blocks "
                    f"in {where} it gives another result, which the rKernel gives in that order on 1 vEU")
    return ""


def zero_constants(text: str) -> list[str]:
    """The file's `__constant__` variables without an initializer (`extern` ones too): zero in both runs."""
    return list(dict.fromkeys(m.group(1) for m in _UNSET_CONSTANT.finditer(strip_comments(text))))


def zero_note(result: VerifyResult) -> str | None:
    """Why an agreement may prove little: outputs computed from all-zero constant memory agree whatever the
    arithmetic that uses it."""
    if not result.zero_constants:
        return None
    names = ", ".join(result.zero_constants)
    return (f"{result.file}: note: __constant__ {names} is all zeros in both runs (the host code that fills it, "
            "cudaMemcpyToSymbol, does not run): whatever the kernel computes from it is compared only at zero")


def report(result: VerifyResult) -> str:
    """The human-readable report."""
    head = (f"verify {result.file} {result.kernel} on {result.device}: {result.rtasks} rTasks on vEUs of "
            f"{result.veu_threads} threads (legacy block {result.block_threads}); block orders run: "
            f"{'; '.join(result.schedules)}")
    lines = [head] + ["  " + o.line(result.tolerance) for o in result.outputs]
    bad = sum(not o.ok for o in result.outputs)
    if result.legacy_dependence:
        lines.append(f"NOT VERIFIABLE: {result.legacy_dependence}; {bad} of {len(result.outputs)} output(s) differ")
    else:
        lines.append("verified: all outputs agree" if not bad
                     else f"FAILED: {bad} of {len(result.outputs)} output(s) differ")
    return "\n".join(lines)


def verify_command(file: str, spec: str, device: str = "cpu", json_out: bool = False,
                   sanitize: Sequence[str] = SANITIZE_ALL, flags: CompileFlags | None = None) -> int:
    """CLI body of `rtransform verify`; returns the exit status."""
    note = guessed_note(spec)
    try:
        result = verify_file(file, spec, device=device, sanitize=sanitize, flags=flags)
    except RunError as e:
        if json_out:
            print(json.dumps({"file": file, "ok": False, "error": str(e), "spec_guessed": guessed_values(spec)}))
        print(str(e), file=sys.stderr)
        if note and e.code == EXIT_ERROR:  # the kernel ran and failed: the guessed spec may be the cause
            print(note, file=sys.stderr)
        return e.code
    print(json.dumps(result.to_json(), indent=2) if json_out else report(result))
    if zero_note(result):
        print(zero_note(result), file=sys.stderr)
    if note and not result.ok:
        print(note, file=sys.stderr)
    return 0 if result.ok else (Exit.LEGACY_ORDER if result.legacy_dependence else EXIT_ERROR)
