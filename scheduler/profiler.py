"""The profiler: one rTask's time on a vEU, an rKernel's resources, and an rProgram's time (simulated vEUs).
Without a GPU a deterministic roofline model; with one, measured times cached on disk per device."""
from __future__ import annotations

import dataclasses
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable, Sequence

import numpy as np

from kernel_corpus.bindings import Scalar
from toolchain.cache import cache_dir
from vdevice.program import Program
from vdevice.target import H100 as H100_DEVICE
from vdevice.target import Device

from .graph import SchedulerError
from .dispatch_costs import EAGER_LAUNCH_US, INTERPRETER, LAUNCHES, InterpreterCosts, LaunchCosts
from .simulate import StepCosts, simulate, simulate_steps


@dataclass(frozen=True)
class DeviceSpec:
    """A GPU's peak numbers, the limits that keep one vEU or one legacy block below them, and the persistent
    runtime's fixed costs. Every figure says where it comes from; "estimate" marks the ones no measurement backs
    yet (tests/vdevice_gpu_bench.py measures them; a measured profile replaces the model on a GPU)."""

    # The hardware: SMs, per-SM limits, peak FLOP/s and bandwidths, each figure sourced in vdevice/target.py (the
    # one device table, which the occupancy arithmetic reads too)
    hw: Device = H100_DEVICE
    # An SM issues one warp-instruction per clock from each of its 4 schedulers (H100 whitepaper: 4 SM
    # sub-partitions); a kernel's loop reaches that issue bound only with every warp slot of the SM filled (64
    # warps, the SM's limit), below it the issue rate scales with the resident warps. Calibrated: the estimate
    # was 16 (4 warps per scheduler hide a dependent FFMA's 4 cycles), which left the H100 measurements of
    # 2026-11-27 2.2-3.2x slower than predicted; 64 brings all six figures (three persistent builds, three CUDA
    # Graphs) within 1.32x (tests/calibration.py, BENCHMARKS.md "Measured against predicted"): the loops'
    # shared-memory, L2 and barrier latencies need the whole SM's warps, not four per scheduler
    saturating_warps: int = 64
    # A thread keeps about 16 bytes of loads in flight (one float4 or four independent floats: estimate) against
    # about 0.6 us of DRAM latency (estimate; public H100 microbenchmarks report 0.48-0.7 us): the bandwidth one
    # vEU or one block can pull is bounded by threads x 16 B / 0.6 us whatever the device's share
    bytes_in_flight_per_thread: int = 16
    dram_latency_us: float = 0.6
    # The latency of a kernel's weight stream from L2 (the in-flight bound above, for operands that stay in L2).
    # Fitted, 2026-11-27 09:00 H100 run (results/h100-2026-11-27-0900/results.jsonl, commit 79f1ec3, lstm-tc): two
    # CUDA Graphs of 1000 latency-bound LSTM cells whose 21 MB of weights fit in L2, "cuda-graph" (lstm_cell_fused,
    # 16 B in flight per thread, 7.801 ms) and "rammer-graph" (lstm_cell_resident unpinned, 32 B, 4.691 ms), priced
    # by tests/calibration.py: 0.253 us (the micro-benchmark's chained L2 round trip, L2_ROUND_TRIP_US, which the
    # interpreter's own figures keep) left them 1.68x / 1.40x slower than predicted; 0.42 us leaves 1.09x / 0.93x.
    # What makes a weight stream slower than the chain's one line is not measured (candidates: lines homed in the far
    # L2 partition, part of the 21 MB evicted between steps); public H100 figures put an L2 hit at 0.15-0.27 us
    # and DRAM at 0.48-0.7 us
    l2_latency_us: float = 0.42
    # The persistent runtime's fixed costs live in scheduler/dispatch_costs.py (InterpreterCosts, LaunchCosts, each
    # figure with its source). barrier_us: a fixed cost for every barrier-rTask whatever its fan-in, when given
    # (simple devices in tests, or a measured hand-off); None: the profiler's hand-off at its vEU count.
    barrier_us: float | None = None
    launch_us: float = EAGER_LAUNCH_US  # one persistent launch per rProgram: a measured eager launch (dispatch_costs)
    # registers a legacy kernel is assumed to use when its ptxas figures are unknown (the corpus kernels use 32-64;
    # the SASS reading: op-by-op launches get 40-64 warps per SM)
    legacy_registers: int = 64
    # why the device cannot launch with programmatic dependent launch although its architecture could (a measured
    # GPU without cuda.bindings: scheduler.measure.device_spec); None: decided by the architecture alone
    pdl_refused: str | None = None

    @property
    def name(self) -> str:
        """The device's name (a measured GPU's own; the profile cache is kept per name)."""
        return self.hw.name

    @property
    def sms(self) -> int:
        """Streaming multiprocessors."""
        return self.hw.sms

    @property
    def peak_flops(self) -> float:
        """FP32 FLOP/s without tensor cores."""
        return self.hw.peak_flops

    @property
    def mem_bw(self) -> float:
        """DRAM bytes/s streaming kernels reach."""
        return self.hw.mem_bw

    @property
    def l2_bytes(self) -> int:
        """L2 capacity."""
        return self.hw.l2_bytes

    @property
    def l2_bw(self) -> float:
        """L2 read bytes/s."""
        return self.hw.l2_bw

    @property
    def max_threads_per_block(self) -> int:
        """The most threads one vEU (a block) may have."""
        return self.hw.max_threads_per_block

    @property
    def max_smem_per_block(self) -> int:
        """The most shared memory one vEU may opt in to."""
        return self.hw.smem_per_block

    @property
    def pdl(self) -> bool:
        """Whether kernels can be launched with programmatic dependent launch (griddepcontrol: sm_90 and newer, the
        H100 and the CPU emulator, which runs the H100's figures): the build's one-stream launch segments are then
        PDL chains, priced as the cuda-graph-pdl baseline prices its kernels."""
        from vdevice.pdl import MIN_ARCH, arch_number
        return self.pdl_refused is None and arch_number(self.hw.arch) >= MIN_ARCH

    def named(self, name: str, sms: int | None = None) -> "DeviceSpec":
        """The same figures for a device of another name (and SM count): a measured GPU, or the CPU emulator."""
        return dataclasses.replace(self, hw=dataclasses.replace(self.hw, name=name, sms=sms or self.hw.sms))


H100 = DeviceSpec()

# What fraction of issue slots the inner loop spends on FFMA, read from the sm_90 SASS of the corpus kernels
# (DESIGN.md, "What the first H100 session and the sm_90 SASS showed"): FP32 throughput is at most this share of
# peak (one warp-FFMA per scheduler and clock is the peak). The LSTM cell: 16 FFMA per 61 instructions of its
# accumulate loop (issue 14). Kernels not listed are memory-bound (elementwise, reductions, layout): their
# FLOPs never bind, so they get the lowest listed share.
FFMA_SHARE = {"conv_direct": 0.09, "conv_implicit_gemm": 0.09, "conv_depthwise_tiled": 0.09, "gemm_tiled": 0.18,
              "gemm_regblock": 0.064, "lstm_cell_fused": 16 / 61, "gemv_warp": 0.064, "gemv_col": 0.064,
              "gemv_splitk_partial": 0.064}
# Tensor-core kernels (legacy/tc.cu): the share of their tensor-core peak (Launch.flop_rate) the inner loop can
# issue, = HMMA share of the loop / the HMMA share that saturates the tensor cores, at most 1. The saturating share,
# 0.4, is an estimate: H100 dense TF32 at 378 TFLOP/s over 132 SMs x 4 schedulers x 1.755 GHz is ~204 MACs per
# scheduler and clock, one 512-MAC HMMA.1684 every 2.5 issue slots.
HMMA_SATURATING_SHARE = 0.4
# HMMA shares per tile, in HMMA.1684-sized steps of TF32-rate work per loop instruction (an HMMA.1688 is two, a bf16
# HMMA.16816 two: bf16 runs at twice the TF32 rate), read from the sm_90 SASS of the main loop (nvcc 13.0; BENCHMARKS.md
# "Kernel SASS", tests/test_precision.py::test_cost_models_tensor_core_shares_are_the_sass): key (kernel, BM, BN,
# operand copies: "vec" = 16-byte rows, "gather" = the conv's im2col gather, "window" = the gather of a window wider
# than its tap bits, precision). 3xTF32 loops issue 48 HMMA.1688 per 16-deep stage and 64x64 tile (the hi/lo split),
# TF32 16, bf16 8 HMMA.16816. The loop is unrolled by its pipeline stages (3, or 4 for 64x64), so the figures are for
# 3 or 4 stages; the gathered convolution tests a copy's padding with one logic op on per-thread tap bits (issue 25,
# 2026-11-27: before, per stage, 64x64 vec GEMM 172, conv gather 226 and 119 (32x32), 1x1 conv 87 instructions); no
# spills in any of them.
TC_HMMA_SHARE = {
    ("gemm_tc", 32, 32, "vec", "3xtf32"): 72 / 229, ("gemm_tc", 64, 64, "vec", "3xtf32"): 384 / 648,
    ("gemm_tc", 128, 64, "vec", "3xtf32"): 288 / 462, ("gemm_tc", 64, 64, "vec", "tf32"): 128 / 520,
    ("gemm_tc", 64, 64, "vec", "bf16"): 64 / 297, ("gemm_tc", 64, 64, "gather", "3xtf32"): 384 / 781,
    ("conv_tc", 64, 64, "vec", "3xtf32"): 384 / 644, ("conv_tc", 128, 64, "vec", "3xtf32"): 288 / 453,
    ("conv_tc", 64, 64, "gather", "3xtf32"): 384 / 777, ("conv_tc", 32, 32, "gather", "3xtf32"): 72 / 283,
    # the 1x1 convolutions' tile (ResNeXt's 18 conv_tc<32, 32, 0, 3> launches)
    ("conv_tc", 32, 32, "vec", "3xtf32"): 72 / 229,
    # windows wider than the tap bits hold (VEC bit 2: DeepSpeech2's 41 x 11 and 21 x 11), padding by shifts
    ("conv_tc", 32, 32, "window", "3xtf32"): 72 / 313, ("conv_tc", 64, 64, "window", "3xtf32"): 384 / 881,
}
# The split instantiations (SPLIT = 1: the in-place fixup after the loop changes ptxas' allocation of the loop
# itself), read the same way (nvcc 13.0; tests: test_cost_models_tensor_core_shares_are_the_sass).
TC_SPLIT_HMMA_SHARE = {
    ("gemm_tc", 32, 32, "vec", "3xtf32"): 72 / 232, ("gemm_tc", 32, 32, "gather", "3xtf32"): 72 / 351,
    ("gemm_tc", 32, 32, "vec", "tf32"): 24 / 223, ("gemm_tc", 32, 32, "vec", "bf16"): 12 / 139,
    ("gemm_tc", 64, 64, "vec", "3xtf32"): 384 / 648, ("gemm_tc", 64, 64, "gather", "3xtf32"): 384 / 782,
    ("gemm_tc", 64, 64, "vec", "tf32"): 128 / 520, ("gemm_tc", 64, 64, "vec", "bf16"): 64 / 296,
    # conv_tc's SPLIT = 1 (the in-place fixup after the loop, as the GEMM's; issue 25, 2026-11-27)
    ("conv_tc", 32, 32, "gather", "3xtf32"): 72 / 298, ("conv_tc", 32, 32, "vec", "3xtf32"): 72 / 232,
    ("conv_tc", 64, 64, "gather", "3xtf32"): 384 / 775, ("conv_tc", 64, 64, "vec", "3xtf32"): 384 / 644,
    ("conv_tc", 32, 32, "window", "3xtf32"): 72 / 348, ("conv_tc", 64, 64, "window", "3xtf32"): 384 / 879,
}
TC_PRECISION = {0: "3xtf32", 1: "tf32", 2: "bf16"}  # tc.cu's PREC template argument (kernel_corpus.ops._tensor_core)
# The wmma tiles tc.cu had before (three template arguments, no VEC): what ran on the H100 on 2026-11-27, re-priced
# by tests/calibration.py. Their loops issued 96 HMMA.1684 of 409 (gemm_tc<64,64>) and of 491 (conv_tc<64,64>)
# instructions (BENCHMARKS.md "Kernel SASS", before issue 25).
FFMA_SHARE |= {"gemm_tc": 96 / 409 / HMMA_SATURATING_SHARE, "conv_tc": 96 / 491 / HMMA_SATURATING_SHARE}


def tc_share(kernel: str, template_args: Any) -> float | None:
    """The share of the tensor-core peak a tc.cu launch's loop issues (TC_HMMA_SHARE over the saturating share, at
    most 1), or None for other kernels (and the old wmma tiles). A tile, copy kind or precision not read from the
    SASS takes the same tile at 3xTF32 (else the nearest measured loop: the other copy kind, the other kernel, the
    gathered 64x64 conv) times the precision's ratio on the measured 64x64 GEMM. A split instantiation (fifth
    argument 1) takes its own loop's share (TC_SPLIT_HMMA_SHARE), else the unsplit one's."""
    name = kernel.split("<", 1)[0].rsplit("::", 1)[-1]
    if name not in ("gemm_tc", "conv_tc") or not template_args or len(template_args) < 4:
        return None  # not a tensor-core tile, or the wmma one before issue 25 (FFMA_SHARE)
    bm, bn, prec, vec = (int(a) for a in template_args[:4])
    copies = "vec" if (vec & 2 if name == "conv_tc" else vec == 3) else "gather"
    copies = "window" if name == "conv_tc" and vec & 4 else copies  # the padding by shifts (windows past 15 taps)
    precision = TC_PRECISION.get(prec, "3xtf32")
    split = len(template_args) > 4 and int(template_args[4]) != 0
    share = TC_SPLIT_HMMA_SHARE.get((name, bm, bn, copies, precision)) if split else None
    share = share or TC_HMMA_SHARE.get((name, bm, bn, copies, precision))
    if share is None:
        other = "conv_tc" if name == "gemm_tc" else "gemm_tc"
        near = [(name, bm, bn, copies), (name, bm, bn, "gather"), (other, bm, bn, copies), (other, bm, bn, "gather"),
                ("conv_tc", 64, 64, "gather")]
        base = next(TC_HMMA_SHARE[(*k, "3xtf32")] for k in near if (*k, "3xtf32") in TC_HMMA_SHARE)
        ref = ("gemm_tc", 64, 64, "vec")
        share = base * TC_HMMA_SHARE[(*ref, precision)] / TC_HMMA_SHARE[(*ref, "3xtf32")]
    return min(1.0, share / HMMA_SATURATING_SHARE)


# The weight-stationary cell (legacy/rnn.cu): 16 FFMA per 39 instructions of lstm_cell_resident<20,256>'s loop
# (a 16-byte shared-memory weight load and a broadcast global load of x or h per four; BENCHMARKS.md, "Kernel SASS")
FFMA_SHARE["lstm_cell_resident"] = 16 / 39
DEFAULT_FFMA_SHARE = min(FFMA_SHARE.values())


# Bytes one thread keeps in flight per trip of a kernel's weight-streaming loop, read from its sm_90 SASS (nvcc 13.0,
# `python3 -m toolchain.sass FILE.cu -I kernel_corpus/legacy --listing NAME`: the global loads a trip issues before
# its first FFMA uses them; the next trip's loads wait for the branch): lstm_cell_fused<8,1,256> issues 4 32-bit
# `LDG.E.CONSTANT` of weights per trip (16 B; its x/h loads are warp broadcasts of one word), lstm_cell_resident<10,256>
# run unpinned 2 `LDG.E.128.CONSTANT` (32 B: its unroll-2 loop reuses the registers, so the second pair waits for the
# first pair's FFMAs), lstm_cell_vec4<8,256> 4 `LDG.E.128.CONSTANT` (64 B). Others:
# DeviceSpec.bytes_in_flight_per_thread (an estimate).
BYTES_IN_FLIGHT = {"lstm_cell_fused": 16, "lstm_cell_resident": 32, "lstm_cell_vec4": 64}


def bytes_in_flight(kernel: str, default: int) -> int:
    """A kernel's bytes in flight per thread (BYTES_IN_FLIGHT, else `default`)."""
    return BYTES_IN_FLIGHT.get(kernel.split("<", 1)[0].rsplit("::", 1)[-1], default)


def ffma_share(kernel: str, template_args: Any = None) -> float:
    """The share of its arithmetic peak a legacy kernel's inner loop issues: FFMA_SHARE, or for a tensor-core tile
    its HMMA share (tc_share)."""
    tc = tc_share(kernel, template_args)
    return tc if tc is not None else FFMA_SHARE.get(kernel.split("<", 1)[0].rsplit("::", 1)[-1], DEFAULT_FFMA_SHARE)


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
    """Answers rTask time, resources and rProgram time for one vDevice of `veus` vEUs. `interpreter` and
    `launches` are the runtime's fixed costs (scheduler/dispatch_costs.py); `legacy_registers` gives ptxas'
    registers of a legacy kernel launch (None: unknown, DeviceSpec.legacy_registers is assumed)."""

    def __init__(self, device: DeviceSpec = H100, veus: int | None = None, mode: str = "model",
                 measure: MeasureFn | None = None, cache_dir: Path | None = None,
                 interpreter: InterpreterCosts = INTERPRETER, launches: LaunchCosts = LAUNCHES,
                 legacy_registers: Callable[[Any], int | None] | None = None) -> None:
        if mode not in ("model", "measured"):
            raise SchedulerError(f"profiler mode must be 'model' or 'measured', not '{mode}'")
        self.device = device
        self.veus = veus or device.sms
        self.mode = mode
        self.measure = measure
        self.interpreter, self.launches = interpreter, launches
        self.legacy_registers = legacy_registers
        # a measured rTask time depends on how many vEUs share the device: one cache file per (device, vEUs)
        self.cache = ProfileCache(f"{device.name} {self.veus} vEUs", cache_dir) if mode == "measured" else None
        self.fixed_barrier = device.barrier_us is not None  # a figure given with the device, whatever the fan-in
        if device.barrier_us is None:
            self.device = dataclasses.replace(device, barrier_us=self.barrier_cost_us(self.veus))
        self.resident_bytes: int | None = None  # the model's weights and activations, when the caller knows them
        self.use_runtime_costs()
        self.misses = 0  # measured mode without a measuring function: launches that fell back to the model
        self.memo: dict[str, float] = {}
        self.by_id: dict[int, tuple[Any, float]] = {}

    def use_runtime_costs(self) -> None:
        """Price barriers and launches with the cache's measured runtime costs, when it has them: the measured
        hand-off (fan-in 1) stands for every fan-in, publish included."""
        rt = self.cache.runtime if self.cache else None
        if rt is not None:
            self.interpreter = dataclasses.replace(self.interpreter, handoff_by_fan_in=((1, rt.barrier_us),))
            self.device = dataclasses.replace(self.device, launch_us=rt.launch_us)
            if not self.fixed_barrier:
                self.device = dataclasses.replace(self.device, barrier_us=self.barrier_cost_us(self.veus))

    def describe(self, target: str | None = None) -> str:
        """One line for the user: active mode, the device whose times it gives, and the cache path. For a build
        whose target is the CPU the model's GPU figures only order the plan: the line says so and quotes none."""
        cache = str(self.cache.path) if self.cache else "none (model mode)"
        if target == "cpu" and self.mode == "model":
            return (f"profiler: mode=model, the {self.device.name} cost model orders the plan (target cpu: the "
                    f"CPU emulator runs it; no time is predicted) vEUs={self.veus}")
        runtime = f"barrier={self.device.barrier_us:.3g}us launch={self.device.launch_us:.3g}us"
        if target == "cpu":  # measured on the emulator: its own times, said to be so
            return (f"profiler: mode={self.mode} device={self.device.name} (emulator times, which order the plan "
                    f"and say nothing about a GPU) vEUs={self.veus} cache={cache} {runtime}")
        return f"profiler: mode={self.mode} device={self.device.name} vEUs={self.veus} cache={cache} {runtime}"

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
        """A barrier-rTask awaiting `fan_in` vEUs, from the last awaited rTask's end until the waiter goes on (the
        awaited rTask's publish and the hand-off, dispatch_costs.InterpreterCosts). A barrier figure given with the
        device is used as it is."""
        if self.fixed_barrier and self.device.barrier_us is not None:
            return self.device.barrier_us
        return self.interpreter.wait_visible_us(fan_in)

    def barrier_costs_us(self, fan_ins: np.ndarray) -> np.ndarray:
        """barrier_cost_us of each fan-in (vectorised for the mechanism's candidate vEUs)."""
        if self.fixed_barrier and self.device.barrier_us is not None:
            return np.full(len(fan_ins), self.device.barrier_us)
        known = {int(f): self.barrier_cost_us(int(f)) for f in np.unique(fan_ins)}
        return np.array([known[int(f)] for f in fan_ins], dtype=float)

    def step_costs(self, duration: Callable[[int], float]) -> StepCosts:
        """How the simulation prices an rProgram whose op i's rTask takes duration(i): the interpreter's argument
        fetch, publish and satisfied wait, and this profiler's barrier cost by fan-in. With a fixed barrier (a
        simple device) only the durations and that barrier."""
        if self.fixed_barrier:
            return StepCosts(duration, self.barrier_cost_us)
        it = self.interpreter
        return StepCosts(duration, self.barrier_cost_us, it.arg_fetch_us, it.publish_us, it.satisfied_wait_us)

    @property
    def veus_per_sm(self) -> int:
        """vEUs sharing one SM."""
        return -(-self.veus // self.device.sms)

    def modelled(self, launch: Any) -> float:
        """One rTask on one vEU: the interpreter's dispatch plus its work at the vEU's share of its SM (task_us);
        the argument fetch, publish and waits are the simulation's (step_costs)."""
        for attr in ("flops", "bytes"):
            if not hasattr(launch, attr):
                raise SchedulerError(f"launch of {launch.kernel} has no '{attr}': the cost model needs it")
        return self.interpreter.dispatch_us + self.task_us(launch, self.veus_per_sm, self.veus)

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
        share = ffma_share(launch.kernel, getattr(launch, "template_args", None))
        sm_rate = (d.peak_flops * getattr(launch, "flop_rate", 1.0) / d.sms * share * latency
                   / per_sm)
        compute_s = launch.flops / tasks / sm_rate
        l2 = self.l2_resident(launch)
        bandwidth, latency_us = (d.l2_bw, d.l2_latency_us) if l2 else (d.mem_bw, d.dram_latency_us)
        in_flight = launch.threads * bytes_in_flight(launch.kernel, d.bytes_in_flight_per_thread) / (latency_us * 1e-6)
        memory_s = launch.bytes / tasks / min(bandwidth / max(1, concurrent), in_flight)
        return max(compute_s, memory_s) * 1e6

    def l2_resident(self, launch: Any) -> bool:
        """Whether a launch's operands come from L2: the model's whole working set fits in L2 (weights read every
        inference or every step stay resident), and so does the launch's own traffic."""
        limit = self.device.l2_bytes
        return self.resident_bytes is not None and self.resident_bytes <= limit and launch.bytes <= limit

    def legacy_kernel_us(self, launch: Any) -> float:
        """The legacy kernel launched alone as written: as many of its blocks per SM as its threads, registers
        (ptxas' figure when known, else DeviceSpec.legacy_registers) and shared memory allow, in waves over the
        device; no interpreter."""
        from vdevice.occupancy import blocks_per_sm
        d = self.device
        smem = int(launch.dynamic_smem) + int(getattr(launch, "static_smem", 0) or 0)
        regs = self.legacy_registers(launch) if self.legacy_registers is not None else None
        fit = max(1, blocks_per_sm(launch.threads, regs or d.legacy_registers, smem, d.hw).blocks)
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

    def launch_us(self, launch: Any, veus: int | None = None) -> float:
        """A launch alone on the vDevice: rounds of rTasks over the vEUs."""
        veus = veus or self.veus
        rounds = -(-launch.rtasks // veus)
        return rounds * self.rtask_us(launch)

    def launched_us(self, kernels_us: Sequence[float], how: str, first: str | None = None) -> float:
        """Kernels of these times launched one after another: each adds the launch's gap ("eager", "graph" or
        "pdl", dispatch_costs.LaunchCosts) and never takes less than a launched tiny op; a graph is itself
        launched once. `first`: the first kernel's launch when it differs (a PDL chain's first kernel after a
        library call in the same graph is an ordinary graph node: scheduler.segments.launch_part)."""
        total = sum(self.launch_node_us(k, first if n == 0 and first else how) for n, k in enumerate(kernels_us))
        return total + (self.launches.eager_us if how in ("graph", "pdl") else 0.0)

    def launch_node_us(self, kernel_us: float, how: str) -> float:
        """One kernel of `kernel_us` launched `how` ("eager", "graph", "pdl", "torch"): the kernel and the launch's
        gap, never less than a launched tiny op."""
        gap, floor = self.launches.gap_us(how), self.launches.floor_us(how)
        if how == "eager":  # asynchronous: the host's interval or the kernel and the stream's gap, the longer
            gap, floor = self.launches.eager_stream_gap_us, self.launches.eager_us
        return max(floor, kernel_us + gap)

    @property
    def chain_launch(self) -> str:
        """How a one-stream launch segment's kernels are launched on this device: "pdl" (a chain of programmatic
        dependent launches, DeviceSpec.pdl) or "graph" (plain graph nodes)."""
        return "pdl" if self.device.pdl else "graph"

    def baselines_us(self, launches: Sequence[Any]) -> dict[str, float]:
        """These legacy kernel launches one at a time as written (their own occupancy, no interpreter, so
        independent of the vDevice's vEUs): after an eager launch each, or as CUDA Graph nodes."""
        kernels = [self.legacy_kernel_us(launch) for launch in launches]
        return {"op-by-op": self.launched_us(kernels, "eager"), "cuda-graph": self.launched_us(kernels, "graph")}

    def program_us(self, program: Program, launches: Sequence[Any]) -> float:
        """Whole rProgram: simulate every vEU's timeline (rTasks, argument fetches, publishes, waits), plus one
        launch; `launches[i]` is the corpus launch of program op i."""
        return self.program_us_by(program, lambda op: self.rtask_us(launches[op]))

    def program_us_by(self, program: Program, duration: Callable[[int], float]) -> float:
        """Whole rProgram whose op i's rTask takes duration(i) (dispatch and body), plus one launch."""
        if not any(program.veus):
            return 0.0
        return simulate(program, self.step_costs(duration)).span + self.device.launch_us

    def records_us(self, counts: Sequence[int], steps: Iterable[Any], awaited: Iterable[Any],
                   duration: Callable[[int], float]) -> float:
        """The same for a program not written yet: its runs per vEU, its execution steps and its waits' targets
        (scheduler.simulate.simulate_steps), plus one launch."""
        if not any(counts):
            return 0.0
        return simulate_steps(counts, steps, awaited, self.step_costs(duration)).span + self.device.launch_us
