"""The profiler: one rTask's time on a vEU, an rKernel's resources, and an rProgram's time (simulated vEUs).
Without a GPU a deterministic roofline model; with one, measured times cached on disk per device."""
from __future__ import annotations

import dataclasses
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np

from kernel_corpus.bindings import Scalar
from toolchain.cache import cache_dir
from vdevice.program import Program

from .graph import SchedulerError
from .simulate import makespan


@dataclass(frozen=True)
class DeviceSpec:
    """A GPU's peak numbers, the limits that keep one vEU or one legacy block below them, and the persistent
    runtime's fixed costs. Every figure says where it comes from; "estimate" marks the ones no measurement backs
    yet (tests/vdevice_gpu_bench.py measures them; a measured profile replaces the model on a GPU)."""

    name: str
    sms: int  # 132: results/h100-2026-11-23/device.txt (H100 80GB HBM3, SXM5)
    # FP32 without tensor cores: 132 SMs x 128 FMA lanes x 2 FLOP x 1.98 GHz boost = 67 TFLOP/s (NVIDIA H100
    # datasheet, SXM5: 67 TFLOPS FP32)
    peak_flops: float = 67e12
    # HBM3: the datasheet's 3.35 TB/s, of which streaming kernels reach about 90% (the figure the model used before)
    mem_bw: float = 3.0e12
    # L2: 50 MB (datasheet); read bandwidth 5.5 TB/s: DESIGN.md's floor for LSTM-TC (1.99 GB per inference from L2
    # in 0.28-0.36 ms gives 5.5-7.1 TB/s; the low end)
    l2_bytes: int = 50 * 1024 * 1024
    l2_bw: float = 5.5e12
    # An SM issues one warp-instruction per clock from each of its 4 schedulers (H100 whitepaper: 4 SM
    # sub-partitions); a dependent FP32 chain has about 4 cycles of latency, so 4 warps per scheduler (16 per SM)
    # keep issue busy without instruction-level parallelism (estimate from those two figures)
    saturating_warps: int = 16
    # A thread keeps about 16 bytes of loads in flight (one float4 or four independent floats: estimate) against
    # about 0.6 us of DRAM latency (estimate; public H100 microbenchmarks report 0.48-0.7 us): the bandwidth one
    # vEU or one block can pull is bounded by threads x 16 B / 0.6 us whatever the device's share
    bytes_in_flight_per_thread: int = 16
    dram_latency_us: float = 0.6
    l2_latency_us: float = 0.3  # an L2 hit: about half the DRAM latency (estimate; 0.2-0.3 us reported publicly)
    # Per-rTask dispatch of the interpreter: 1.25 us measured for the old dispatch (three dependent global loads,
    # an mbarrier re-init, three __syncthreads and a release fence per rTask: results/h100-2026-11-23/
    # vdevice_bench.txt); the current one (one record fetched ahead, one __syncthreads, a fence only when awaited)
    # is estimated at 0.45 us: one dependent argument load (~0.15 us L2 hit) plus the vEU barrier and dispatch
    rtask_overhead_us: float = 0.45
    # A barrier-rTask: a counter hand-off (0.65 us flag hand-off between resident blocks, DESIGN.md) plus each
    # arrival's release reduction on the one counter, serialised at its L2 slice: 0.0055 us per arrival from the
    # probe's step barrier (2.1 us over 264 blocks, DESIGN.md: (2.1 - 0.65) / 264). barrier_us is the cost at the
    # profiler's typical fan-in (every vEU), set by Profiler; measured runtime costs replace it
    handoff_us: float = 0.65
    arrival_us: float = 0.0055
    barrier_us: float | None = None  # None: barrier_cost_us at the profiler's vEU count
    launch_us: float = 6.2  # one persistent launch per rProgram: H100 eager launch, DESIGN.md
    # The baselines as they ran on the H100 (results/h100-2026-11-23/vdevice_bench.txt): a tiny op took 9.41 us
    # launched eagerly through CuPy (RammerBase) and 1.44 us as a CUDA Graph node; a longer kernel adds its own
    # time to the launch gap (6.2 us eager, 0.94 us per graph node, DESIGN.md)
    kernel_launch_us: float = 6.2
    graph_node_us: float = 0.94
    tiny_op_eager_us: float = 9.41
    tiny_op_graph_us: float = 1.44
    # registers a legacy kernel is assumed to use when its ptxas figures are unknown (the corpus kernels use 32-64;
    # the SASS reading: op-by-op launches get 40-64 warps per SM)
    legacy_registers: int = 64
    max_threads_per_block: int = 1024
    max_smem_per_block: int = 227 * 1024


H100 = DeviceSpec(name="NVIDIA H100", sms=132)

# What fraction of issue slots the inner loop spends on FFMA, read from the sm_90 SASS of the corpus kernels
# (DESIGN.md, "What the first H100 session and the sm_90 SASS showed"): FP32 throughput is at most this share of
# peak (one warp-FFMA per scheduler and clock is the peak). The LSTM cell: 16 FFMA per 61 instructions of its
# accumulate loop (issue 14). Kernels not listed are memory-bound (elementwise, reductions, layout): their
# FLOPs never bind, so they get the lowest listed share.
FFMA_SHARE = {"conv_direct": 0.09, "conv_implicit_gemm": 0.09, "conv_depthwise_tiled": 0.09, "gemm_tiled": 0.18,
              "gemm_regblock": 0.064, "lstm_cell_fused": 16 / 61, "gemv_warp": 0.064, "gemv_col": 0.064,
              "gemv_splitk_partial": 0.064}
# Tensor-core kernels (legacy/tc.cu): the share of their tensor-core peak (Launch.flop_rate) the inner loop can
# issue, = HMMA share of the loop / the HMMA share that saturates the tensor cores. HMMA shares from the sm_90 SASS
# in BENCHMARKS.md ("Kernel SASS, static evidence": gemm_tc<64,64> 96 of 409, conv_tc<64,64> 96 of 491); the
# saturating share, 0.4, is an estimate: H100 dense TF32 at 378 TFLOP/s over 132 SMs x 4 schedulers x 1.755 GHz
# is ~204 MACs per scheduler and clock, one 512-MAC HMMA.1684 every 2.5 issue slots.
HMMA_SATURATING_SHARE = 0.4
FFMA_SHARE |= {"gemm_tc": 96 / 409 / HMMA_SATURATING_SHARE, "conv_tc": 96 / 491 / HMMA_SATURATING_SHARE}
# The weight-stationary cell (legacy/rnn.cu): 16 FFMA per 39 instructions of lstm_cell_resident<20,256>'s loop
# (a 16-byte shared-memory weight load and a broadcast global load of x or h per four; BENCHMARKS.md, "Kernel SASS")
FFMA_SHARE["lstm_cell_resident"] = 16 / 39
DEFAULT_FFMA_SHARE = min(FFMA_SHARE.values())


def ffma_share(kernel: str) -> float:
    """The FFMA share of a legacy kernel's inner loop (FFMA_SHARE)."""
    return FFMA_SHARE.get(kernel.split("<", 1)[0].rsplit("::", 1)[-1], DEFAULT_FFMA_SHARE)


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
    """Cache key of a launch: kernel, template arguments, the shape of the work (grid, block, scalars) and the
    digest of the kernel's source (an edited kernel is measured again)."""
    scalars = [str(a.value) for a in launch.args if isinstance(a, Scalar)]
    src = getattr(launch, "source_digest", "")
    return (f"{launch.expr} grid={tuple(launch.grid)} block={tuple(launch.block)} "
            f"smem={launch.dynamic_smem} scalars=({','.join(scalars)})" + (f" src={src}" if src else ""))


def default_cache_dir() -> Path:
    """The toolchain's cache root (the one the CPU emulator caches builds in), sub-folder `profiles`."""
    return cache_dir("profiles")


@dataclass(frozen=True)
class RuntimeCosts:
    """The persistent runtime's fixed costs measured on a device (they replace DeviceSpec's defaults)."""

    barrier_us: float  # one barrier-rTask awaiting one rTask on another vEU (a hand-off, fan-in 1)
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
        self.fixed_barrier = device.barrier_us is not None  # a figure given with the device, whatever the fan-in
        if device.barrier_us is None:
            self.device = dataclasses.replace(device, barrier_us=self.barrier_cost_us(self.num_veus))
        self.resident_bytes: int | None = None  # the model's weights and activations, when the caller knows them
        self.use_runtime_costs()
        self.misses = 0  # measured mode without a measuring function: launches that fell back to the model
        self.memo: dict[str, float] = {}
        self.by_id: dict[int, tuple[Any, float]] = {}

    def use_runtime_costs(self) -> None:
        """Price barriers and launches with the cache's measured runtime costs, when it has them."""
        rt = self.cache.runtime if self.cache else None
        if rt is not None:  # the measured hand-off (fan-in 1) replaces the model's; arrivals still add per fan-in
            self.device = dataclasses.replace(self.device, handoff_us=rt.barrier_us, launch_us=rt.launch_us)
            if not self.fixed_barrier:
                self.device = dataclasses.replace(self.device, barrier_us=self.barrier_cost_us(self.num_veus))

    def describe(self, target: str | None = None) -> str:
        """One line for the user: active mode, the device whose times it gives, and the cache path. For a build
        whose target is the CPU the model's GPU figures only order the plan: the line says so and quotes none."""
        cache = str(self.cache.path) if self.cache else "none (model mode)"
        if target == "cpu" and self.mode == "model":
            return (f"profiler: mode=model, the {self.device.name} cost model orders the plan (target cpu: the "
                    f"CPU emulator runs it; no time is predicted) vEUs={self.num_veus}")
        runtime = f"barrier={self.device.barrier_us:.3g}us launch={self.device.launch_us:.3g}us"
        if target == "cpu":  # measured on the emulator: its own times, said to be so
            return (f"profiler: mode={self.mode} device={self.device.name} (emulator times, which order the plan "
                    f"and say nothing about a GPU) vEUs={self.num_veus} cache={cache} {runtime}")
        return f"profiler: mode={self.mode} device={self.device.name} vEUs={self.num_veus} cache={cache} {runtime}"

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

    def barrier_cost_us(self, fan_in: int) -> float:
        """A barrier-rTask on a counter that `fan_in` rTasks increment (vdevice/counters.py): one hand-off plus the
        arrivals serialised on the counter; the waiter polls one counter whatever the fan-in. A barrier figure given
        with the device or measured on it is used as it is."""
        if self.fixed_barrier and self.device.barrier_us is not None:
            return self.device.barrier_us
        return self.device.handoff_us + self.device.arrival_us * max(1, fan_in)

    def barrier_costs_us(self, fan_ins: np.ndarray) -> np.ndarray:
        """barrier_cost_us of each fan-in (vectorised for the mechanism's candidate vEUs)."""
        if self.fixed_barrier and self.device.barrier_us is not None:
            return np.full(len(fan_ins), self.device.barrier_us)
        return self.device.handoff_us + self.device.arrival_us * np.maximum(1, fan_ins)

    @property
    def veus_per_sm(self) -> int:
        """vEUs sharing one SM."""
        return -(-self.num_veus // self.device.sms)

    def modelled(self, launch: Any) -> float:
        """One rTask on one vEU: the dispatch overhead plus its work at the vEU's share of its SM (see task_us)."""
        for attr in ("flops", "bytes"):
            if not hasattr(launch, attr):
                raise SchedulerError(f"launch of {launch.kernel} has no '{attr}': the cost model needs it")
        return self.device.rtask_overhead_us + self.task_us(launch, self.veus_per_sm, self.num_veus)

    def task_us(self, launch: Any, per_sm: int, concurrent: int) -> float:
        """One block's work when `per_sm` blocks share its SM and `concurrent` run on the device: compute at the
        kernel's FFMA share of the SM's peak, scaled down when the SM's resident warps cannot hide latency, and
        memory at the device's (or L2's) bandwidth share, bounded by the loads the block's threads keep in flight over
        the DRAM (or L2) latency."""
        d = self.device
        tasks = max(1, launch.rtasks)
        warps = -(-launch.threads // 32)
        latency = min(1.0, per_sm * warps / d.saturating_warps)
        # tensor-core kernels: their peak as a multiple of the FP32 CUDA-core peak (Launch.flop_rate)
        sm_rate = (d.peak_flops * getattr(launch, "flop_rate", 1.0) / d.sms * ffma_share(launch.kernel) * latency
                   / per_sm)
        compute_s = launch.flops / tasks / sm_rate
        l2 = self.l2_resident(launch)
        bandwidth, latency_us = (d.l2_bw, d.l2_latency_us) if l2 else (d.mem_bw, d.dram_latency_us)
        in_flight = launch.threads * d.bytes_in_flight_per_thread / (latency_us * 1e-6)
        memory_s = launch.bytes / tasks / min(bandwidth / max(1, concurrent), in_flight)
        return max(compute_s, memory_s) * 1e6

    def l2_resident(self, launch: Any) -> bool:
        """Whether a launch's operands come from L2: the model's whole working set fits in L2 (weights read every
        inference or every step stay resident), and so does the launch's own traffic."""
        limit = self.device.l2_bytes
        return self.resident_bytes is not None and self.resident_bytes <= limit and launch.bytes <= limit

    def legacy_kernel_us(self, launch: Any) -> float:
        """The legacy kernel launched alone as written: as many of its blocks per SM as its threads, registers
        (assumed, DeviceSpec.legacy_registers) and shared memory allow, in waves over the device; no interpreter."""
        from vdevice.occupancy import SM90, blocks_per_sm
        d = self.device
        smem = int(launch.dynamic_smem) + int(getattr(launch, "static_smem", 0) or 0)
        fit = max(1, blocks_per_sm(launch.threads, d.legacy_registers, smem, SM90).blocks)
        blocks = max(1, launch.rtasks)
        per_sm = min(fit, -(-blocks // d.sms))
        waves = -(-blocks // (d.sms * fit))
        return waves * self.task_us(launch, per_sm, min(blocks, d.sms * fit))

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
        """The same legacy kernels launched one at a time as written (their own occupancy, no interpreter, so
        independent of the vDevice's vEUs): after an eager launch each, or as CUDA Graph nodes (the graph itself
        launched once); an op never takes less than a tiny op took on the H100."""
        d = self.device
        kernels = [self.legacy_kernel_us(launch) for launch in launches]
        return {"op-by-op": sum(max(d.tiny_op_eager_us, k + d.kernel_launch_us) for k in kernels),
                "cuda-graph": d.kernel_launch_us + sum(max(d.tiny_op_graph_us, k + d.graph_node_us)
                                                       for k in kernels)}

    def program_us(self, program: Program, launches: Sequence[Any]) -> float:
        """Whole rProgram: simulate every vEU's timeline (rTasks, barrier waits), plus one launch;
        `launches[i]` is the corpus launch of program op i."""
        if not any(program.veus):
            return 0.0
        span = makespan(program, lambda op: self.rtask_us(launches[op]), self.barrier_cost_us)
        return span + self.device.launch_us
