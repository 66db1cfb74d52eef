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
  unsigned tile_arrived[5];  // tiles wider than a warp, one word per size 64 << k: the warps arrived at a sync
  u64 tile_xchg[32];         // tiles wider than a warp: one exchange word per warp of the vEU (collectives)
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
  unsigned named;     // how rt::sync synchronises: RT_MBARRIER, RT_NAMED (whole warps, no early exit: bar.sync id,
                      // nthreads) or RT_BLOCK (the rTask is the whole hardware block: __syncthreads)
  TaskSlot* slot;     // barrier + reduction slots
  char* smem;         // the rKernel's lifted static __shared__ variables (its layout struct)
  char* dyn_smem;     // the rKernel's extern __shared__ (dynamic) memory
  char* resident;     // the vEU's resident copy of this rTask's resident operand slice, or null (RT_RESIDENT)
  unsigned bar_id;    // the named barrier RT_NAMED uses: 1, or 1 + g for member g of rTasks side by side on a vEU
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
  t.nred = 0; t.named = 0; t.slot = slot; t.smem = smem; t.dyn_smem = dyn_smem; t.resident = nullptr; t.bar_id = 1;
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
// Named barrier `id` (1..15) over the rTask's threads (whole warps; surplus warps of the vEU never take part).
__device__ __forceinline__ void named_sync(TaskSlot*, unsigned id, unsigned nthreads) {
  asm volatile("bar.sync %0, %1;" ::"r"(id), "r"(nthreads) : "memory");
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
// One barrier per TaskSlot: rTasks side by side on a vEU (each its own id on the GPU) each have their own slot.
EMU_NOSAN void named_sync(TaskSlot* s, unsigned, unsigned nthreads) {
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
// Once per executor (before its first rTask): the wide-tile barrier words start clear, and every completed wide-tile
// sync leaves them clear again, so rTasks need not reset them.
__device__ __forceinline__ void clear_tile_barriers(TaskSlot* s) {
  for (unsigned k = 0; k < 5u; ++k) s->tile_arrived[k] = 0u;
}
__device__ __forceinline__ void begin_task(Task& t) {
  if (t.tid == 0) {
    if (t.named == RT_MBARRIER) prepare_slot(t.slot, t.nthreads);
    else t.slot->red[0] = t.slot->red[1] = t.slot->red[2] = 0;
    clear_tile_barriers(t.slot);
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
    named_sync(t.slot, t.bar_id, t.nthreads);
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

// A call the converter leaves as it is: a header function (llm.c's common.h warpReduceSum) whose warp intrinsics
// name full masks. Right while every warp of the rTask is whole; a partial last warp stops the launch instead.
__device__ __forceinline__ void require_whole_warps(const Task& t, const char* what) {
  if (t.nthreads % 32u != 0u) {
#if defined(RT_CPU_EMULATOR)
    emu::fail("%s: its full-warp intrinsics need whole warps, but the rTask has %u threads", what, t.nthreads);
#else
    (void)what;
    __trap();
#endif
  }
}

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

// ---- shuffles of any trivially copyable type -----------------------------------------------------------------
// The hardware shuffles move 32-bit words; nvcc's __shfl_*_sync overloads cover the arithmetic types only, while a
// cooperative-groups tile shuffles any trivially copyable type (uint4, structs). Other types move as consecutive
// 32-bit words with the same source lane (a pure data move, so the result is the same as one wide shuffle).
template <class T> struct native_shfl { static constexpr bool value = false; };
template <> struct native_shfl<int> { static constexpr bool value = true; };
template <> struct native_shfl<unsigned> { static constexpr bool value = true; };
template <> struct native_shfl<long> { static constexpr bool value = true; };
template <> struct native_shfl<unsigned long> { static constexpr bool value = true; };
template <> struct native_shfl<long long> { static constexpr bool value = true; };
template <> struct native_shfl<unsigned long long> { static constexpr bool value = true; };
template <> struct native_shfl<float> { static constexpr bool value = true; };
template <> struct native_shfl<double> { static constexpr bool value = true; };

// one(word) shuffles one value of a native type; T is moved whole when native, else word by word.
template <class T, class One>
__device__ __forceinline__ T shfl_words(const T& v, One one) {
  if constexpr (native_shfl<T>::value) {
    return one(v);
  } else {
    constexpr unsigned n = (sizeof(T) + 3u) / 4u;
    const unsigned char* in = reinterpret_cast<const unsigned char*>(&v);
    unsigned words[n];
#pragma unroll
    for (unsigned w = 0; w < n; ++w) words[w] = 0u;
#pragma unroll
    for (unsigned b = 0; b < sizeof(T); ++b) words[b / 4u] |= static_cast<unsigned>(in[b]) << (8u * (b % 4u));
#pragma unroll
    for (unsigned w = 0; w < n; ++w) words[w] = one(words[w]);
    T r;
    unsigned char* out = reinterpret_cast<unsigned char*>(&r);
#pragma unroll
    for (unsigned b = 0; b < sizeof(T); ++b) out[b] = static_cast<unsigned char>(words[b / 4u] >> (8u * (b % 4u)));
    return r;
  }
}

// ---- the barrier of a tile wider than a warp -----------------------------------------------------------------
// A wide tile is whole warps of the rTask. Its sync is a barrier over those warps in the vEU's TaskSlot, one word
// per tile size and one bit per warp: lane 0 of each warp sets its bit; the warp that completes the tile's bits
// clears them all, which releases the others and leaves the word as it found it. One word serves every tile of a
// size at once, so no hardware barrier id is spent per tile (an SM block has 16; a vEU can hold 16 tiles of 64).
#if !defined(RT_CPU_EMULATOR)
__device__ __forceinline__ void tile_wait_cleared(const unsigned* word, unsigned bit) {
  while (*reinterpret_cast<const volatile unsigned*>(word) & bit) {
  }
}
__device__ __forceinline__ void tile_barrier_done() {}
#else
EMU_NOSAN void tile_wait_cleared(const unsigned* word, unsigned bit) {
  while (*reinterpret_cast<const volatile unsigned*>(word) & bit) emu_yield("rt::Tile sync (tile wider than a warp)");
}
inline void tile_barrier_done() { emu_sync_point(); }
#endif
__device__ __forceinline__ void tile_sync_warps(TaskSlot* s, unsigned k, unsigned rank, unsigned warps, unsigned mask) {
  const unsigned warp = rank >> 5, bit = 1u << warp;
  const unsigned group = warps == 32u ? 0xffffffffu : ((1u << warps) - 1u) << (warp & ~(warps - 1u));
  __syncwarp(mask);
  if ((rank & 31u) == 0u) {
    unsigned* word = &s->tile_arrived[k];
    __threadfence_block();  // release this warp's writes
    const unsigned before = atomicOr(word, bit);
    if (((before | bit) & group) == group) {
      __threadfence_block();
      atomicAnd(word, ~group);
      tile_barrier_done();
    } else {
      tile_wait_cleared(word, bit);
    }
    __threadfence_block();  // acquire the other warps' writes
  }
  __syncwarp(mask);
}

// cg::tiled_partition<N> with N > 32 on a parent whose size is not a multiple of N: undefined in CUDA, refused here.
__device__ __forceinline__ void wide_tile_misfit(unsigned n, unsigned nthreads) {
#if defined(RT_CPU_EMULATOR)
  emu::fail("rt::tiled_partition<%u>: the rTask's %u threads are not a multiple of the tile size (undefined in CUDA)",
            n, nthreads);
#else
  (void)n; (void)nthreads;
  __trap();
#endif
}

template <class T> struct fold_or { __device__ T operator()(T a, T b) const { return a | b; } };
template <class T> struct fold_and { __device__ T operator()(T a, T b) const { return a & b; } };

template <unsigned N, class Parent = void> struct Tile;
template <unsigned N, class P, class T, class Op> __device__ __forceinline__ T reduce(const Tile<N, P>& g, T v, Op op);

// A tile of N consecutive threads of the rTask (N a power of two, 1 .. 1024, as cg::thread_block_tile).
// Up to 32 threads: lanes of one warp; masks exclude lanes outside the rTask (live lanes are a prefix of the tile).
// Wider: whole warps, with what CUDA offers there: sync, ranks and sizes, shfl (a broadcast), any, all, and
// reduce / inclusive_scan / exclusive_scan of values of at most 8 bytes, exchanged through tile_xchg.
template <unsigned N, class Parent>
struct Tile {
  static_assert(N >= 1 && N <= 1024 && (N & (N - 1)) == 0, "tiles of 1 .. 1024 threads, a power of two");
  static constexpr bool wide = N > 32;
  static constexpr unsigned warps = wide ? N / 32u : 1u;
  unsigned rank_in_task;  // thread rank within the rTask
  unsigned nthreads;      // rTask thread count
  unsigned mask;          // hardware lanes of this tile (its warp, when wide) that are live rTask threads
  TaskSlot* slot;         // the vEU's slot: the barrier words and exchange words of wide tiles
  __device__ unsigned thread_rank() const { return rank_in_task % N; }
  __device__ unsigned size() const { return N; }
  __device__ unsigned num_threads() const { return N; }
  __device__ unsigned meta_group_rank() const { return rank_in_task / N; }
  __device__ unsigned meta_group_size() const { return (nthreads + N - 1) / N; }
  __device__ void sync() const {
    if constexpr (wide) tile_sync_warps(slot, size_index(), rank_in_task, warps, mask);
    else __syncwarp(mask);
  }
  template <class T> __device__ T shfl(T v, int src) const {
    if constexpr (wide) {
      static_assert(sizeof(T) <= 8, "a tile wider than a warp shuffles values of at most 8 bytes (as in CUDA)");
      // the source's warp writes its own word (every warp writes only its own, so collectives on overlapping
      // tiles of other sizes never clash), and every wide collective ends with a sync, so the word is free here
      T* x = word<T>(static_cast<unsigned>(src) / 32u);
      if (thread_rank() == static_cast<unsigned>(src)) *x = v;
      sync();
      const T r = *x;
      sync();
      return r;
    } else {
      return shfl_words(v, [&](auto w) { return __shfl_sync(mask, w, src, static_cast<int>(N)); });
    }
  }
  template <class T> __device__ T shfl_down(T v, unsigned d) const {
    static_assert(!wide, "shfl_down exists on tiles of at most 32 threads (as in CUDA)");
    return shfl_words(v, [&](auto w) { return __shfl_down_sync(mask, w, d, static_cast<int>(N)); });
  }
  template <class T> __device__ T shfl_up(T v, unsigned d) const {
    static_assert(!wide, "shfl_up exists on tiles of at most 32 threads (as in CUDA)");
    return shfl_words(v, [&](auto w) { return __shfl_up_sync(mask, w, d, static_cast<int>(N)); });
  }
  template <class T> __device__ T shfl_xor(T v, unsigned m) const {
    static_assert(!wide, "shfl_xor exists on tiles of at most 32 threads (as in CUDA)");
    return shfl_words(v, [&](auto w) { return __shfl_xor_sync(mask, w, static_cast<int>(m), static_cast<int>(N)); });
  }
  __device__ unsigned ballot(int p) const {
    static_assert(!wide, "ballot exists on tiles of at most 32 threads (as in CUDA)");
    unsigned b = __ballot_sync(mask, p);
    unsigned shift = (rank_in_task & 31u) / N * N;
    return N == 32 ? b : ((b >> shift) & ((1u << N) - 1u));
  }
  __device__ int any(int p) const {
    if constexpr (wide) return reduce(*this, p != 0 ? 1 : 0, fold_or<int>());
    else return ballot(p) != 0;
  }
  __device__ int all(int p) const {
    if constexpr (wide) {
      return reduce(*this, p != 0 ? 1 : 0, fold_and<int>());
    } else {
      unsigned own = N == 32 ? (mask) : ((mask >> ((rank_in_task & 31u) / N * N)) & ((1u << N) - 1u));
      return ballot(p) == own;
    }
  }
  // ---- wide tiles: the warp a thread is in, and the tile's exchange words (one per warp of the tile)
  __device__ static constexpr unsigned size_index() {
    unsigned k = 0;
    for (unsigned n = 64; n < N; n <<= 1) ++k;
    return k;
  }
  __device__ unsigned warp_in_tile() const { return (rank_in_task >> 5) & (warps - 1u); }
  __device__ Tile<32> warp() const { return Tile<32>{rank_in_task, nthreads, mask, slot}; }
  template <class T> __device__ T* word(unsigned w) const {
    return reinterpret_cast<T*>(&slot->tile_xchg[(rank_in_task >> 5) - warp_in_tile() + w]);
  }
  // op folded over the exchange words of warps 0 .. n-1 of the tile, in order
  template <class T, class Op> __device__ T fold_words(unsigned n, Op op) const {
    T acc = *word<T>(0);
    for (unsigned w = 1; w < n; ++w) acc = op(acc, *word<T>(w));
    return acc;
  }
};

// The bits of a tile of N <= 32 in its warp (all bits for a warp or wider).
template <unsigned N> __device__ __forceinline__ unsigned tile_bits(unsigned rank) {
  return N >= 32 ? 0xffffffffu : (((1u << N) - 1u) << ((rank & 31u) / N * N));
}
template <unsigned N>
__device__ __forceinline__ Tile<N> tiled_partition(const TaskGroup& g) {
  if constexpr (N > 32) {
    if (g.t->nthreads % N != 0u) wide_tile_misfit(N, g.t->nthreads);
  }
  return Tile<N>{g.t->tid, g.t->nthreads, g.t->lanemask & tile_bits<N>(g.t->tid), g.t->slot};
}
// A tile split into smaller tiles (cg::tiled_partition<N>(tile)): tiles stay aligned to the rTask's ranks.
template <unsigned N, unsigned M, class P>
__device__ __forceinline__ Tile<N> tiled_partition(const Tile<M, P>& g) {
  static_assert(N <= M, "a tile splits into smaller tiles");
  return Tile<N>{g.rank_in_task, g.nthreads, g.mask & tile_bits<N>(g.rank_in_task), g.slot};
}
template <unsigned N, class P>
__device__ __forceinline__ void sync(const Tile<N, P>& g) { g.sync(); }

// cg::reduce over a tile: every live lane of the tile gets op folded over exactly the live lanes of the tile
// (those that belong to the rTask). Live lanes of a tile are a prefix of it (lanemask is a prefix of the warp,
// tiles are aligned), so a shfl-down tree on the tile's live mask works for any live count: a lane reads a
// partner only when the partner is live (otherwise it reads itself, never a lane outside the mask) and folds
// it in only then; lane 0 of the tile ends with the full result and broadcasts it on the same mask.
// A wide tile reduces each warp so, then folds the warps' results in warp order.
template <unsigned N, class P, class T, class Op>
__device__ __forceinline__ T reduce(const Tile<N, P>& g, T v, Op op) {
  if constexpr (N > 32) {
    static_assert(sizeof(T) <= 8, "a tile wider than a warp reduces values of at most 8 bytes (as in CUDA)");
    const T part = reduce(g.warp(), v, op);
    if ((g.rank_in_task & 31u) == 0u) *g.template word<T>(g.warp_in_tile()) = part;
    g.sync();
    const T all = g.template fold_words<T>(Tile<N, P>::warps, op);
    g.sync();
    return all;
  } else {
    const unsigned lane = g.rank_in_task % N;  // lane within the tile
    const unsigned live = static_cast<unsigned>(__popc(g.mask));  // live lanes of this tile: lanes 0 .. live-1
    for (unsigned o = N / 2; o >= 1; o >>= 1) {
      const bool has = lane + o < live;
      const int src = static_cast<int>(has ? lane + o : lane);
      T other = shfl_words(v, [&](auto w) { return __shfl_sync(g.mask, w, src, static_cast<int>(N)); });
      if (has) v = op(v, other);
    }
    return shfl_words(v, [&](auto w) { return __shfl_sync(g.mask, w, 0, static_cast<int>(N)); });
  }
}

// cg::inclusive_scan / exclusive_scan over a tile: rank r gets op over ranks 0 .. r (inclusive) or 0 .. r-1
// (exclusive; rank 0 gets T()). Within a warp a shfl-up ladder (live lanes are a prefix, so a source lane below a
// live lane is live); a wide tile adds to each warp the fold of the earlier warps' totals, in warp order.
template <unsigned N, class P, class T, class Op>
__device__ __forceinline__ T inclusive_scan(const Tile<N, P>& g, T v, Op op) {
  if constexpr (N > 32) {
    static_assert(sizeof(T) <= 8, "a tile wider than a warp scans values of at most 8 bytes (as in CUDA)");
    T s = inclusive_scan(g.warp(), v, op);
    const unsigned w = g.warp_in_tile();
    if ((g.rank_in_task & 31u) == 31u) *g.template word<T>(w) = s;
    g.sync();
    if (w > 0u) s = op(g.template fold_words<T>(w, op), s);
    g.sync();
    return s;
  } else {
    const unsigned lane = g.rank_in_task % N;
    for (unsigned o = 1; o < N; o <<= 1) {
      T other = shfl_words(v, [&](auto w) { return __shfl_up_sync(g.mask, w, o, static_cast<int>(N)); });
      if (lane >= o) v = op(other, v);
    }
    return v;
  }
}
template <unsigned N, class P, class T, class Op>
__device__ __forceinline__ T exclusive_scan(const Tile<N, P>& g, T v, Op op) {
  if constexpr (N > 32) {
    static_assert(sizeof(T) <= 8, "a tile wider than a warp scans values of at most 8 bytes (as in CUDA)");
    const T s = inclusive_scan(g.warp(), v, op);
    const T up = shfl_words(s, [&](auto x) { return __shfl_up_sync(g.mask, x, 1u, 32); });
    const unsigned w = g.warp_in_tile(), lane = g.rank_in_task & 31u;
    const T e = lane == 0u ? T() : up;  // the warp's own exclusive scan
    if (lane == 31u) *g.template word<T>(w) = s;
    g.sync();
    T r = e;
    if (w > 0u) {
      const T before = g.template fold_words<T>(w, op);
      r = lane == 0u ? before : op(before, e);
    }
    g.sync();
    return r;
  } else {
    const T inc = inclusive_scan(g, v, op);
    const T prev = shfl_words(inc, [&](auto w) { return __shfl_up_sync(g.mask, w, 1u, static_cast<int>(N)); });
    return g.rank_in_task % N == 0u ? T() : prev;
  }
}
template <class T> struct scan_plus { __device__ T operator()(T a, T b) const { return a + b; } };
template <unsigned N, class P, class T>
__device__ __forceinline__ T inclusive_scan(const Tile<N, P>& g, T v) { return inclusive_scan(g, v, scan_plus<T>()); }
template <unsigned N, class P, class T>
__device__ __forceinline__ T exclusive_scan(const Tile<N, P>& g, T v) { return exclusive_scan(g, v, scan_plus<T>()); }

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
