"""The CUDA Graph + PDL baseline (issue 24, vdevice/pdl.py): the prologue edit of the legacy wrappers' copy, its
SASS (the dependency wait before any global access, nvcc and NVRTC for sm_90), the PDL variant against onnxruntime
on the CPU emulator (the prologue a no-op) and, marked gpu, on a GPU; unavailable rows with their reasons."""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

from rammer import bench
from rammer.zoo import generate, random_inputs
from vdevice.pdl import (PRELUDE, PROLOGUE, PdlUnavailable, gpu_unavailable, has_prologue, pack_params,
                         pdl_source, pdl_sources, wrapper_bodies)

CORPUS = Path(__file__).resolve().parent.parent / "kernel_corpus" / "legacy"
# SASS opcodes that touch global (or generic, possibly global) memory: none may come before the wait (ACQBULK)
GLOBAL_ACCESS = {"LDG", "STG", "LD", "ST", "ATOM", "ATOMG", "RED", "LDGSTS", "UTMALDG", "UTMASTG", "UBLKCP", "CCTL"}

TOY = """#include "rtask_runtime.cuh"
// a comment naming __global__ void fake(int x) { and a string below
static const char* s = "__global__ void fake2() {";
template <int N>
__global__ void __launch_bounds__((N / 2) * (N / 4)) wide(const float* x, float* y) {
  y[threadIdx.x] = x[threadIdx.x];
}
__global__ void declared(int n);
extern "C" __global__ void plain(float* y, int n)
{
  if (n) y[0] = 1.0f;
}
__global__ void untouched(float* y) { y[0] = 2.0f; }
"""


# ---- the source edit --------------------------------------------------------------------------------------------
def test_wrapper_bodies_find_definitions_only():
    """Definitions (templated, with nested __launch_bounds__ parentheses, extern "C", brace on its own line) are
    found; a declaration, a comment and a string that spell __global__ are not."""
    bodies = wrapper_bodies(TOY)
    assert sorted(bodies) == ["plain", "untouched", "wide"]
    for name, offs in bodies.items():
        assert len(offs) == 1 and TOY[offs[0] - 1] == "{", name


def test_pdl_source_puts_the_prologue_first_in_the_named_wrappers_only():
    """The copy starts with the prologue's definition (the CPU emulator's and the host pass's no-op, sm_90's
    griddepcontrol), each named wrapper's body starts with RT_PDL_PROLOGUE();, the others are unchanged, and the
    source keeps its line count (diagnostics keep their lines: `#line 1` after the definition)."""
    out = pdl_source(TOY, ["wide", "plain"])
    assert out.startswith(PRELUDE) and "griddepcontrol.wait" in PRELUDE and "RT_CPU_EMULATOR" in PRELUDE
    body = out[len(PRELUDE):]
    assert body.count(f"{PROLOGUE}();") == 2 and body.count("\n") == TOY.count("\n")
    assert has_prologue(out, "wide") and has_prologue(out, "plain") and not has_prologue(out, "untouched")
    assert body.replace(f" {PROLOGUE}();", "") == TOY
    assert PRELUDE.rstrip().endswith("#line 1")


def test_pdl_source_refuses_a_wrapper_it_cannot_find():
    """A launched wrapper with no definition in its source: the baseline is unavailable (never run unguarded)."""
    with pytest.raises(PdlUnavailable, match="declared"):
        pdl_source(TOY, ["declared"])
    with pytest.raises(PdlUnavailable, match="missing_kernel"):
        pdl_source(TOY, ["missing_kernel", "wide"])


def test_pdl_sources_edit_every_launched_wrapper_of_a_build(tmp_path):
    """The launch-only build of a --small model: each op's wrapper in the copy starts with the prologue; the build's
    own sources are unchanged."""
    built = _launch_build("resnext", tmp_path)
    before = dict(built.sources)
    copy = pdl_sources(built.ops, built.sources)
    assert built.sources == before and set(copy) == set(before)
    for op in built.ops:
        assert has_prologue(copy[op.kernel.source_id], op.kernel.wrapper_name), op.name


# ---- the SASS: the wait before any global access ---------------------------------------------------------------
def _wait_first(code) -> None:
    """ACQBULK (griddepcontrol.wait) among the first instructions, before every global access; PREEXIT
    (launch_dependents) after it."""
    ops = [i.base for i in code]
    assert "ACQBULK" in ops, ops[:8]
    wait = ops.index("ACQBULK")
    assert wait <= 2 and not GLOBAL_ACCESS & set(ops[:wait]), ops[:wait + 1]
    assert "PREEXIT" in ops and ops.index("PREEXIT") > wait


SASS_CASES = [("gemm.cu", "gemm_tiled", "16, true, 0"), ("conv.cu", "conv_implicit_gemm", "16, true, false"),
              ("elementwise.cu", "binary_bcast", "0, 256")]


@pytest.mark.nvcc
@pytest.mark.parametrize("source,kernel,targs", SASS_CASES, ids=[c[1] for c in SASS_CASES])
def test_prologue_is_the_first_instruction_in_nvcc_sass(source, kernel, targs, nvcc_path):
    """The converted corpus source's PDL copy compiles with nvcc for sm_90; the wrapper's SASS waits for the
    previous grid (ACQBULK) before its first global load or store."""
    from converter.convert import convert_source
    from toolchain.sass import compile_sass, demangle, find_cuobjdump
    from vdevice import RUNTIME_INCLUDE
    if find_cuobjdump() is None:
        pytest.skip("cuobjdump is not installed (pip install .[sass])")
    converted = convert_source((CORPUS / source).read_text(), source).output
    text = pdl_source(converted, [kernel]) + f"\nvoid* rt_pdl_take = (void*)&{kernel}<{targs}>;\n"
    functions, _ = compile_sass(text, [str(RUNTIME_INCLUDE), str(CORPUS)], arch="sm_90")
    wrappers = [code for name, code in functions.items() if demangle(name).startswith(f"{kernel}<")]
    assert len(wrappers) == 1, list(functions)
    _wait_first(wrappers[0])


def _nvrtc_missing() -> str | None:
    """Why NVRTC or cuobjdump cannot run here, or None."""
    from toolchain.sass import find_cuobjdump
    from vdevice.nvrtc import available
    ok, why = available()
    if not ok:
        return f"{why} (pip install .[nvrtc])"
    return None if find_cuobjdump() else "cuobjdump is not installed (pip install .[sass])"


@pytest.mark.skipif(_nvrtc_missing() is not None, reason=str(_nvrtc_missing()))
def test_pdl_module_as_the_gpu_runtime_compiles_it(tmp_path):
    """The whole PDL module of a --small launch build, compiled as the GPU runtime does (NVRTC, runtime_options,
    sm_90): every wrapper an op launches waits first; the interpreter (never launched by this baseline) has no
    wait."""
    from vdevice.codegen import INTERPRETER, generate as generate_module
    built = _launch_build("resnext", tmp_path)
    gen = generate_module(built.ops, pdl_sources(built.ops, built.sources), [str(built.folder / "rkernels")])
    functions = _sm90_waits_first(gen, {op.kernel.wrapper_name for op in built.ops})
    assert "ACQBULK" not in [i.base for i in functions[INTERPRETER]]


def _sm90_waits_first(gen, launched: set[str]) -> dict:
    """A generated module compiled as the GPU runtime compiles it (NVRTC, runtime_options, sm_90), each wrapper
    named in `launched` checked to wait before any global access; every function's SASS by demangled name."""
    from toolchain.sass import demangle, disassemble
    from vdevice.gpu import runtime_options
    from vdevice.nvrtc import compile_cubin
    out = compile_cubin(gen.source, runtime_options("sm_90", gen.include_dirs), gen.kernel_names)
    functions = {demangle(name): code for name, code in disassemble(out.cubin).items()}
    wrappers = {name: code for name, code in functions.items() if name.split("<")[0].split("(")[0] in launched}
    assert {n.split("<")[0].split("(")[0] for n in wrappers} == launched
    for name, code in wrappers.items():
        try:
            _wait_first(code)
        except AssertionError as exc:
            raise AssertionError(f"{name}: {exc}") from None
    return functions


# ---- running it -------------------------------------------------------------------------------------------------
def _launch_build(name: str, tmp_path: Path, target: str = "cpu"):
    """The launch-only build `rammer bench` makes for its launch baselines."""
    m = generate(name, small=True)
    built = bench.checked_build(bench.model_file(m, tmp_path), tmp_path / "launches", target,
                                placement="launch-only", backends=("rtask",), disable_passes=("resident_weights",),
                                launches=True)
    assert not isinstance(built, bench.Unavailable), built
    return built


@pytest.mark.parametrize("name", ["lstm-tc"])  # resnext: tests/test_zoo.py, the launch baselines on the CPU
def test_pdl_variant_matches_onnxruntime_on_the_cpu_emulator(name, tmp_path):
    """The PDL copy of a --small model's launch build, run op by op on the CPU emulator (the prologue a no-op):
    its outputs equal onnxruntime's, and it runs the edited sources."""
    m = generate(name, small=True)
    feeds = random_inputs(m, seed=0)
    refs = bench.reference_outputs(m, feeds)
    built = _launch_build(name, tmp_path)
    v = bench.pdl_variant(built, feeds, "cpu")
    assert isinstance(v, bench.Variant), v
    row = bench.evaluate(v, refs, repeats=1, warmup=0)
    assert row.name == "cuda-graph-pdl" and row.status == "ok" and row.max_err <= bench.RTOL, row
    assert "no CUDA Graph" in row.note
    ex = bench.pdl_executor(built, "cpu")
    assert all(has_prologue(ex.vd.gen.source, op.kernel.wrapper_name) for op in built.ops)


def test_unavailable_reasons():
    """Below sm_90, or without cuda.bindings: the reason, never a crash."""
    assert "sm_90" in gpu_unavailable("80") and "sm_80" in gpu_unavailable(80)


def test_no_cuda_bindings_is_a_reason(monkeypatch):
    """cuda.bindings missing: PdlUnavailable naming the package to install."""
    from vdevice.pdl import driver_module
    monkeypatch.setitem(sys.modules, "cuda.bindings", None)
    with pytest.raises(PdlUnavailable, match="cuda-bindings"):
        driver_module()
    assert "cuda-bindings" in gpu_unavailable("90")


def test_pdl_variant_is_a_row_when_the_executor_cannot_be_made(monkeypatch, tmp_path):
    """Any failure making the executor (here: no cuda.bindings on a GPU) is an unavailable row with its reason."""
    import vdevice.pdl as pdl

    def refuse(*args, **kwargs):
        raise PdlUnavailable("cuda.bindings (cuda-python) is not importable")
    monkeypatch.setattr(pdl, "make_vdevice", refuse)
    built = _launch_build("lstm-tc", tmp_path)
    row = bench.pdl_variant(built, {}, "gpu")
    assert isinstance(row, bench.Unavailable) and row.name == "cuda-graph-pdl" and "cuda.bindings" in row.reason


def test_pack_params_points_at_values_and_addresses():
    """kernelParams: one pointer per argument, at the scalar's bytes (its own dtype) or the 64-bit device address."""
    class Dev:
        addr = 0x7F0000001000
    params, holders = pack_params([Dev(), np.int32(-3), np.float32(1.5), np.uint64(2**40)], lambda a: a.addr)
    assert params.dtype == np.uint64 and len(params) == 4
    assert [h.dtype for h in holders] == [np.uint64, np.int32, np.float32, np.uint64]
    assert int(holders[0][0]) == Dev.addr and holders[1][0] == -3 and holders[2][0] == 1.5
    assert [int(p) for p in params] == [h.ctypes.data for h in holders]


def test_launch_config_sets_programmatic_stream_serialization():
    """The launch config (cuda.bindings, no GPU needed to build it): one attribute, programmatic stream
    serialization allowed, the grid, block, shared memory and stream as given."""
    pytest.importorskip("cuda.bindings.driver", reason="cuda-bindings is not installed (the gpu extra)")
    from vdevice.pdl import PdlLauncher
    from cuda.bindings import driver as d
    cfg = PdlLauncher().config((3, 2, 1), (128, 1, 1), 4096, 0)
    assert (cfg.gridDimX, cfg.gridDimY, cfg.gridDimZ, cfg.blockDimX, cfg.sharedMemBytes) == (3, 2, 1, 128, 4096)
    assert cfg.numAttrs == 1
    attr = cfg.attrs[0]
    assert attr.id == d.CUlaunchAttributeID.CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION
    assert attr.value.programmaticStreamSerializationAllowed == 1


# ---- on a GPU ---------------------------------------------------------------------------------------------------
def _skip_without_a_pdl_gpu() -> None:
    """Skip, with the reason, where no GPU can run PDL launches (no GPU, below sm_90, no cuda.bindings)."""
    reason = bench.gpu_unavailable()
    if reason:
        pytest.skip(f"no GPU: {reason}")
    import cupy
    why = gpu_unavailable(cupy.cuda.Device(0).compute_capability)
    if why:
        pytest.skip(why)


@pytest.mark.gpu
@pytest.mark.parametrize("name", ["lstm-tc", "squeezenet"])
def test_pdl_graph_on_gpu_matches_onnxruntime(name, tmp_path):
    """On an sm_90+ GPU with cuda.bindings: the launch build's kernels from the PDL copy, launched with programmatic
    stream serialization and captured as one CUDA Graph, give onnxruntime's outputs (twice: the replay too) and are
    timed; elsewhere the reason is the skip."""
    _skip_without_a_pdl_gpu()
    m = generate(name, small=True)
    feeds = random_inputs(m, seed=0)
    refs = bench.reference_outputs(m, feeds)
    built = _launch_build(name, tmp_path, target="gpu")
    v = bench.pdl_variant(built, feeds, "gpu")
    assert isinstance(v, bench.Variant), v
    row = bench.evaluate(v, refs, repeats=5, warmup=2)
    assert row.status == "ok" and row.max_err <= bench.RTOL and row.median_ms > 0, row
    v.run()  # after the timed replays: still the reference
    assert bench.relative_error(v.outputs(), refs) <= bench.RTOL
    print(f"{name}: PDL graph {row.median_ms:.4f} ms, {row.note}")
    assert "0 programmatic" not in row.note, row.note  # counted edges: some must be programmatic


# ---- the GPU path with a stand-in driver (no GPU here: the flow, the attribute, the arguments) -------------------
class _FakeDriver:
    """The names of cuda.bindings.driver the launcher uses; the test sets cuLaunchKernelEx."""

    class CUresult:
        CUDA_SUCCESS = 0

    class CUlaunchAttributeID:
        CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION = 6

    class CUlaunchAttribute:
        def __init__(self):
            self.id, self.value = None, type("V", (), {"programmaticStreamSerializationAllowed": 0})()

    class CUlaunchConfig:
        pass

    class CUgraphDependencyType:
        CU_GRAPH_DEPENDENCY_TYPE_DEFAULT, CU_GRAPH_DEPENDENCY_TYPE_PROGRAMMATIC = 0, 1

    class CUstreamCaptureMode:
        CU_STREAM_CAPTURE_MODE_RELAXED = 2

    CUstream = CUfunction = staticmethod(int)


class _FakeStream:
    def __init__(self, log):
        self.ptr, self.log = 0x5000, log

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    def record(self):
        return ("event", len(self.log))

    def wait_event(self, event):
        self.log.append(("wait", event))

    def begin_capture(self):
        self.log.append("begin")

    def end_capture(self):
        self.log.append("end")
        log = self.log
        return type("G", (), {"launch": lambda self, stream: log.append("replay")})()


class _FakeGpu:
    """A vDevice backend that looks like the GPU one to the executor: its stream, functions and addresses."""

    name = "gpu"

    def __init__(self, log):
        self.log, self.stream = log, _FakeStream(log)
        def side():
            stream = _FakeStream(log)
            stream.ptr = 0x6000
            return stream
        self.cp = type("cp", (), {"cuda": type("c", (), {
            "Device": lambda *i: type("D", (), {"compute_capability": "90"})(), "Stream": lambda non_blocking: side()})})
        self.functions: dict[str, int] = {}

    def _allow_smem(self, expr, smem):
        ptr = self.functions.setdefault(expr, 0x1000 + len(self.functions))
        return type("F", (), {"kernel": type("K", (), {"ptr": ptr})()})()

    def pointer(self, array):
        return int(array.ctypes.data)

    def launch(self, expr, grid, block, smem, args, cooperative=False, yield_budget=None, stream=None):
        self.log.append(("plain", expr, stream.ptr if stream is not None else None))

    def synchronize(self):
        self.log.append("sync")


def test_gpu_flow_with_a_stand_in_driver(monkeypatch, tmp_path):
    """PdlGraphExecutor on a GPU-like backend: every op of the launch build once eagerly, then once inside a stream
    capture, in topological order, each through cuLaunchKernelEx with exactly one attribute, programmatic stream
    serialization = 1, the op's grid/block/shared memory, its function and the backend stream, the arguments as
    pointers to their values; a run replays the captured graph."""
    import vdevice.pdl as pdl
    built = _launch_build("lstm-tc", tmp_path)
    ex_cpu = bench.pdl_executor(built, "cpu")
    vd = ex_cpu.vd
    log: list = []
    fake, be = _FakeDriver(), _FakeGpu(log)
    monkeypatch.setattr(pdl, "driver_module", lambda: fake)
    vd.backend = be
    order = [i for step in ex_cpu.steps if not isinstance(step, pdl.CallStep) for i in step]
    assert sorted(order) == list(range(len(built.ops)))
    launches = []

    def launch(cfg, f, params, extra):  # the launch's argument pointers read back: what the driver would copy
        import ctypes
        i = order[len(launches) % len(order)]
        args = vd.op_launch_args(i)
        ptrs = (ctypes.c_uint64 * len(args)).from_address(params)
        got = []
        for k, a in enumerate(args):
            if isinstance(a, np.generic):
                got.append(np.frombuffer(ctypes.string_at(ptrs[k], a.dtype.itemsize), dtype=a.dtype)[0] == a)
            else:
                got.append(ctypes.c_uint64.from_address(ptrs[k]).value == be.pointer(a))
        launches.append((i, cfg, f, all(got)))
        log.append("launch")
        return (0,)
    fake.cuLaunchKernelEx = launch
    ex = pdl.PdlGraphExecutor(built.ops, {}, {}, deps=built.manifest.deps, vdevice=vd, steps=ex_cpu.steps)
    n = len(order)
    assert log == ["launch"] * n + ["sync", "begin"] + ["launch"] * n + ["end"]
    for k, (i, cfg, f, args_ok) in enumerate(launches):
        kern = built.ops[i].kernel
        assert args_ok, built.ops[i].name
        assert (cfg.gridDimX, cfg.gridDimY, cfg.gridDimZ) == kern.grid
        assert (cfg.blockDimX, cfg.blockDimY, cfg.blockDimZ) == kern.block
        assert cfg.sharedMemBytes == kern.dynamic_smem and cfg.hStream == be.stream.ptr and cfg.numAttrs == 1
        attr = cfg.attrs[0]
        assert attr.id == 6 and attr.value.programmaticStreamSerializationAllowed == 1
        assert f == be.functions[vd.wrapper(i)]
    log.clear()
    ex._launch_all()
    assert log == ["replay"]
    # the evidence: the run captured once more on a stream of its own, its edges counted by type
    log.clear()
    fake.cuStreamBeginCapture = lambda h, mode: (log.append(("begin", h, mode)) or 0,)
    fake.cuStreamEndCapture = lambda h: (log.append(("end", h)) or 0, "graph")
    edge = lambda t: type("E", (), {"type": t})()  # noqa: E731
    fake.cuGraphGetEdges = lambda g, n: (0, None, None, None, 3) if n == 0 else (
        0, [], [], [edge(1), edge(1), edge(0)], n)
    fake.cuGraphDestroy = lambda g: log.append(("destroy", g))
    launches.clear()
    assert ex.edge_types() == {"programmatic": 2, "default": 1}  # the fake's count: 3 edges, 2 programmatic
    assert log[0] == ("begin", 0x6000, 2) and log[-2:] == [("end", 0x6000), ("destroy", "graph")]
    assert log.count("launch") == n and all(cfg.hStream == 0x6000 for _, cfg, _, _ in launches)
    fake.cuGraphGetEdges = lambda g, n: (0, None, None, n)  # a 12.x binding without edge data: a reason
    assert "no edge data" in str(ex.edge_types())
    assert bench.pdl_note(ex).startswith("graph edges: this cuda.bindings")



# ---- a build's launch segments as PDL chains (vdevice.executors.SegmentGraphs.capture_chain) --------------------
def _mixed_build(name: str, tmp_path: Path, target: str = "cpu"):
    """The --small model built with tests/test_segments.py's forced mix (an rProgram, a one-stream launch segment, a
    library call)."""
    import onnx
    from test_segments import MIXED

    from rammer.build import build_model
    m = generate(name, small=True)
    onnx.save(m, str(tmp_path / f"{name}.onnx"))
    return m, build_model(tmp_path / f"{name}.onnx", tmp_path / "out", target=target, veus=8, quiet=True,
                          backends=("rtask", "library"), force=MIXED[name])


def _chain_run(built):
    """The run of steps (between rPrograms) that holds the build's longest one-stream launch segment."""
    from vdevice.executors import LaunchStep, step_runs
    runs = [r for r in step_runs(built.executor_steps(lambda k: k)) if isinstance(r, tuple)]
    return max(runs, key=lambda r: max((len(s.ops) for s in r if isinstance(s, LaunchStep) and s.chain), default=0))


def test_segment_chain_with_a_stand_in_driver(monkeypatch, tmp_path):
    """lstm-tc's layer-1 cells as a one-stream launch segment (9 ops, after an rProgram) captured on a GPU-like
    backend: the first op an ordinary launch on the capturing stream, every later op through cuLaunchKernelEx with
    programmatic stream serialization = 1, in the segment's order, on that stream, each with its own function,
    grid, block and shared memory; the run is captured once, then replayed."""
    import vdevice.pdl as pdl
    from vdevice.executors import LaunchStep, SegmentGraphs
    _, built = _mixed_build("lstm-tc", tmp_path)
    run = _chain_run(built)
    chain = next(s for s in run if isinstance(s, LaunchStep) and s.chain)
    assert len(chain.ops) == 9 and chain.deps == tuple(zip(chain.ops, chain.ops[1:]))
    vd = built.executor("persistent").vd  # compiled from the copy: the chained wrappers carry the prologue
    assert vd.pdl_chained >= set(chain.ops) and vd.pdl_note == ""
    assert all(has_prologue(vd.gen.source, built.ops[i].kernel.wrapper_name.rsplit("::", 1)[-1]) for i in chain.ops)
    log: list = []
    fake, be = _FakeDriver(), _FakeGpu(log)
    monkeypatch.setattr(pdl, "driver_module", lambda: fake)
    launched: list = []

    def launch(cfg, f, params, extra):
        launched.append((cfg, f))
        log.append(("pdl", f, cfg.hStream))
        return (0,)
    fake.cuLaunchKernelEx = launch
    vd.backend, vd.pdl_launcher = be, pdl.PdlLauncher()
    graphs = SegmentGraphs(vd)
    graphs.run(run)
    graphs.run(run)
    fn = lambda i: be.functions[vd.wrapper(i)]  # noqa: E731
    first, rest = chain.ops[0], chain.ops[1:]
    assert log == ["sync", "begin", ("plain", vd.wrapper(first), be.stream.ptr)] + [
        ("pdl", fn(i), be.stream.ptr) for i in rest] + ["end", "replay", "replay"]
    for i, (cfg, _) in zip(rest, launched):
        k = built.ops[i].kernel
        assert (cfg.gridDimX, cfg.gridDimY, cfg.gridDimZ) == k.grid and cfg.sharedMemBytes == k.dynamic_smem
        assert (cfg.blockDimX, cfg.blockDimY, cfg.blockDimZ) == k.block and cfg.numAttrs == 1
        assert cfg.attrs[0].id == 6 and cfg.attrs[0].value.programmaticStreamSerializationAllowed == 1
    # a forked segment (the multi-stream baseline's) stays a plain graph even on a vDevice with the launcher
    log.clear()
    SegmentGraphs(vd).capture((LaunchStep(chain.ops[:2], ()),))
    assert [e for e in log if isinstance(e, tuple) and e[0] == "pdl"] == []
    assert [e[0] for e in log if isinstance(e, tuple) and e[0] == "plain"] == ["plain", "plain"]


def test_a_chain_the_driver_refuses_is_recaptured_as_plain_graph_nodes(monkeypatch, tmp_path):
    """A driver whose cuLaunchKernelEx fails during the capture (PDL chains have never run on a GPU): the run is
    captured again with every op an ordinary launch (the prologue's wait then has no prerequisite grid), the
    executor's notes say why, later captures stay plain, and the graph is replayed."""
    import vdevice.pdl as pdl
    from vdevice.executors import LaunchStep, SegmentGraphs
    _, built = _mixed_build("lstm-tc", tmp_path)
    run = _chain_run(built)
    chain = next(s for s in run if isinstance(s, LaunchStep) and s.chain)
    vd = built.executor("persistent").vd
    log: list = []
    fake, be = _FakeDriver(), _FakeGpu(log)
    fake.cuGetErrorName = lambda err: (0, b"CUDA_ERROR_INVALID_VALUE")
    monkeypatch.setattr(pdl, "driver_module", lambda: fake)
    fake.cuLaunchKernelEx = lambda cfg, f, params, extra: (1,)
    vd.backend, vd.pdl_launcher = be, pdl.PdlLauncher()
    notes: list[str] = []
    graphs = SegmentGraphs(vd, notes)
    graphs.run(run)
    graphs.run(run)
    assert vd.pdl_launcher is None and len(notes) == 1 and "refused" in notes[0] and "cuLaunchKernelEx" in notes[0]
    second = log[log.index("end") + 1:]
    assert second[:2] == ["sync", "begin"] and second[-3:] == ["end", "replay", "replay"]
    assert [e[1] for e in second if isinstance(e, tuple)] == [vd.wrapper(i) for i in chain.ops]
    assert all(e[0] == "plain" for e in second if isinstance(e, tuple))


def test_segments_fall_back_to_plain_graphs_without_cuda_bindings(monkeypatch, tmp_path):
    """A GPU of sm_90 without cuda.bindings: the vDevice is compiled from the build's own sources (no prologue),
    says why in its note, the persistent executor lists the note, its segments are captured as plain graph nodes
    (no cuLaunchKernelEx), and the plan still runs (here on the emulator) to onnxruntime's outputs."""
    import vdevice.gpu as gpu
    import vdevice.pdl as pdl
    from vdevice.executors import PersistentExecutor, SegmentGraphs
    model, built = _mixed_build("transformer", tmp_path)
    chained = [i for g in built.manifest.launches if g.chain for i in g.ops]
    assert chained
    log: list = []
    monkeypatch.setattr(gpu, "_cupy", lambda: _FakeGpu(log).cp)  # a GPU of compute capability 9.0
    monkeypatch.setitem(sys.modules, "cuda.bindings", None)
    texts, note = pdl.chain_sources(built.ops, built.sources, chained, "gpu")
    assert texts is built.sources and note.startswith(pdl.CHAIN_FALLBACK) and "cuda-bindings" in note
    real = pdl.VDevice
    monkeypatch.setattr(pdl, "VDevice", lambda ops, texts, buffers, backend, *a, **k: real(ops, texts, buffers,
                                                                                            "cpu", *a, **k))
    vd = pdl.chain_vdevice(built.ops, built.sources, built.host_buffers(), "gpu", chained,
                           include_dirs=[str(built.folder / "rkernels")], views=built.manifest.views)
    assert vd.pdl_note == note and vd.pdl_launcher is None and not vd.pdl_chained
    assert not any(has_prologue(vd.gen.source, built.ops[i].kernel.wrapper_name.rsplit("::", 1)[-1])
                   for i in chained)
    ex = PersistentExecutor(built.ops, built.programs, {}, {}, vdevice=vd, steps=built.executor_steps(lambda k: k))
    assert ex.notes == [note]
    feeds = random_inputs(model, seed=3)
    data = built.check_inputs(feeds)
    host = {b.name: vd.buffers[b.name] for b in built.manifest.buffers
            if b.name in {t.base for t in built.manifest.inputs + built.manifest.outputs}}
    from rammer.runtime import _view
    for t in built.manifest.inputs:
        _view(host, t)[...] = data[t.name]
    ex.run(host)
    got = [_view(host, t).copy() for t in built.manifest.outputs]
    assert bench.relative_error(got, bench.reference_outputs(model, feeds)) <= bench.RTOL
    # on the GPU-like backend the same run is captured with plain launches only
    vd.backend = _FakeGpu(log)
    SegmentGraphs(vd).capture(_chain_run(built))
    assert log and not any(isinstance(e, tuple) and e[0] == "pdl" for e in log)
    assert any(isinstance(e, tuple) and e[0] == "plain" for e in log)


@pytest.mark.skipif(_nvrtc_missing() is not None, reason=str(_nvrtc_missing()))
def test_mixed_build_module_with_chains_as_the_gpu_runtime_compiles_it(tmp_path):
    """The build's own vDevice module of lstm-tc --small's mixed plan with its one-stream segment's wrappers from
    the copy (chain_sources), compiled as the GPU runtime does (NVRTC, sm_90): each chained wrapper waits before
    any global access; the interpreter, which runs the rPrograms' rTasks of the same sources, has no wait."""
    from vdevice.codegen import INTERPRETER, generate as generate_module
    from vdevice.pdl import chain_sources
    _, built = _mixed_build("lstm-tc", tmp_path)
    chained = [i for g in built.manifest.launches if g.chain for i in g.ops]
    texts, note = chain_sources(built.ops, built.sources, chained, "cpu")
    assert chained and note == ""
    gen = generate_module(built.ops, texts, [str(built.folder / "rkernels")])
    functions = _sm90_waits_first(gen, {built.ops[i].kernel.wrapper_name for i in chained})
    assert "ACQBULK" not in [i.base for i in functions[INTERPRETER]]


@pytest.mark.gpu
def test_mixed_plan_with_a_pdl_chain_on_gpu(tmp_path):
    """On an sm_90+ GPU with cuda.bindings: lstm-tc --small's mixed plan (a library call, rPrograms, a 9-op launch
    segment as a PDL chain) gives onnxruntime's outputs, twice (the captured graph replayed), with no fallback
    note; elsewhere the reason is the skip."""
    _skip_without_a_pdl_gpu()
    model, built = _mixed_build("lstm-tc", tmp_path, target="gpu")
    feeds = random_inputs(model, seed=3)
    refs = bench.reference_outputs(model, feeds)
    ex = built.executor("persistent", "gpu")
    assert ex.vd.pdl_launcher is not None and ex.notes == [], ex.notes
    for _ in range(2):
        got = built.run(feeds, backend="gpu")
        assert bench.relative_error([got[n] for n in built.output_names], refs) <= bench.RTOL
