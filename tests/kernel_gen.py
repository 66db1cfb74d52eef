"""Random valid, race-free CUDA kernels mixing the features real libraries use: shared memory with barriers, warp
shuffles, barrier reductions, cooperative-groups tiles (and cg calls in helpers generic over the group type),
helpers declared before the kernel and defined after it, lambdas of every capture kind, atomics.

Each step keeps the kernel race-free by construction (a barrier between a shared write and a read of another
thread's slot, and before the slot is written again); values are unsigned, so wrap-around is defined.
`generate(seed)` returns (source, spec YAML); the tests verify each (legacy against the persistent rKernel).
"""
from __future__ import annotations

import random
from dataclasses import dataclass, field


@dataclass
class _Kernel:
    block: int
    grid: int
    steps: list[str] = field(default_factory=list)
    helpers_decl: list[str] = field(default_factory=list)
    helpers_def: list[str] = field(default_factory=list)
    uses_cg: bool = False
    uses_shared: bool = False


def _shared_exchange(k: _Kernel, rng: random.Random) -> None:
    k.uses_shared = True
    off = rng.randrange(1, k.block)
    k.steps += ["s[t] = v;", "__syncthreads();", f"v = v * 3u + s[(t + {off}u) % {k.block}u];", "__syncthreads();"]


def _shuffle(k: _Kernel, rng: random.Random) -> None:
    op = rng.choice(["xor", "down", "idx"])
    if op == "xor":
        k.steps.append(f"v += __shfl_xor_sync(0xffffffffu, v, {rng.choice([1, 2, 4, 8, 16])});")
    elif op == "down":
        k.steps.append(f"v ^= __shfl_down_sync(0xffffffffu, v, {rng.randrange(1, 8)});")
    else:
        k.steps.append(f"v += __shfl_sync(0xffffffffu, v, {rng.randrange(32)});")


def _barrier_reduction(k: _Kernel, rng: random.Random) -> None:
    fn = rng.choice(["__syncthreads_count", "__syncthreads_or", "__syncthreads_and"])
    k.steps.append(f"v += (unsigned){fn}((v & {rng.choice([1, 3, 7])}u) != 0u);")


def _tile_reduce(k: _Kernel, rng: random.Random) -> None:
    k.uses_cg = True
    n = rng.choice([4, 8, 16, 32])
    generic = rng.random() < 0.5
    if generic:
        name = f"gsum{len(k.helpers_def)}"
        k.helpers_def.append(f"template <class G> __device__ unsigned {name}(const G &g, unsigned x) {{\n"
                             f"  return cg::reduce(g, x, cg::plus<unsigned>());\n}}")
        k.steps.append(f"v = v + {name}(cg::tiled_partition<{n}>(cg::this_thread_block()), v);")
    else:
        k.steps.append(f"v = v + cg::reduce(cg::tiled_partition<{n}>(cg::this_thread_block()), v, "
                       "cg::plus<unsigned>());")


def _forward_helper(k: _Kernel, rng: random.Random) -> None:
    name = f"mix{len(k.helpers_decl)}"
    k.helpers_decl.append(f"__device__ unsigned {name}(unsigned x);")
    k.helpers_def.append(f"__device__ unsigned {name}(unsigned x) {{ return x * {rng.choice([5, 7, 9])}u + "
                         "threadIdx.x; }")
    k.steps.append(f"v = {name}(v);")


def _lambda(k: _Kernel, rng: random.Random) -> None:
    kind = rng.choice(["none", "copy_barrier", "mutable", "shared"])
    i = len(k.steps)
    if kind == "none":
        k.steps.append(f"auto f{i} = [](unsigned a) {{ return a + threadIdx.x * 2u; }}; v = f{i}(v);")
    elif kind == "copy_barrier":
        k.steps.append(f"auto f{i} = [=](unsigned a) {{ return a + (unsigned)__syncthreads_count(a & 1u); }}; "
                       f"v = f{i}(v);")
    elif kind == "mutable":
        k.steps.append(f"auto f{i} = [=](unsigned a) mutable {{ return (unsigned)__syncthreads_or(a > 9u); }}; "
                       f"v += f{i}(v) + f{i}(v + 1u);")
    else:
        k.uses_shared = True
        k.steps += [f"auto put{i} = [=](unsigned a) {{ s[t] = a; }}; put{i}(v);", "__syncthreads();",
                    f"auto get{i} = [=](unsigned j) {{ return s[j % {k.block}u]; }}; v += get{i}(t + 1u);",
                    "__syncthreads();"]


def _atomic(k: _Kernel, rng: random.Random) -> None:
    k.steps.append(f"atomicAdd(&acc[blockIdx.x % 2u], v & {rng.choice([7, 15, 255])}u);")


STEPS = [_shared_exchange, _shuffle, _barrier_reduction, _tile_reduce, _forward_helper, _lambda, _atomic]


def generate(seed: int) -> tuple[str, str]:
    """A kernel `gen_k` and its launch spec."""
    rng = random.Random(seed)
    k = _Kernel(block=rng.choice([32, 64, 96, 128]), grid=rng.randrange(2, 5))
    for _ in range(rng.randrange(3, 8)):
        rng.choice(STEPS)(k, rng)
    lines = ["#include <cooperative_groups.h>", "#include <cooperative_groups/reduce.h>",
             "namespace cg = cooperative_groups;", *k.helpers_decl]
    lines += [t for t in k.helpers_def if t.startswith("template")]
    body = ["  const unsigned t = threadIdx.x;", "  const unsigned base = blockIdx.x * blockDim.x;",
            "  unsigned v = in[base + t];"]
    if k.uses_shared:
        body.insert(0, f"  __shared__ unsigned s[{k.block}];")
    body += ["  " + s for s in k.steps] + ["  out[base + t] = v;"]
    lines += ["__global__ void gen_k(const unsigned *in, unsigned *out, unsigned *acc) {", *body, "}"]
    lines += [t for t in k.helpers_def if not t.startswith("template")]
    n = k.grid * k.block
    spec = (f"kernel: gen_k\ngrid: [{k.grid}]\nblock: [{k.block}]\nseed: {seed}\nargs:\n"
            f"- {{name: in, kind: buffer, dtype: uint32, size: {n}, init: random, low: 0, high: 1000}}\n"
            f"- {{name: out, kind: buffer, dtype: uint32, size: {n}, init: zeros}}\n"
            "- {name: acc, kind: buffer, dtype: uint32, size: 2, init: zeros}\noutputs: [out, acc]\n")
    return "\n".join(lines) + "\n", spec
