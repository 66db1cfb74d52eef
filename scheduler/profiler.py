"""The profiler: one rTask's time on a vEU, an rKernel's resources, and an rProgram's time (simulated vEUs).
Without a GPU a deterministic roofline model; with one, measured times cached on disk per device."""
from __future__ import annotations

import dataclasses
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

from kernel_corpus.bindings import Scalar
from toolchain.cache import cache_dir
from vdevice.program import Program

from .graph import SchedulerError
from .simulate import makespan


@dataclass(frozen=True)
class DeviceSpec:
    """Peak numbers of a GPU and the fixed costs of the persistent runtime on it."""

    name: str
    sms: int
    peak_flops: float  # FLOP/s, fp32 without tensor cores
    mem_bw: float  # bytes/s
    rtask_overhead_us: float = 1.0  # fetch instruction, begin/end task, vEU barrier
    barrier_us: float = 0.7  # a barrier-rTask: flag hand-off between resident blocks
    launch_us: float = 6.2  # one persistent launch per rProgram (eager launch)
    kernel_launch_us: float = 6.2  # one eager launch per operator: the op-by-op (RammerBase) baseline
    graph_node_us: float = 0.94  # one launch replayed inside a CUDA Graph
    saturating_threads: int = 128  # threads one rTask needs to use its SM share fully (128 FP32 lanes / SM)
    max_threads_per_block: int = 1024
    max_smem_per_block: int = 227 * 1024


H100 = DeviceSpec(name="NVIDIA H100", sms=132, peak_flops=51e12, mem_bw=3.0e12)


@dataclass(frozen=True)
class Resources:
    """What one rKernel launch needs from a vEU."""

    threads: int
    smem_bytes: int
    registers: int | None  # per thread; known only when measured


@dataclass(frozen=True)
class Measurement:
    """A measured rTask time (and the kernel's registers per thread, when the executor reports them)."""

    rtask_us: float
    registers: int | None = None


MeasureFn = Callable[[Any], Measurement]


def launch_key(launch: Any) -> str:
    """Cache key of a launch: kernel, template arguments and the shape of the work (grid, block, scalars)."""
    scalars = [str(a.value) for a in launch.args if isinstance(a, Scalar)]
    return (f"{launch.expr} grid={tuple(launch.grid)} block={tuple(launch.block)} "
            f"smem={launch.dynamic_smem} scalars=({','.join(scalars)})")


def default_cache_dir() -> Path:
    """The toolchain's cache root (the one the CPU emulator caches builds in), sub-folder `profiles`."""
    return cache_dir("profiles")


@dataclass(frozen=True)
class RuntimeCosts:
    """The persistent runtime's fixed costs measured on a device (they replace DeviceSpec's defaults)."""

    barrier_us: float  # one barrier-rTask: a hand-off from an rTask on another vEU
    launch_us: float  # one persistent launch of an rProgram (an empty program on all vEUs)


class ProfileCache:
    """Measured rTask times and runtime costs of one device, in one JSON file:
    {"device": name, "runtime": {"barrier_us", "launch_us"} or null, "entries": {key: {...}}}."""

    def __init__(self, device: str, cache_dir: Path | None = None) -> None:
        slug = re.sub(r"[^A-Za-z0-9]+", "-", device).strip("-").lower()
        self.device = device
        self.path = (cache_dir or default_cache_dir()) / f"{slug}.json"
        self.entries: dict[str, Measurement] = {}
        self.runtime: RuntimeCosts | None = None
        if self.path.is_file():
            self.load()

    def load(self) -> None:
        """Read the file; a corrupt one is an error naming the path (delete it to re-measure)."""
        try:
            data = json.loads(self.path.read_text())
            self.entries = {k: Measurement(float(v["rtask_us"]), v.get("registers"))
                            for k, v in data["entries"].items()}
            rt = data.get("runtime")
            self.runtime = RuntimeCosts(float(rt["barrier_us"]), float(rt["launch_us"])) if rt else None
        except (ValueError, KeyError, TypeError) as exc:
            raise SchedulerError(f"profile cache {self.path} is corrupt ({exc}); delete it to re-measure") from None

    def save(self) -> None:
        """Write the file atomically (rename over the old one)."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        data = {"device": self.device, "runtime": vars(self.runtime) if self.runtime else None,
                "entries": {k: {"rtask_us": m.rtask_us, "registers": m.registers} for k, m in self.entries.items()}}
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps(data, indent=1, sort_keys=True))
        tmp.replace(self.path)


class Profiler:
    """Answers rTask time, resources and rProgram time for one vDevice of `num_veus` vEUs."""

    def __init__(self, device: DeviceSpec = H100, num_veus: int | None = None, mode: str = "model",
                 measure: MeasureFn | None = None, cache_dir: Path | None = None) -> None:
        if mode not in ("model", "measured"):
            raise SchedulerError(f"profiler mode must be 'model' or 'measured', not '{mode}'")
        self.device = device
        self.num_veus = num_veus or device.sms
        self.mode = mode
        self.measure = measure
        # a measured rTask time depends on how many vEUs share the device: one cache file per (device, vEUs)
        self.cache = ProfileCache(f"{device.name} {self.num_veus} vEUs", cache_dir) if mode == "measured" else None
        self.use_runtime_costs()
        self.misses = 0  # measured mode without a measuring function: launches that fell back to the model
        self.memo: dict[str, float] = {}
        self.by_id: dict[int, tuple[Any, float]] = {}

    def use_runtime_costs(self) -> None:
        """Price barriers and launches with the cache's measured runtime costs, when it has them."""
        rt = self.cache.runtime if self.cache else None
        if rt is not None:
            self.device = dataclasses.replace(self.device, barrier_us=rt.barrier_us, launch_us=rt.launch_us)

    def describe(self) -> str:
        """One line for the user: active mode, device and cache path."""
        cache = str(self.cache.path) if self.cache else "none (model mode)"
        return (f"profiler: mode={self.mode} device={self.device.name} vEUs={self.num_veus} cache={cache} "
                f"barrier={self.device.barrier_us:.3g}us launch={self.device.launch_us:.3g}us")

    def rtask_us(self, launch: Any) -> float:
        """Time of one rTask of `launch` on one vEU."""
        hit = self.by_id.get(id(launch))
        if hit is not None and hit[0] is launch:
            return hit[1]
        key = launch_key(launch)
        if key not in self.memo:
            self.memo[key] = self.measured(key, launch) if self.cache else self.modelled(launch)
        self.by_id[id(launch)] = (launch, self.memo[key])  # the launch is kept alive, so its id stays its own
        return self.memo[key]

    def measured(self, key: str, launch: Any) -> float:
        """From the cache, else from the injected measuring function (then cached), else the model."""
        hit = self.cache.entries.get(key)
        if hit is None and self.measure is not None:
            hit = self.measure(launch)
            self.cache.entries[key] = hit
            self.cache.save()
        if hit is None:
            self.misses += 1
            return self.modelled(launch)
        return hit.rtask_us

    def modelled(self, launch: Any) -> float:
        """Roofline on the vEU's share of the device: overhead + max(FLOPs / FLOP rate, bytes / bandwidth)."""
        for attr in ("flops", "bytes"):
            if not hasattr(launch, attr):
                raise SchedulerError(f"launch of {launch.kernel} has no '{attr}': the cost model needs it")
        d = self.device
        tasks = max(1, launch.rtasks)
        share = max(self.num_veus, d.sms)  # a vEU never gets more than its SM
        util = min(1.0, launch.threads / d.saturating_threads)
        compute_s = launch.flops / tasks / (d.peak_flops * getattr(launch, "flop_rate", 1.0) / share * util)
        memory_s = launch.bytes / tasks / (d.mem_bw / share * util)
        return d.rtask_overhead_us + max(compute_s, memory_s) * 1e6

    def resources(self, launch: Any) -> Resources:
        """Threads, shared memory (dynamic + the rKernel's static layout when known) and registers."""
        regs = None
        if self.cache:
            hit = self.cache.entries.get(launch_key(launch))
            regs = hit.registers if hit else None
        static = int(getattr(launch, "static_smem", 0) or 0)
        return Resources(launch.threads, int(launch.dynamic_smem) + static, regs)

    def launch_us(self, launch: Any, num_veus: int | None = None) -> float:
        """A launch alone on the vDevice: rounds of rTasks over the vEUs."""
        veus = num_veus or self.num_veus
        rounds = -(-launch.rtasks // veus)
        return rounds * self.rtask_us(launch)

    def baselines_us(self, launches: Sequence[Any]) -> dict[str, float]:
        """The same launches one kernel at a time on the whole device, each after an eager launch or as a CUDA Graph
        node (the graph itself launched once, like one eager launch): what the op-by-op and CUDA Graph baselines
        should take by this model."""
        dev = self.device
        work = sum(self.launch_us(launch, dev.sms) for launch in launches)
        return {"op-by-op": work + len(launches) * dev.kernel_launch_us,
                "cuda-graph": work + dev.kernel_launch_us + len(launches) * dev.graph_node_us}

    def program_us(self, program: Program, launches: Sequence[Any]) -> float:
        """Whole rProgram: simulate every vEU's timeline (rTasks, barrier waits), plus one launch;
        `launches[i]` is the corpus launch of program op i."""
        if not any(program.veus):
            return 0.0
        span = makespan(program, lambda op: self.rtask_us(launches[op]), self.device.barrier_us)
        return span + self.device.launch_us
