"""What a build is for, as one typed context passed down the pipeline (passes, profiler, policies, codegen): the
device's facts (the one device table), the vEUs and how many share an SM, the precision and the enabled backends.

It lives in vdevice (rank 3) because the vDevice is the layer that turns these facts into code: the occupancy
arithmetic and `__launch_bounds__` (vdevice.occupancy, vdevice.codegen) read the same table as the scheduler's
cost model and passes above it, and the corpus (rank 4) names its bindings' backends with `BackendName`."""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from enum import Enum


class Name(str, Enum):
    """A name from a closed set that is still the plain string everywhere it is written (messages, JSON, CLI
    choices): str() and f-strings give the value on every Python version (StrEnum is 3.11+)."""

    def __str__(self) -> str:
        return str(self.value)


class TargetKind(Name):
    """Where a build runs: a CUDA GPU, or the CPU emulator."""

    GPU = "gpu"
    CPU = "cpu"


class BackendName(Name):
    """The registered backends (scheduler/backends/): corpus rKernels in rPrograms, vendor calls as their own plan
    steps, a user's kernel library converted to rKernels."""

    RTASK = "rtask"
    LIBRARY = "library"
    USER = "user"


@dataclass(frozen=True)
class Device:
    """One GPU's facts: the per-SM resources the CUDA occupancy calculator uses and the peak figures the cost model
    scales from. The one device table: vdevice.occupancy and scheduler.profiler both read it."""

    name: str
    arch: str  # the ptxas/nvcc architecture the build compiles for
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
    peak_flops: float  # FP32 without tensor cores
    mem_bw: float  # bytes/s streaming kernels reach from DRAM
    l2_bytes: int
    l2_bw: float  # bytes/s read from L2
    warp: int = 32

    def smem_share(self, veus_per_sm: int) -> int:
        """The most shared memory (static + dynamic) each of `veus_per_sm` co-resident vEUs may use: the SM's
        carve-out split k ways in the allocation unit, less the driver's per-block reservation, and at most what one
        block may opt in to (the occupancy arithmetic inverted; 227 KB, 113 KB, 75 KB, 56 KB for 1-4 on sm_90)."""
        split = self.smem_per_sm // max(1, veus_per_sm) // self.smem_alloc_unit * self.smem_alloc_unit
        return max(0, min(self.smem_per_block, split - self.smem_reserved_per_block))


# Compute capability 9.0, H100 SXM5 80 GB. Per-SM resources: CUDA C++ Programming Guide, "Compute Capabilities",
# Table 21 (64 K registers/SM and /block, 2048 threads and 32 blocks per SM, 228 KB shared memory per SM of which
# 227 KB per block) and the occupancy calculator's allocation units (registers per warp in units of 256, 4
# sub-partitions, shared memory in units of 128 bytes, 1 KB reserved per block since sm_80). 132 SMs:
# results/h100-2026-11-23/device.txt. FP32 without tensor cores: 132 SMs x 128 FMA lanes x 2 FLOP x 1.98 GHz boost =
# 67 TFLOP/s (NVIDIA H100 datasheet, SXM5: 67 TFLOPS FP32). HBM3: the datasheet's 3.35 TB/s, of which streaming
# kernels reach about 90%. L2: 50 MB (datasheet); read bandwidth 5.5 TB/s: DESIGN.md's floor for LSTM-TC (1.99 GB
# per inference from L2 in 0.28-0.36 ms gives 5.5-7.1 TB/s; the low end).
H100 = Device(name="NVIDIA H100", arch="sm_90", sms=132, regs_per_sm=65536, regs_per_block=65536, reg_alloc_unit=256,
              sub_partitions=4, max_threads_per_sm=2048, max_threads_per_block=1024, max_blocks_per_sm=32,
              smem_per_sm=228 * 1024, smem_per_block=227 * 1024, smem_reserved_per_block=1024, smem_alloc_unit=128,
              peak_flops=67e12, mem_bw=3.0e12, l2_bytes=50 * 1024 * 1024, l2_bw=5.5e12)

# A vEU's control block in shared memory: its TaskSlot (with the wide tiles' words) and barrier flags
# (vd::kHeaderBytes in include/vdevice_runtime.cuh, rounded up; tests/test_resident_per_sm.py checks it against the
# emulator's layout query).
VEU_HEADER_BYTES = 336
# Headroom left beside a resident slice for the per-rTask area (dynamic bytes and layout) of whatever else runs on
# a pinned vEU: policy. One vEU per SM keeps 64 KB, above what static layouts may take (CUDA's 48 KB;
# gemm_tc<128,64>'s 3-stage tiles are 43.5 KB); k vEUs sharing an SM split that SM's 64 KB, but keep at least
# 16 KB, above the area of gemm_tc<32,32> (15 KiB), the largest the batch-1 LSTM plans use. (A flat 16 KB
# for every k > 1 was tried on full-size LSTM-TC: larger slices on fewer rTasks per step, predicted slower at 2/SM,
# and its 3/SM slices hold 3/SM only without gemm_tc<32,32>; BENCHMARKS.md.) A plan whose largest area passes the
# headroom gets fewer vEUs per SM: the build's occupancy figures count the converted layouts.
RESIDENT_HEADROOM = 64 * 1024
MIN_RESIDENT_HEADROOM = 16 * 1024
MOST_VEUS_PER_SM = 4  # the target search's ceiling (the CPU tests cover 1..4)


def resident_headroom(veus_per_sm: int = 1) -> int:
    """Bytes a vEU keeps beside its resident slice for per-rTask areas when `veus_per_sm` vEUs share an SM."""
    return max(MIN_RESIDENT_HEADROOM, RESIDENT_HEADROOM // max(1, veus_per_sm))


@dataclass(frozen=True)
class Target:
    """What one plan is made for: the target kind and its device, the vEU count (`veus`, the name from `--veus` to
    the generated program), how many vEUs share an SM, the least accurate precision kernels may use, and the
    backends nodes may run on."""

    kind: TargetKind
    veus: int
    veus_per_sm: int = 1
    device: Device = H100
    precision: str = "3xtf32"  # kernel_corpus.bindings.PRECISIONS; the corpus checks it
    backends: tuple[BackendName, ...] = (BackendName.RTASK,)
    # the most hidden units J one resident rTask may own (0: as many as the slice budget allows, the fewest rTasks
    # per step); the build's J choice (rammer.build, scheduler.passes.resident_unit_caps) lowers it to spread a
    # family's step over more vEUs
    resident_units: int = 0

    def __post_init__(self) -> None:
        if self.veus < 1:
            raise ValueError(f"a target needs at least one vEU, got {self.veus}")
        if self.veus_per_sm < 1:
            raise ValueError(f"vEUs per SM must be >= 1, got {self.veus_per_sm}")
        if self.resident_units < 0:
            raise ValueError(f"resident units must be >= 0 (0: no cap), got {self.resident_units}")

    def at(self, veus_per_sm: int) -> "Target":
        """The same target with `veus_per_sm` vEUs on every SM of the device (what the GPU search tries)."""
        return dataclasses.replace(self, veus=veus_per_sm * self.device.sms, veus_per_sm=veus_per_sm)

    @property
    def resident_budget(self) -> int:
        """Bytes of resident slice one vEU can keep: its share of the SM's shared memory (Device.smem_share: 227 KB
        for one vEU per SM, 113 KB each for two), less the vEU's control block and the per-rTask headroom."""
        return (self.device.smem_share(self.veus_per_sm) - VEU_HEADER_BYTES
                - resident_headroom(self.veus_per_sm))

    def uses(self, backend: BackendName) -> bool:
        """Whether nodes may run on this backend."""
        return backend in self.backends
