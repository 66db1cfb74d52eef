"""The profiler's measured mode: time every distinct launch shape of a workload on the vDevice that will run it
(each alone, its rTasks spread over all vEUs, minus an empty program's time) and the runtime's own costs (an
empty program's launch, a barrier hand-off between two vEUs), and keep them in the profiler's on-disk cache, so
later builds on the same device reuse them."""
from __future__ import annotations

import dataclasses
import sys
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from kernel_corpus.bindings import Temp
from vdevice.program import Op, Program, TaskRef

from .graph import Graph
from .plan import ProgramOp, default_vdevice_op
from .profiler import H100, DeviceSpec, Measurement, Profiler, RuntimeCosts, launch_key
from .workload import Workload

MIN_RTASK_US = 0.05  # below timer noise: an rTask is never free
HANDOFFS = 64  # links of the ping-pong chain that prices one barrier-rTask
CPU_DEVICE = "CPU emulator"


@dataclass(frozen=True)
class Sample:
    """One launch shape to measure: the first candidate launch of the workload that has this cache key."""

    key: str
    op: ProgramOp


def device_spec(target: str) -> DeviceSpec:
    """The device a build for `target` runs on: the visible GPU (name, SM count) or the CPU emulator; the cost
    model's peak numbers stay the H100's (they only serve launches that could not be measured)."""
    if target != "gpu":
        return H100.named(CPU_DEVICE)
    import cupy

    from vdevice.gpu import gpu_available
    ok, name = gpu_available()
    if not ok:
        raise RuntimeError(name)
    sms = int(cupy.cuda.Device().attributes["MultiProcessorCount"])
    from vdevice.pdl import pdl_unavailable
    # the launch segments' price follows what the executor will run: PDL chains only where this GPU and its
    # Python bindings allow them (vdevice.pdl), else plain graph nodes
    return dataclasses.replace(H100.named(name, sms), pdl_refused=pdl_unavailable("gpu"))


def pending(workload: Workload, profiler: Profiler) -> tuple[list[Sample], int]:
    """Distinct launch shapes among all candidates of all nodes that the profiler's cache does not hold yet,
    and how many distinct shapes it does hold."""
    seen: dict[str, Sample] = {}
    cached: set[str] = set()
    for spec in workload.ops:
        for cand in spec.candidates:
            for i, launch in enumerate(cand.launches):
                key = launch_key(launch)
                if key in profiler.cache.entries:
                    cached.add(key)
                elif key not in seen:
                    seen[key] = Sample(key, ProgramOp(spec.name, spec.op_type, cand.variant, cand.source, i, launch,
                                                      spec.inputs, spec.outputs))
    return list(seen.values()), len(cached)


def sample_data(graph: Graph, ops: list[Op], samples: list[Sample], rng: np.random.Generator) -> dict[str, np.ndarray]:
    """A buffer per argument name: constants keep their values (indices stay in range), other float tensors get
    random values in [-1, 1), integer ones zeros, temps their byte size."""
    data: dict[str, np.ndarray] = {}
    for op, s in zip(ops, samples):
        for ref, arg in zip(op.args, s.op.launch.args):
            name = ref.buffer
            if name is None or name in data:
                continue
            if isinstance(arg, Temp):
                data[name] = np.zeros(-(-int(arg.nbytes) // 4), dtype=np.float32)
            elif graph.is_constant(name):
                data[name] = np.asarray(graph.constant(name), order="C")
            else:
                t = graph.tensors[name]
                kind = np.dtype(t.dtype).kind
                data[name] = (rng.uniform(-1, 1, t.shape).astype(t.dtype) if kind == "f"
                              else np.zeros(t.shape, dtype=t.dtype))
    return data


def spread(ops: list[Op], index: int, veus: int) -> Program:
    """A program running only op `index`, its rTasks round-robin over the vEUs, no barriers."""
    prog = Program(ops, veus)
    for r in range(ops[index].kernel.rtasks):
        prog.append(TaskRef(index, r), r % veus)
    return prog


def cheapest(workload: Workload) -> Sample:
    """The candidate launch with the least work: its rTask 0, repeated, is the probe for barrier hand-offs."""
    best = min(((ln.flops + ln.bytes, spec, cand, i, ln) for spec in workload.ops for cand in spec.candidates
                for i, ln in enumerate(cand.launches)), key=lambda t: t[0])
    _, spec, cand, i, ln = best
    return Sample(launch_key(ln), ProgramOp(spec.name, spec.op_type, cand.variant, cand.source, i, ln,
                                            spec.inputs, spec.outputs))


def handoff_programs(ops: list[Op], first: int, count: int) -> tuple[Program, Program]:
    """A chain of `count` one-rTask ops ping-ponged between two vEUs (a barrier-rTask before each), and the same
    chain on one vEU with no barriers: their difference per link is the cost of one hand-off."""
    pingpong, single = Program(ops, 2), Program(ops, 2)
    for k in range(count):
        task = TaskRef(first + k, 0)
        if k:
            pingpong.wait(task, [TaskRef(first + k - 1, 0)])
        pingpong.append(task, k % 2)
        single.append(task, 0)
    return pingpong, single


def measure_workload(workload: Workload, profiler: Profiler, target: str, *,
                     convert: Callable[[list[Op]], tuple[list[Op], dict[str, str]]], runs: int = 20,
                     quiet: bool = False) -> tuple[int, int]:
    """Measure the launch shapes missing from the cache (and, once per cache, the runtime's barrier and launch
    costs), save it, and return (shapes measured, shapes found in the cache).
    `convert(ops)` returns the ops bound to converted rKernels and the converted sources (build.convert_ops)."""
    from tqdm import tqdm

    from vdevice.executors import PersistentExecutor, VDevice, VDeviceError

    samples, cached = pending(workload, profiler)
    calibrate = profiler.cache.runtime is None
    if not any(c.launches for spec in workload.ops for c in spec.candidates) or not (samples or calibrate):
        return 0, cached  # nothing runs (every output a constant or a view), or everything is cached
    probe = cheapest(workload)
    first = len(samples)
    vops = [dataclasses.replace(default_vdevice_op(s.op), name=f"m{i}:{s.op.name}") for i, s in enumerate(samples)]
    vops += [dataclasses.replace(default_vdevice_op(probe.op), name=f"handoff{k}") for k in range(HANDOFFS)]
    ops, texts = convert(vops)
    data = sample_data(workload.graph, ops[:first + 1], samples + [probe], np.random.default_rng(0))
    vd = VDevice(ops, texts, data, backend=target, veus_per_sm=profiler.veus_per_sm)  # the build's launch bounds
    timed = lambda prog: PersistentExecutor(ops, [prog], texts, {}, vdevice=vd).time(runs)  # noqa: E731
    base_ms = timed(Program(ops, profiler.veus))
    for i, s in enumerate(tqdm(samples, file=sys.stderr, disable=quiet, unit="shape", leave=False)):
        try:
            ms = timed(spread(ops, i, profiler.veus))
        except VDeviceError as exc:  # e.g. more vEUs than fit with this rKernel's shared memory: model it instead
            if not quiet:
                tqdm.write(f"  profiler: {s.key} not measured ({exc})", file=sys.stderr)
            continue
        rounds = -(-ops[i].kernel.rtasks // profiler.veus)
        profiler.cache.entries[s.key] = Measurement(max((ms - base_ms) * 1e3 / rounds, MIN_RTASK_US),
                                                    registers(vd, i))
    if calibrate:
        pingpong, single = handoff_programs(ops, first, HANDOFFS)
        barrier_us = max((timed(pingpong) - timed(single)) * 1e3 / (HANDOFFS - 1), 0.0)
        profiler.cache.runtime = RuntimeCosts(barrier_us, base_ms * 1e3)
        profiler.use_runtime_costs()
    profiler.cache.save()
    return len(samples), cached


def registers(vd: Any, index: int) -> int | None:
    """Registers per thread of op `index`'s plain kernel on the GPU (what occupancy depends on); None on the CPU."""
    if vd.backend.name != "gpu":
        return None
    try:
        return int(vd.backend.function(vd.wrapper(index)).num_regs)
    except Exception:  # an older CuPy without num_regs: the cache simply has no register count
        return None

