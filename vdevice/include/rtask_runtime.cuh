// rtask_runtime.cuh — what a converted rKernel needs to run as one rTask inside a persistent thread block.
//
// One header for both executors: on the GPU (__CUDA_ARCH__ defined) the rTask barrier is a hardware
// mbarrier in shared memory; on the CPU emulator (cuda_emu.h included first) the same object is emulated
// with the same arrive / arrive_drop / wait semantics, so CPU tests exercise the GPU protocol.
//
// Protocol for an executor (legacy wrapper or vDevice interpreter), run by *every* thread of the vEU:
//   rt::Task t = rt::make_task(slot, id, grid, block, smem, dyn_smem);
// Shared memory of a vEU: static rt::TaskSlot; the dynamic buffer holds, for the rTask it runs, first the
// rKernel's dynamic (extern __shared__) bytes — so legacy `extern __shared__` arrays need no rewriting, they
// alias the start of the dynamic buffer as in CUDA — then, 16-byte aligned, its lifted static layout struct.
//   rt::begin_task(t);                       // thread 0 (re)initialises the barrier; vEU-wide sync
//   if (t.tid < t.nthreads) { K__rtask(t, args...); rt::end_task(t); }   // end_task = arrive_and_drop
//   __syncthreads();                          // vEU-wide: the shared buffer may be reused after this
// A thread that returns early from the rKernel body reaches end_task() at once, so later barrier phases stop
// counting it (sm_70+ exited-thread semantics). Surplus vEU threads (tid >= nthreads) are never counted.
// The vDevice interpreter specialises this where its build knows more: an rTask of whole warps whose rKernel never
// returns early sets t.named, so rt::sync is `bar.sync 1, nthreads` and the slot needs no setup (prepare_slot) at
// all; otherwise thread 0 runs prepare_slot between two vEU barriers, as begin_task does.
#pragma once

#ifndef __CUDACC_RTC__
#include <stdint.h>
#endif

namespace rt {

typedef unsigned long long u64;

// Shared-memory control block of one vEU: the rTask barrier and the slots of the count/and/or reductions.
struct alignas(16) TaskSlot {
  u64 bar;          // mbarrier (GPU) or emulated barrier word (CPU)
  unsigned red[3];  // rotating reduction slots for __syncthreads_count/and/or
  unsigned named_arrived;  // CPU emulation of the named barrier (bar.sync 1, n): threads arrived this phase
  unsigned expected, pending, phase;  // CPU emulation of the mbarrier
  unsigned named_phase;  // CPU emulation of the named barrier: completed phases
};

enum : unsigned { RT_MBARRIER = 0u, RT_NAMED = 1u, RT_BLOCK = 2u };

// Everything an rKernel body knows about the rTask it computes. One per thread (registers / local memory).
struct Task {
  unsigned id;        // rtask_id == the legacy linear block index
  dim3 grid;          // legacy gridDim
  dim3 block;         // legacy blockDim
  unsigned tid;       // this thread's 1-D index in the vEU == legacy linear thread index
  unsigned nthreads;  // legacy threads per block
  unsigned lanemask;  // lanes of this thread's warp that belong to the rTask (partial warps)
  unsigned nred;      // reductions done so far by this thread (selects the rotating slot)
  unsigned named;     // how rt::sync synchronises: RT_MBARRIER, RT_NAMED (whole warps, no early exit: bar.sync 1,
                      // nthreads) or RT_BLOCK (the rTask is the whole hardware block: __syncthreads)
  TaskSlot* slot;     // barrier + reduction slots
  char* smem;         // the rKernel's lifted static __shared__ variables (its layout struct)
  char* dyn_smem;     // the rKernel's extern __shared__ (dynamic) memory
  char* resident;     // the vEU's resident copy of this rTask's resident operand slice, or null (RT_RESIDENT)
};

__device__ __forceinline__ unsigned linear_thread_index() {
  return threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
}

__device__ __forceinline__ Task make_task(TaskSlot* slot, unsigned id, dim3 grid, dim3 block, char* smem,
                                          char* dyn_smem) {
  Task t;
  t.id = id; t.grid = grid; t.block = block;
  t.tid = linear_thread_index();
  t.nthreads = block.x * block.y * block.z;
  unsigned warp_base = t.tid & ~31u;
  unsigned live = t.nthreads > warp_base ? t.nthreads - warp_base : 0u;
  t.lanemask = live >= 32u ? 0xffffffffu : ((1u << live) - 1u);
  t.nred = 0; t.named = 0; t.slot = slot; t.smem = smem; t.dyn_smem = dyn_smem; t.resident = nullptr;
  return t;
}

// Legacy threadIdx / blockIdx from the 1-D vEU thread index and the rtask_id, x fastest (as CUDA does).
// One-dimensional blocks and grids (most launches) skip the run-time divisions, which cost about forty
// instructions each on the dispatch path of every rTask.
__device__ __forceinline__ uint3 thread_idx(const Task& t) {
  uint3 r;
  if (t.block.y == 1u && t.block.z == 1u) {
    r.x = t.tid; r.y = 0u; r.z = 0u;
    return r;
  }
  r.x = t.tid % t.block.x;
  r.y = (t.tid / t.block.x) % t.block.y;
  r.z = t.tid / (t.block.x * t.block.y);
  return r;
}
__device__ __forceinline__ uint3 block_idx(const Task& t) {
  uint3 r;
  if (t.grid.y == 1u && t.grid.z == 1u) {
    r.x = t.id; r.y = 0u; r.z = 0u;
    return r;
  }
  r.x = t.id % t.grid.x;
  r.y = (t.id / t.grid.x) % t.grid.y;
  r.z = t.id / (t.grid.x * t.grid.y);
  return r;
}

// ---- the rTask barrier: mbarrier with arrive / arrive_drop ----------------------------------------------
#if !defined(RT_CPU_EMULATOR)  // GPU (device pass of nvcc, NVRTC); nvcc's host pass never runs these bodies
__device__ __forceinline__ unsigned smem_addr(const void* p) {
  return static_cast<unsigned>(__cvta_generic_to_shared(p));
}
__device__ __forceinline__ void bar_init(TaskSlot* s, unsigned count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(smem_addr(&s->bar)), "r"(count) : "memory");
}
__device__ __forceinline__ void bar_inval(TaskSlot* s) {
  asm volatile("mbarrier.inval.shared::cta.b64 [%0];" ::"r"(smem_addr(&s->bar)) : "memory");
}
__device__ __forceinline__ u64 bar_arrive(TaskSlot* s) {
  u64 state;
  asm volatile("mbarrier.arrive.shared::cta.b64 %0, [%1];" : "=l"(state) : "r"(smem_addr(&s->bar)) : "memory");
  return state;
}
__device__ __forceinline__ u64 bar_arrive_drop(TaskSlot* s) {
  u64 state;
  asm volatile("mbarrier.arrive_drop.shared::cta.b64 %0, [%1];" : "=l"(state) : "r"(smem_addr(&s->bar)) : "memory");
  return state;
}
__device__ __forceinline__ bool bar_test(TaskSlot* s, u64 state) {
  unsigned done;
  asm volatile("{\n\t.reg .pred p;\n\tmbarrier.test_wait.shared::cta.b64 p, [%1], %2;\n\tselp.u32 %0, 1, 0, p;\n\t}"
               : "=r"(done) : "r"(smem_addr(&s->bar)), "l"(state) : "memory");
  return done != 0;
}
__device__ __forceinline__ void bar_wait(TaskSlot* s, u64 state) {
  while (!bar_test(s, state)) {
  }
}
// Named barrier 1 over the rTask's threads (whole warps; surplus warps of the vEU never take part).
__device__ __forceinline__ void named_sync(TaskSlot*, unsigned nthreads) {
  asm volatile("bar.sync 1, %0;" ::"r"(nthreads) : "memory");
}
#else
// CPU emulator: fibers of one OS thread, switched only at yield points, so plain reads and writes are atomic.
// The barrier's own state is the synchronisation: the sanitizers do not check it (EMU_NOSAN); a completed phase
// orders the rTask's shared accesses for racecheck (emu_sync_point).
EMU_NOSAN void bar_init(TaskSlot* s, unsigned count) { s->expected = s->pending = count; s->phase = 0; }
inline void bar_inval(TaskSlot*) {}
EMU_NOSAN u64 bar_arrive(TaskSlot* s) {
  u64 token = s->phase;
  if (--s->pending == 0) { s->phase++; s->pending = s->expected; emu_sync_point(); }
  return token;
}
EMU_NOSAN void bar_arrive_drop(TaskSlot* s) {
  s->expected--;
  if (--s->pending == 0) { s->phase++; s->pending = s->expected; emu_sync_point(); }
}
EMU_NOSAN bool bar_test(TaskSlot* s, u64 token) { return s->phase != token; }
EMU_NOSAN void bar_wait(TaskSlot* s, u64 token) {
  while (!bar_test(s, token)) emu_yield("rTask barrier");
}
// bar.sync 1, n: resets itself after each phase (no initialisation), and a thread that never arrives (an early
// exit) leaves the others waiting, as on the GPU.
EMU_NOSAN void named_sync(TaskSlot* s, unsigned nthreads) {
  const unsigned phase = s->named_phase;
  if (++s->named_arrived == nthreads) {
    s->named_arrived = 0;
    s->named_phase = phase + 1u;
    emu_sync_point();
    return;
  }
  while (s->named_phase == phase) emu_yield("rTask named barrier");
}
#endif

// Start of the block's dynamic shared memory (C++ linkage, so extern "C" kernels can use it too).
__device__ __forceinline__ char* dynamic_smem() {
  extern __shared__ __align__(16) char rt_dynamic_smem_base[];
  return rt_dynamic_smem_base;
}

// ---- executor side ---------------------------------------------------------------------------------------
// Thread 0 sets up the slot for an rTask of `nthreads` threads: the mbarrier and the reduction slots. The vEU
// must synchronise before (no thread still waits on the old mbarrier phase) and after (all see the new one).
__device__ __forceinline__ void prepare_slot(TaskSlot* s, unsigned nthreads) {
  bar_inval(s);
  bar_init(s, nthreads);
  s->red[0] = s->red[1] = s->red[2] = 0;
}
__device__ __forceinline__ void begin_task(Task& t) {
  if (t.tid == 0) {
    if (t.named == RT_MBARRIER) prepare_slot(t.slot, t.nthreads);
    else t.slot->red[0] = t.slot->red[1] = t.slot->red[2] = 0;
  }
  __syncthreads();
}
// A thread leaving the rTask (at its end or by an early return) stops counting for the mbarrier; the named
// barrier needs nothing (it is used only where no thread leaves early).
__device__ __forceinline__ void end_task(Task& t) {
  if (t.named == RT_MBARRIER) bar_arrive_drop(t.slot);
}

// ---- what rKernel bodies call ------------------------------------------------------------------------------
// __syncthreads() over the live threads of this rTask only.
__device__ __forceinline__ void sync(Task& t) {
  if (t.named == RT_BLOCK) {
    __syncthreads();
  } else if (t.named == RT_NAMED) {
    named_sync(t.slot, t.nthreads);
  } else {
    bar_wait(t.slot, bar_arrive(t.slot));
  }
}

// __syncthreads_count: rotating slots, reset one ahead, read after the barrier (safe with no second barrier).
__device__ __forceinline__ int sync_count(Task& t, int pred) {
  unsigned k = t.nred++ % 3u;
  atomicExch(&t.slot->red[(k + 1u) % 3u], 0u);
  if (pred) atomicAdd(&t.slot->red[k], 1u);
  sync(t);
  return static_cast<int>(atomicAdd(&t.slot->red[k], 0u));
}
__device__ __forceinline__ int live_count(Task& t) { return sync_count(t, 1); }
__device__ __forceinline__ int sync_and(Task& t, int pred) {
  // all live threads true <=> count(!pred) == 0
  return sync_count(t, !pred) == 0;
}
__device__ __forceinline__ int sync_or(Task& t, int pred) { return sync_count(t, pred != 0) != 0; }

// Warp-level masks restricted to the lanes of this rTask (a partial last warp shares its hardware warp with
// surplus vEU threads that never reach the intrinsic).
__device__ __forceinline__ unsigned warp_mask(const Task& t, unsigned mask) { return mask & t.lanemask; }

// ---- cooperative groups: the rTask as a thread block, tiles of its warps -----------------------------------
struct TaskGroup {
  Task* t;
  __device__ void sync() const { rt::sync(*t); }
  __device__ unsigned thread_rank() const { return t->tid; }
  __device__ unsigned size() const { return t->nthreads; }
  __device__ unsigned num_threads() const { return t->nthreads; }
  __device__ uint3 group_index() const { return block_idx(*t); }
  __device__ uint3 thread_index() const { return thread_idx(*t); }
  __device__ dim3 group_dim() const { return t->block; }
  __device__ dim3 dim_threads() const { return t->block; }
  __device__ unsigned long long block_rank() const { return t->id; }
};
__device__ __forceinline__ TaskGroup this_task(Task& t) { TaskGroup g; g.t = &t; return g; }
__device__ __forceinline__ void sync(const TaskGroup& g) { g.sync(); }

// A tile of N (power of two, <= 32) consecutive threads of the rTask; masks exclude lanes outside the rTask.
template <unsigned N, class Parent = void>
struct Tile {
  static_assert(N >= 1 && N <= 32 && (N & (N - 1)) == 0, "tiles of 1..32 threads, a power of two");
  unsigned rank_in_task;  // thread rank within the rTask
  unsigned nthreads;      // rTask thread count
  unsigned mask;          // hardware lanes of this tile that are live rTask threads
  __device__ unsigned thread_rank() const { return rank_in_task % N; }
  __device__ unsigned size() const { return N; }
  __device__ unsigned num_threads() const { return N; }
  __device__ unsigned meta_group_rank() const { return rank_in_task / N; }
  __device__ unsigned meta_group_size() const { return (nthreads + N - 1) / N; }
  __device__ void sync() const { __syncwarp(mask); }
  template <class T> __device__ T shfl(T v, int src) const { return __shfl_sync(mask, v, src, N); }
  template <class T> __device__ T shfl_down(T v, unsigned d) const { return __shfl_down_sync(mask, v, d, N); }
  template <class T> __device__ T shfl_up(T v, unsigned d) const { return __shfl_up_sync(mask, v, d, N); }
  template <class T> __device__ T shfl_xor(T v, unsigned m) const { return __shfl_xor_sync(mask, v, m, N); }
  __device__ unsigned ballot(int p) const {
    unsigned b = __ballot_sync(mask, p);
    unsigned shift = (rank_in_task & 31u) / N * N;
    return N == 32 ? b : ((b >> shift) & ((1u << N) - 1u));
  }
  __device__ int any(int p) const { return ballot(p) != 0; }
  __device__ int all(int p) const {
    unsigned own = N == 32 ? (mask) : ((mask >> ((rank_in_task & 31u) / N * N)) & ((1u << N) - 1u));
    return ballot(p) == own;
  }
};
template <unsigned N>
__device__ __forceinline__ Tile<N> tiled_partition(const TaskGroup& g) {
  Tile<N> r;
  r.rank_in_task = g.t->tid;
  r.nthreads = g.t->nthreads;
  unsigned lane = g.t->tid & 31u;
  unsigned tile_bits = N == 32 ? 0xffffffffu : (((1u << N) - 1u) << (lane / N * N));
  r.mask = g.t->lanemask & tile_bits;
  return r;
}
template <unsigned N, class P>
__device__ __forceinline__ void sync(const Tile<N, P>& g) { g.sync(); }

// cg::reduce over a tile: every live lane of the tile gets op folded over exactly the live lanes of the tile
// (those that belong to the rTask). Live lanes of a tile are a prefix of it (lanemask is a prefix of the warp,
// tiles are aligned), so a shfl-down tree on the tile's live mask works for any live count: a lane reads a
// partner only when the partner is live (otherwise it reads itself, never a lane outside the mask) and folds
// it in only then; lane 0 of the tile ends with the full result and broadcasts it on the same mask.
template <unsigned N, class P, class T, class Op>
__device__ __forceinline__ T reduce(const Tile<N, P>& g, T v, Op op) {
  const unsigned lane = g.rank_in_task % N;  // lane within the tile
  const unsigned live = static_cast<unsigned>(__popc(g.mask));  // live lanes of this tile: lanes 0 .. live-1
  for (unsigned o = N / 2; o >= 1; o >>= 1) {
    const bool has = lane + o < live;
    T other = __shfl_sync(g.mask, v, static_cast<int>(has ? lane + o : lane), static_cast<int>(N));
    if (has) v = op(v, other);
  }
  return __shfl_sync(g.mask, v, 0, static_cast<int>(N));
}

}  // namespace rt

// Shadows the hardware indices inside an rKernel body (and in cloned callees) with the legacy ones.
#define RT_LEGACY_INDICES(t)                                        \
  const ::uint3 threadIdx = ::rt::thread_idx(t);                      \
  const ::uint3 blockIdx = ::rt::block_idx(t);                        \
  const ::dim3 blockDim = (t).block;                                  \
  const ::dim3 gridDim = (t).grid;                                    \
  (void)threadIdx; (void)blockIdx; (void)blockDim; (void)gridDim

// Shadows the block-wide and warp-wide intrinsics for bodies that reach them through macros (a macro cannot be
// edited at its use site): a local callable of the same name takes precedence over the builtin.
#define RT_SHADOW_INTRINSICS(t)                                                                      \
  auto __syncthreads = [&]() { ::rt::sync(t); };                                                     \
  auto __syncthreads_count = [&](int p) { return ::rt::sync_count(t, p); };                         \
  auto __syncthreads_and = [&](int p) { return ::rt::sync_and(t, p); };                             \
  auto __syncthreads_or = [&](int p) { return ::rt::sync_or(t, p); };                               \
  (void)__syncthreads; (void)__syncthreads_count; (void)__syncthreads_and; (void)__syncthreads_or

// Body of the plain __global__ wrapper that runs one rTask per legacy block (no surplus threads there): the rTask
// is the whole block, so its barrier is __syncthreads (a thread that returns early exits the kernel, and exited
// threads no longer hold a block barrier on sm_70+), as in the legacy kernel.
#define RT_RUN_AS_KERNEL(smem_ptr, call)                                                             \
  do {                                                                                               \
    __shared__ ::rt::TaskSlot __rt_slot;                                                             \
    unsigned __rt_id = blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z);               \
    ::rt::Task __rt = ::rt::make_task(&__rt_slot, __rt_id, gridDim, blockDim, (char*)(smem_ptr),       \
                                      ::rt::dynamic_smem());                                            \
    __rt.named = ::rt::RT_BLOCK;                                                                     \
    ::rt::begin_task(__rt);                                                                          \
    { call; }                                                                                        \
    ::rt::end_task(__rt);                                                                            \
  } while (0)
