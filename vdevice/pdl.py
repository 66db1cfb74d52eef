"""CUDA Graph + programmatic dependent launch (PDL): a model's legacy kernels on one stream, each launched with
CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION = 1 and captured into one CUDA Graph, so a kernel's blocks may
be scheduled while its predecessor's last wave still runs (the strongest launch baseline a user has: issue 24).

PDL is only correct when every kernel so launched waits for its predecessor before touching memory. The plain
__global__ wrappers the converter writes do not, so this baseline compiles a COPY of the converted sources in which
each wrapper an op launches starts with RT_PDL_PROLOGUE() (pdl_source: a source edit of the copy; the build's own
sources, and every other executor, are untouched). On sm_90 and newer the prologue is

    griddepcontrol.wait;               // cudaGridDependencySynchronize()
    griddepcontrol.launch_dependents;  // cudaTriggerProgrammaticLaunchCompletion()

Why that is correct (PTX ISA, "Parallel Synchronization and Communication Instructions: griddepcontrol"):
`griddepcontrol.wait` makes the executing thread wait until all prerequisite grids in flight have COMPLETED and all
their memory operations are performed and made visible to the current grid. It is the first statement of every
wrapper, before the rTask's first global load or store, so every global access of kernel k happens after kernel k-1
completed with its writes visible (read-after-write and write-after-read alike). `launch_dependents` comes after the
wait: kernel k+1 may be scheduled only once every block of k has executed it (or exited), i.e. after k-1 completed;
so the chain is transitive and every kernel's accesses follow the completion of ALL earlier kernels, the semantics
of plain stream order. Blocks parked in the wait of k+1 only ever wait for a grid whose blocks are all resident
(they all triggered), so the overlap cannot deadlock. A kernel after a non-kernel node or a library kernel (which
never triggers) gets the implicit trigger at that node's completion.

On the CPU emulator (RT_CPU_EMULATOR) and in nvcc's host pass the prologue is a no-op: the emulator runs launches
one after another to completion, which is the order the wait enforces. The CPU executor therefore runs the PDL copy
op by op (it checks the edited source and its outputs), and only the GPU captures the graph.

Launch attributes are beyond CuPy's RawKernel, so the GPU launches go through cuda-python's driver binding
(`cuda.bindings.driver.cuLaunchKernelEx`; the `gpu` extra installs cuda-bindings). Without it, or below sm_90, the
executor raises PdlUnavailable with the reason (a row, never a crash).
"""
from __future__ import annotations

import re
from typing import Any, Iterable, Mapping, Sequence

import numpy as np

from toolchain.refusal import Refusal

from .executors import CallStep, OpByOpExecutor, VDevice, VDeviceError, run_call
from .program import Op

PROLOGUE = "RT_PDL_PROLOGUE"
MIN_ARCH = 90  # griddepcontrol: PTX ISA 7.8, sm_90
# what the copy of each source starts with (then `#line 1`: diagnostics keep the source's own line numbers)
PRELUDE = f"""#ifndef {PROLOGUE}
#if defined(__CUDA_ARCH__) && !defined(RT_CPU_EMULATOR)
#if __CUDA_ARCH__ < {MIN_ARCH * 10}
#error "the PDL copy of a module needs sm_{MIN_ARCH} or newer (griddepcontrol)"
#endif
// vdevice/pdl.py: wait for the previous grid's completion and memory, then let the next grid be scheduled
#define {PROLOGUE}() asm volatile("griddepcontrol.wait;\\n\\tgriddepcontrol.launch_dependents;" ::: "memory")
#else
#define {PROLOGUE}() ((void)0)
#endif
#endif
#line 1
"""
_GLOBAL = re.compile(r"\b__global__\b")


class PdlUnavailable(VDeviceError):
    """The PDL graph cannot run here (no cuda.bindings, an older GPU, a wrapper the edit cannot find); str() is
    the reason."""


# ---- the source edit ----------------------------------------------------------------------------------------
def _skip_noncode(text: str, i: int) -> int:
    """Past a comment or string literal starting at i (i itself when none starts there)."""
    if text.startswith("//", i):
        j = text.find("\n", i)
        return len(text) if j < 0 else j
    if text.startswith("/*", i):
        j = text.find("*/", i + 2)
        return len(text) if j < 0 else j + 2
    if text[i] in "\"'":
        q, j = text[i], i + 1
        while j < len(text) and text[j] != q:
            j += 2 if text[j] == "\\" else 1
        return j + 1
    return i


def _matching(text: str, i: int, open_: str = "(", close: str = ")") -> int:
    """Index of the bracket closing the one at i (comments and strings skipped); -1 when unbalanced."""
    depth = 0
    while i < len(text):
        j = _skip_noncode(text, i)
        if j != i:
            i = j
            continue
        if text[i] == open_:
            depth += 1
        elif text[i] == close:
            depth -= 1
            if depth == 0:
                return i
        i += 1
    return -1


def _code_mask(text: str) -> np.ndarray:
    """True at the characters outside comments and string literals."""
    mask = np.ones(len(text), dtype=bool)
    i = 0
    while i < len(text):
        j = _skip_noncode(text, i)
        if j != i:
            mask[i:j] = False
            i = j
        else:
            i += 1
    return mask


def wrapper_bodies(text: str) -> dict[str, list[int]]:
    """Each __global__ function DEFINITION of a source: name -> offsets just past the '{' of its body (a template
    wrapper has one definition; overloads have several). Declarations (ending in ';') are skipped."""
    out: dict[str, list[int]] = {}
    code = _code_mask(text)
    for m in _GLOBAL.finditer(text):
        if not code[m.start()]:
            continue
        i = m.end()
        name = None
        while i < len(text):  # the function name: the identifier before the first '(' not of __launch_bounds__
            j = _skip_noncode(text, i)
            if j != i:
                i = j
                continue
            if text[i] in ";{}":
                break
            if text[i] == "(":
                before = re.search(r"([A-Za-z_]\w*)\s*$", text[m.end():i])
                ident = before.group(1) if before else None
                if ident in ("__launch_bounds__", "__cluster_dims__", "__maxnreg__", "__align__"):
                    i = _matching(text, i)
                    if i < 0:
                        break
                    i += 1
                    continue
                name = ident
                break
            i += 1
        if name is None or i >= len(text) or text[i] != "(":
            continue
        close = _matching(text, i)
        if close < 0:
            continue
        k = close + 1
        while k < len(text):  # past qualifiers and comments to the body's '{' (or a declaration's ';')
            j = _skip_noncode(text, k)
            if j != k:
                k = j
            elif text[k] in "{;":
                break
            else:
                k += 1
        if k < len(text) and text[k] == "{":
            out.setdefault(name, []).append(k + 1)
    return out


def pdl_source(text: str, wrappers: Iterable[str]) -> str:
    """The copy of a converted source with RT_PDL_PROLOGUE(); as the first statement of each named __global__
    wrapper (on the line of its '{': line numbers kept), the prologue's definition in front. PdlUnavailable when a
    wrapper has no definition in the text."""
    bodies = wrapper_bodies(text)
    want = sorted(set(wrappers))
    missing = [w for w in want if w not in bodies]
    if missing:
        raise PdlUnavailable(f"no __global__ definition of {', '.join(missing)} to give the PDL prologue")
    at = sorted(off for w in want for off in bodies[w])
    parts, last = [], 0
    for off in at:
        parts += [text[last:off], f" {PROLOGUE}();"]
        last = off
    return PRELUDE + "".join(parts) + text[last:]


def pdl_sources(ops: Sequence[Op], sources: Mapping[str, str]) -> dict[str, str]:
    """Every source with the prologue in each wrapper an op launches (sources no op launches are copied as they
    are)."""
    wanted: dict[str, set[str]] = {}
    for op in ops:
        wanted.setdefault(op.kernel.source_id, set()).add(op.kernel.wrapper_name.rsplit("::", 1)[-1])
    return {sid: pdl_source(text, wanted[sid]) if sid in wanted else text for sid, text in sources.items()}


def has_prologue(text: str, wrapper: str) -> bool:
    """Whether every definition of `wrapper` in `text` starts with the PDL prologue (the tests' check)."""
    bodies = wrapper_bodies(text).get(wrapper, [])
    return bool(bodies) and all(text[b:].lstrip().startswith(f"{PROLOGUE}();") for b in bodies)


# ---- the GPU launch ---------------------------------------------------------------------------------------------
def driver_module() -> Any:
    """cuda.bindings.driver (cuda-python), or PdlUnavailable saying why not."""
    try:
        from cuda.bindings import driver
    except Exception as exc:  # ImportError, or a binding that cannot load libcuda
        raise PdlUnavailable(f"cuda.bindings (cuda-python) is not importable ({type(exc).__name__}: "
                             f"{str(exc).splitlines()[0] if str(exc) else ''}): CuPy cannot set launch attributes; "
                             f"pip install cuda-bindings (the gpu extra)") from None
    for name in ("cuLaunchKernelEx", "CUlaunchConfig", "CUlaunchAttribute"):
        if not hasattr(driver, name):
            raise PdlUnavailable(f"cuda.bindings.driver has no {name}: cuda-bindings >= 12.0 is needed")
    return driver


def arch_number(arch: str) -> int:
    """90 for "sm_90" (and "sm_90a"); 0 when unreadable."""
    m = re.match(r"sm_(\d+)", arch or "")
    return int(m.group(1)) if m else 0


def gpu_unavailable(compute_capability: str | int) -> str | None:
    """Why PDL launches cannot run on a device of this compute capability ("90"), or None when they can."""
    cc = int(str(compute_capability))
    if cc < MIN_ARCH:
        return (f"programmatic dependent launch needs sm_{MIN_ARCH} or newer (griddepcontrol); this GPU is "
                f"sm_{cc}")
    try:
        driver_module()
    except PdlUnavailable as exc:
        return str(exc)
    return None


class PdlLauncher:
    """cuLaunchKernelEx with programmatic stream serialization on a CuPy stream."""

    def __init__(self) -> None:
        self.driver = driver_module()
        d = self.driver
        attr = d.CUlaunchAttribute()
        attr.id = d.CUlaunchAttributeID.CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION
        attr.value.programmaticStreamSerializationAllowed = 1
        self.attr = attr

    def config(self, grid: Sequence[int], block: Sequence[int], smem: int, stream_ptr: int) -> Any:
        """The CUlaunchConfig of one launch, with the PDL attribute."""
        d = self.driver
        cfg = d.CUlaunchConfig()
        cfg.gridDimX, cfg.gridDimY, cfg.gridDimZ = (int(v) for v in grid)
        cfg.blockDimX, cfg.blockDimY, cfg.blockDimZ = (int(v) for v in block)
        cfg.sharedMemBytes = int(smem)
        cfg.hStream = d.CUstream(int(stream_ptr))
        cfg.attrs = [self.attr]
        cfg.numAttrs = 1
        return cfg

    def launch_op(self, vd: VDevice, index: int, stream_ptr: int) -> None:
        """Enqueue op `index` of `vd` as its wrapper (which must carry the prologue) with programmatic stream
        serialization on the stream at `stream_ptr` (its function loaded and its shared memory opted in first)."""
        be: Any = vd.backend
        k = vd.ops[index].kernel
        fn = be._allow_smem(vd.wrapper(index), k.dynamic_smem)
        self.launch(fn.kernel.ptr, k.grid, k.block, k.dynamic_smem, stream_ptr, vd.op_launch_args(index), be.pointer)

    def launch(self, function_ptr: int, grid: Sequence[int], block: Sequence[int], smem: int, stream_ptr: int,
               args: Sequence[Any], pointer: Any) -> None:
        """Enqueue one kernel (`pointer(array)`: a device array's address; numpy scalars go by value)."""
        d = self.driver
        params, holders = pack_params(args, pointer)
        err = d.cuLaunchKernelEx(self.config(grid, block, smem, stream_ptr), d.CUfunction(int(function_ptr)),
                                 int(params.ctypes.data), 0)[0]
        del holders  # the driver copied the values (at launch, or into the captured node)
        if err != d.CUresult.CUDA_SUCCESS:
            _, name = d.cuGetErrorName(err)
            raise VDeviceError(f"cuLaunchKernelEx (programmatic stream serialization) failed: "
                               f"{name.decode() if isinstance(name, bytes) else name}")


def pack_params(args: Sequence[Any], pointer: Any) -> tuple[np.ndarray, list[np.ndarray]]:
    """The void** kernelParams array of a launch and the host values it points at (keep them alive until the
    launch returns): numpy scalars by value with their dtype, anything else as the 64-bit device address
    `pointer(arg)`."""
    holders = [np.array([a], dtype=a.dtype) if isinstance(a, np.generic) else
               np.array([pointer(a)], dtype=np.uint64) for a in args]
    return np.array([h.ctypes.data for h in holders], dtype=np.uint64), holders


# ---- the executor -------------------------------------------------------------------------------------------------
class PdlGraphExecutor(OpByOpExecutor):
    """The ops' wrappers from the PDL copy of the sources, in one topological order on one stream: on the GPU each
    launched with programmatic stream serialization and the whole run captured once as a CUDA Graph (call steps
    between them captured in order), replayed per run; on the CPU emulator launched one after another (the
    prologue is a no-op there). `vdevice` must be compiled from pdl_sources (make_vdevice)."""

    def __init__(self, ops: Sequence[Op], sources: Mapping[str, str], buffers: Mapping[str, np.ndarray], *,
                 deps: Iterable[tuple[int, int]] | None = None, backend: str = "cpu",
                 include_dirs: Sequence[str] = (), vdevice: VDevice | None = None,
                 steps: Sequence[Sequence[int] | CallStep] | None = None):
        vd = vdevice or make_vdevice(ops, sources, buffers, backend, include_dirs)
        super().__init__(ops, sources, buffers, deps=deps, vdevice=vd, steps=steps)
        self.graph: Any = None
        if self.vd.backend.name == "gpu":
            be: Any = self.vd.backend
            reason = gpu_unavailable(be.cp.cuda.Device().compute_capability)
            if reason:
                raise PdlUnavailable(reason)
            self.launcher = PdlLauncher()
            self._enqueue()  # one eager PDL run: loads every function, sets its attributes, outside the capture
            be.synchronize()
            be.stream.begin_capture()
            try:
                self._enqueue()
            finally:
                self.graph = be.stream.end_capture()

    def _enqueue(self, stream_ptr: int | None = None) -> None:
        """Every step once on the backend stream (or on `stream_ptr`, kernels only): the ops as PDL launches, the
        calls in between."""
        vd = self.vd
        be: Any = vd.backend
        for step in self.steps:
            if isinstance(step, CallStep):
                if stream_ptr is not None:
                    raise VDeviceError("a run with call steps is issued on the backend stream only")
                run_call(vd, step)
                continue
            for i in step:
                self.launcher.launch_op(vd, i, be.stream.ptr if stream_ptr is None else stream_ptr)

    def edge_types(self) -> dict[str, int] | Refusal:
        """Evidence that the graph is a PDL graph: the run captured once more (through the driver, on a stream of
        its own, never launched) and its edges counted by type, {"programmatic": n, "default": m}; or, as a
        Refusal, why they could not be counted (never raises: the replayed graph is CuPy's, which keeps no
        cudaGraph_t to inspect)."""
        if self.graph is None:
            return Refusal("no CUDA Graph (the CPU emulator runs the kernels op by op)")
        d = self.launcher.driver
        be: Any = self.vd.backend

        def ok(res: Any) -> Any:
            err = res[0] if isinstance(res, tuple) else res
            if err != d.CUresult.CUDA_SUCCESS:
                raise VDeviceError(f"driver error {err}")
            return res
        try:
            side = be.cp.cuda.Stream(non_blocking=True)
            handle = d.CUstream(int(side.ptr))
            ok(d.cuStreamBeginCapture(handle, d.CUstreamCaptureMode.CU_STREAM_CAPTURE_MODE_RELAXED))
            try:
                self._enqueue(int(side.ptr))
            finally:
                err, graph = d.cuStreamEndCapture(handle)
            ok((err,))
            try:
                get = getattr(d, "cuGraphGetEdges_v2", None) or d.cuGraphGetEdges  # 12.x: _v2 has edge data
                count = int(ok(get(graph, 0))[-1])
                res = ok(get(graph, count))
            finally:
                d.cuGraphDestroy(graph)
            if len(res) < 5 or res[3] is None:
                return Refusal("this cuda.bindings returns no edge data (cuGraphGetEdges without edgeData)")
            programmatic = int(d.CUgraphDependencyType.CU_GRAPH_DEPENDENCY_TYPE_PROGRAMMATIC)
            kinds = [int(e.type) for e in list(res[3])[:count]]
            return {"programmatic": sum(k == programmatic for k in kinds),
                    "default": sum(k != programmatic for k in kinds)}
        except Exception as exc:  # evidence only: the baseline itself does not depend on it
            return Refusal(f"edges not counted: {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}")

    def _launch_all(self) -> None:
        """GPU: replay the captured graph; CPU: the wrappers op by op."""
        if self.graph is None:
            OpByOpExecutor._launch_all(self)
        else:
            self.graph.launch(getattr(self.vd.backend, "stream"))


def pdl_unavailable(backend: str) -> str | None:
    """Why kernels cannot be PDL-launched on `backend` ("cpu": never a reason, the emulator runs the copy with the
    prologue a no-op; "gpu": no CuPy, below sm_90, no cuda.bindings), None when they can. Checked before anything
    is compiled."""
    if backend != "gpu":
        return None
    from .gpu import _cupy
    try:
        cp = _cupy()
    except Exception as exc:
        return str(exc)
    return gpu_unavailable(cp.cuda.Device(0).compute_capability)


def make_vdevice(ops: Sequence[Op], sources: Mapping[str, str], buffers: Mapping[str, np.ndarray],
                 backend: str = "cpu", include_dirs: Sequence[str] = (), **options: Any) -> VDevice:
    """A vDevice compiled from the PDL copy of `sources`; on the GPU the device is checked first (no compile for
    a GPU that could not run it)."""
    reason = pdl_unavailable(backend)
    if reason:
        raise PdlUnavailable(reason)
    return VDevice(ops, pdl_sources(ops, sources), buffers, backend, include_dirs, **options)


# ---- a build's launch segments as PDL chains (vdevice.executors.SegmentGraphs.capture_chain) ------------------------
CHAIN_FALLBACK = "note: launch segments run as plain CUDA Graphs, without programmatic dependent launch: "


def chain_sources(ops: Sequence[Op], sources: Mapping[str, str], chained: Iterable[int], backend: str
                  ) -> tuple[Mapping[str, str], str]:
    """What a build's vDevice compiles when the ops `chained` (those of its one-stream launch segments) are to run
    as PDL chains: the sources with the prologue in those ops' wrappers and "" where `backend` can run them (the
    CPU emulator always: the prologue is a no-op there, so `rammer run --check` runs the copy), else the sources as
    they are and the note saying why not (decided once, before the compile)."""
    wanted = sorted(set(chained))
    if not wanted:
        return sources, ""
    reason = pdl_unavailable(backend)
    if reason is None:
        try:
            return pdl_sources([ops[i] for i in wanted], sources), ""
        except PdlUnavailable as exc:
            reason = str(exc)
    return sources, CHAIN_FALLBACK + reason


def chain_vdevice(ops: Sequence[Op], sources: Mapping[str, str], buffers: Mapping[str, np.ndarray],
                  backend: str, chained: Iterable[int], include_dirs: Sequence[str] = (), **options: Any) -> VDevice:
    """A build's vDevice whose one-stream launch segments (`chained`: their ops) run as PDL chains where the device
    allows (chain_sources): `pdl_chained` names the ops whose wrappers carry the prologue, `pdl_launcher` launches
    them on the GPU; otherwise `pdl_note` says why the segments are plain graphs."""
    chained = sorted(set(chained))
    texts, note = chain_sources(ops, sources, chained, backend)
    vd = VDevice(ops, texts, buffers, backend, include_dirs, **options)
    vd.pdl_note = note
    if chained and not note:
        vd.pdl_chained = frozenset(chained)
        vd.pdl_launcher = PdlLauncher() if vd.backend.name == "gpu" else None
    return vd
