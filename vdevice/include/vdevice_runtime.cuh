// vdevice_runtime.cuh — the persistent interpreter that runs an rProgram (vdevice/codegen.py emits the rest).
//
// Tables (device memory, written by vdevice/codegen.py). Their row types vd::Instr, vd::Target and vd::OpRecord
// are generated from one description in vdevice/tables.py and emitted ahead of this header:
//   instr[pc]       Instr {VD_RUN, op, rtask} | {VD_WAIT, first target, target count}; vEU v runs instructions
//                   veu_begin[v] .. veu_begin[v+1]-1
//   targets[i]      Target {veu, steps}: the barrier-rTask waits until steps[veu] >= epoch + steps
//   optab[op]       OpRecord {kernel instantiation id, first argument slot, grid xyz, block xyz, layout offset}
//   argtab[slot]    device pointers and scalars (bit patterns, 8 bytes a slot) of every op
//   steps[v]        rTasks vEU v has finished, plus the epoch of the run (monotonic: never reset per run)
//   err[8]          {flag, vEU, instruction, awaited vEU, awaited steps, observed steps}: the watchdog record
// Buffers reach rKernels only through argtab (loaded pointers, never kernel parameters), so nvcc cannot prove them
// read-only for the launch and does not read them through the non-coherent cache (ld.global.nc), which would be
// wrong for tensors other vEUs write during the same launch; only the tables above are read that way.
// Memory order: a finished rTask is published by thread 0 with a release store after the vEU barrier; waiters
// poll with acquire loads (one target per thread, in parallel), then a vEU barrier hands the order to all.
#pragma once

#include "rtask_runtime.cuh"

#ifndef VD_RECORDS_DEFINED
#error "vdevice_runtime.cuh needs the table records that vdevice.codegen emits before it (vdevice/tables.py)"
#endif

namespace vd {

typedef unsigned long long u64;

enum : unsigned { VD_RUN = 0u, VD_WAIT = 1u };
enum : unsigned { POLL_OK = 0u, POLL_ABORTED = 1u, POLL_TIMEOUT = 2u };

// Dynamic shared memory of a vEU (docs/ARCHITECTURE.md §1): for the rTask being run, its dynamic bytes at 0
// (legacy extern __shared__ arrays alias them), its layout struct at align16(dynamic bytes); after the largest
// such region (ctl_offset) the vEU's own rt::TaskSlot and Control. Kept in the dynamic buffer rather than as
// static __shared__ so the same code runs where static shared memory is not per block (the CPU emulator).
struct alignas(16) Control {
  unsigned flags[3];  // rotating vEU-wide "some poller failed" slots, one per barrier-rTask (reset one ahead)
  unsigned pad;
};
constexpr unsigned kHeaderBytes = (sizeof(rt::TaskSlot) + 15u) / 16u * 16u + sizeof(Control);

template <class T>
__host__ __device__ constexpr u64 layout_bytes() { return (sizeof(T) + 15u) / 16u * 16u; }

// ---- argument decoding: the rKernel's own parameter types, deduced from its address ----------------------
template <class T> struct is_pointer { static constexpr bool value = false; };
template <class T> struct is_pointer<T*> { static constexpr bool value = true; };

template <class P>
__device__ __forceinline__ P arg(const u64* slot) {
  if constexpr (is_pointer<P>::value) {
    return reinterpret_cast<P>(*slot);
  } else {
    static_assert(sizeof(P) <= 8, "scalar rKernel arguments of at most 8 bytes");
    const u64 bits = *slot;  // one 8-byte load, then a register-level bit cast
    P value;  // byte copy: NVRTC has no __builtin_memcpy; the compiler folds this into a move
    unsigned char* out = reinterpret_cast<unsigned char*>(&value);
#pragma unroll
    for (unsigned i = 0; i < sizeof(P); ++i) out[i] = static_cast<unsigned char>(bits >> (8 * i));
    return value;
  }
}

template <unsigned... I> struct seq {};
template <unsigned N, unsigned... I> struct make_seq : make_seq<N - 1, N - 1, I...> {};
template <unsigned... I> struct make_seq<0, I...> { using type = seq<I...>; };

template <class Sig> struct signature;
template <class... P>
struct signature<void (*)(rt::Task&, P...)> {
  template <auto F, unsigned... I>
  static __device__ __forceinline__ void call(rt::Task& t, const u64* a, seq<I...>) {
    F(t, arg<P>(a + I)...);
  }
  using indices = typename make_seq<sizeof...(P)>::type;
};

// Calls rKernel F (e.g. &ns::K__rtask<16>) with arguments decoded from one op's argument slots.
template <auto F>
__device__ __forceinline__ void invoke(rt::Task& t, const u64* a) {
  using S = signature<decltype(F)>;
  S::template call<F>(t, a, typename S::indices{});
}

// ---- step array: publish and poll ------------------------------------------------------------------------
__device__ __forceinline__ void publish(unsigned* p, unsigned value) {
#if defined(RT_CPU_EMULATOR)
  *reinterpret_cast<volatile unsigned*>(p) = value;
#else
  asm volatile("st.release.gpu.global.u32 [%0], %1;" ::"l"(p), "r"(value) : "memory");
#endif
}

// Acquire orders the awaited rTask's writes before what this vEU does next; relaxed only wants a fresh value
// (the abort flag).
template <bool kAcquire>
__device__ __forceinline__ unsigned load_gpu(const unsigned* p) {
#if defined(RT_CPU_EMULATOR)
  return *reinterpret_cast<const volatile unsigned*>(p);
#else
  unsigned value;
  if constexpr (kAcquire) {
    asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(value) : "l"(p) : "memory");
  } else {
    asm volatile("ld.relaxed.gpu.global.u32 %0, [%1];" : "=r"(value) : "l"(p) : "memory");
  }
  return value;
#endif
}
__device__ __forceinline__ unsigned load_acquire(const unsigned* p) { return load_gpu<true>(p); }
__device__ __forceinline__ unsigned load_relaxed(const unsigned* p) { return load_gpu<false>(p); }

// Polls until *step >= target. budget: poll count on the CPU emulator, clock64 cycles on the GPU.
__device__ inline unsigned poll_until(const unsigned* step, unsigned target, const unsigned* err, u64 budget) {
#if defined(RT_CPU_EMULATOR)
  for (u64 polls = 0;; ++polls) {
    if (load_acquire(step) >= target) return POLL_OK;
    if (load_relaxed(err) != 0u) return POLL_ABORTED;
    if (polls >= budget) return POLL_TIMEOUT;
    emu_yield("vdevice barrier-rTask");
  }
#else
  if (load_acquire(step) >= target) return POLL_OK;
  const long long start = clock64();
  unsigned ns = 32;
  for (;;) {
    __nanosleep(ns);
    if (ns < 256u) ns <<= 1;
    if (load_acquire(step) >= target) return POLL_OK;
    if (load_relaxed(err) != 0u) return POLL_ABORTED;
    if (static_cast<u64>(clock64() - start) > budget) return POLL_TIMEOUT;
  }
#endif
}

// First watchdog to fire records what it waited for; every other poller sees the flag and leaves.
__device__ inline void report_timeout(unsigned* err, unsigned veu, unsigned pc, unsigned awaited, unsigned need,
                                      unsigned observed) {
  if (atomicCAS(err, 0u, 1u) == 0u) {
    err[1] = veu;
    err[2] = pc;
    err[3] = awaited;
    err[4] = need;
    err[5] = observed;
    __threadfence();
  }
}

// Barrier-rTask: thread i polls targets i, i + blockDim.x, ...; returns nonzero (all threads) when aborted.
__device__ inline unsigned barrier_rtask(const Target* targets, unsigned count, const unsigned* steps,
                                         unsigned* err, unsigned epoch, u64 budget, unsigned veu, unsigned pc,
                                         Control* ctl, unsigned nwait) {
  const unsigned tid = threadIdx.x;
  unsigned* flag = &ctl->flags[nwait % 3u];
  if (tid == 0) ctl->flags[(nwait + 1u) % 3u] = 0u;
  for (unsigned i = tid; i < count; i += blockDim.x) {
    const unsigned u = targets[i].veu, need = targets[i].steps;
    const unsigned r = poll_until(steps + u, epoch + need, err, budget);
    if (r == POLL_TIMEOUT) {
      const unsigned seen = load_acquire(steps + u);
      report_timeout(err, veu, pc, u, need, seen >= epoch ? seen - epoch : 0u);
    }
    if (r != POLL_OK) {
      *flag = 1u;
      break;
    }
  }
  __syncthreads();
  return *flag;
}

// The interpreter loop of one vEU (blockIdx.x). Dispatch(kid, task, args) calls the rKernel instantiation.
template <class Dispatch>
__device__ __forceinline__ void interpret(const Instr* instr, const unsigned* veu_begin, const Target* targets,
                                          const OpRecord* optab, const u64* argtab, unsigned* steps, unsigned* err,
                                          unsigned epoch, unsigned ctl_offset, u64 budget, Dispatch dispatch) {
  char* dynamic = rt::dynamic_smem();
  rt::TaskSlot* slot = reinterpret_cast<rt::TaskSlot*>(dynamic + ctl_offset);
  Control* ctl = reinterpret_cast<Control*>(dynamic + ctl_offset + (sizeof(rt::TaskSlot) + 15u) / 16u * 16u);
  const unsigned v = blockIdx.x;
  if (threadIdx.x == 0) ctl->flags[0] = ctl->flags[1] = ctl->flags[2] = 0u;
  __syncthreads();
  unsigned done = 0, nwait = 0;
  const unsigned end = veu_begin[v + 1];
  for (unsigned pc = veu_begin[v]; pc < end; ++pc) {
    const Instr in = instr[pc];
    if (in.kind == VD_RUN) {
      const OpRecord& op = optab[in.a];
      rt::Task t = rt::make_task(slot, in.b, dim3(op.grid_x, op.grid_y, op.grid_z),
                                 dim3(op.block_x, op.block_y, op.block_z), dynamic + op.layout_offset, dynamic);
      rt::begin_task(t);
      if (t.tid < t.nthreads) {
        dispatch(op.kernel, t, argtab + op.first_arg);
        rt::end_task(t);
      }
      __syncthreads();
      ++done;
      if (threadIdx.x == 0) publish(steps + v, epoch + done);
    } else if (barrier_rtask(targets + in.a, in.b, steps, err, epoch, budget, v, pc, ctl, nwait++)) {
      return;
    }
  }
}

}  // namespace vd
