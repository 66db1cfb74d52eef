// vdevice_runtime.cuh — the persistent interpreter that runs an rProgram (vdevice/codegen.py emits the rest).
//
// Tables (device memory, written by vdevice/codegen.py). Their row types vd::Instr and vd::Target and the bits of
// Instr.code are generated from one description in vdevice/tables.py and emitted ahead of this header:
//   instr[pc]       Instr, 32 bytes: a run {instantiation id | VD_NAMED | VD_PREPARE | VD_RESIDENT, rtask,
//                   first argument slot, 1 + counter to publish (0: none), grid, block, layout offset} or a wait
//                   {VD_WAIT, first target, target count, -, first target's counter and count}; vEU v runs instructions
//                   veu_begin[v] .. veu_begin[v+1]-1, and the table ends with one pad row (the one-ahead fetch of
//                   a vEU's last instruction reads it)
//   targets[i]      Target {counter, count}: the barrier-rTask waits until counters[counter] >= (run + 1) * count
//   argtab[slot]    device pointers and scalars (bit patterns, 8 bytes a slot) of every op
//   counters[c]     how many awaited rTasks of group c have finished, over all runs (monotonic: never reset per
//                   run; `run` counts this program's launches since the counters were last zeroed)
//   progress[v]     instructions vEU v completed in this launch, written when it leaves (the watchdog's message)
//   err[8]          {flag, vEU, instruction, counter, needed, observed}: the watchdog record
// Buffers reach rKernels only through argtab (loaded pointers, never kernel parameters), so nvcc cannot prove them
// read-only for the launch and does not read them through the non-coherent cache (ld.global.nc), which would be
// wrong for tensors other vEUs write during the same launch; only the tables above are read that way.
// Memory order (PTX ISA, "Memory Consistency Model"): an awaited rTask is published by thread 0 after the vEU
// barrier with one release reduction on its group's counter (red.release.gpu); a barrier-rTask polls each of its
// counters with relaxed loads (one thread per counter), then one acquire fence (fence.acquire.gpu) by each polling
// thread, then a vEU barrier hands the order to all threads. Each step's argument is at the function doing it.
#pragma once

#include "rtask_runtime.cuh"

#ifndef VD_RECORDS_DEFINED
#error "vdevice_runtime.cuh needs the table records that vdevice.codegen emits before it (vdevice/tables.py)"
#endif

namespace vd {

typedef unsigned long long u64;

enum : unsigned { POLL_OK = 0u, POLL_ABORTED = 1u, POLL_TIMEOUT = 2u };

// Dynamic shared memory of a vEU (docs/ARCHITECTURE.md §1): for the rTask being run, its dynamic bytes at 0
// (legacy extern __shared__ arrays alias them), its layout struct at align16(dynamic bytes); after the largest
// such region (ctl_offset) the vEU's own rt::TaskSlot and Control, then (kHeaderBytes on) the vEU's resident
// region (§7): filled by a family's load rTask, read by its pinned rTasks, never touched by any other rTask, so it
// outlives them. Kept in the dynamic buffer rather than as static __shared__ so the same code runs where static
// shared memory is not per block (the CPU emulator).
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

// An rTask's argument slots: the first kArgSlots are loaded into registers ahead of time (prefetch_args, at the
// end of the rTask before it, after its publish); the rest are read from argtab at the dispatch. argtab is written by
// the host before the launch and never during it, so loading it early needs no ordering: the loads may precede the
// barrier-rTask's acquire, and its L1 invalidation (CCTL.IVALL) cannot touch values already in registers.
#ifndef VD_ARG_SLOTS
#error "vdevice_runtime.cuh needs VD_ARG_SLOTS (vdevice.codegen.PREFETCHED_SLOTS) defined before it"
#endif
constexpr unsigned kArgSlots = VD_ARG_SLOTS;
static_assert(kArgSlots % 2u == 0u, "argument slots are prefetched in pairs");
struct Args {
  const u64* slot;    // argtab + the rTask's first slot
  u64 pre[kArgSlots];  // slot[0 .. kArgSlots-1], loaded ahead (argtab has kArgSlots slots of padding at its end)
};

__device__ __forceinline__ Args prefetch_args(const u64* argtab, unsigned first) {
  Args a;
  a.slot = argtab + first;
#if defined(RT_CPU_EMULATOR)
  for (unsigned i = 0; i < kArgSlots; ++i) a.pre[i] = a.slot[i];
#else
  // an op's first slot is even (ArgTable.build) and argtab 256-byte aligned: 128-bit loads through the read-only
  // path (argtab is const __restrict__). ptxas schedules them as soon as the record is in registers, even above the
  // vEU barrier and the publish (read-only data needs no order); slots no dispatch case reads are removed.
  const ulonglong2* pairs = reinterpret_cast<const ulonglong2*>(a.slot);
#pragma unroll
  for (unsigned i = 0; i < kArgSlots / 2u; ++i) {
    const ulonglong2 v = pairs[i];
    a.pre[2u * i] = v.x;
    a.pre[2u * i + 1u] = v.y;
  }
#endif
  return a;
}

template <unsigned I>
__device__ __forceinline__ u64 slot_bits(const Args& a) {
  if constexpr (I < kArgSlots) return a.pre[I];
  else return a.slot[I];
}

template <class P>
__device__ __forceinline__ P arg(u64 bits) {
  if constexpr (is_pointer<P>::value) {
#if defined(RT_CPU_EMULATOR)
    return reinterpret_cast<P>(bits);
#elif defined(__CUDACC_RTC__) && (__CUDACC_VER_MAJOR__ * 100 + __CUDACC_VER_MINOR__ >= 1305)
    // every pointer argument is a buffer of the program (ArgTable has no null pointers), all in global memory:
    // converting it from a global address says so, so the compiler uses LDG/STG instead of generic loads and
    // stores (an __isGlobal assumption on the pointer is lost once the slot comes from a loop-carried register).
    // NVRTC 13.5 or later only: CUDA 13.0's NVVM never finishes a module that does this, as nvcc (cicc) or as
    // NVRTC (the three-op interpreter of tests/test_vdevice.py: 0.3 s under NVRTC 13.5; > 20 min under nvcc 13.0,
    // > 5 min under NVRTC 13.0.88; the H100's toolkit of 2026-11-27 is 13.0). Versions between are untested.
    return static_cast<P>(__cvta_global_to_generic(static_cast<size_t>(bits)));
#else
    const P p = reinterpret_cast<P>(bits);
    __builtin_assume(__isGlobal(p));  // nvcc: the weaker promise (lost on loop-carried slots), see above
    return p;
#endif
  } else {
    static_assert(sizeof(P) <= 8, "scalar rKernel arguments of at most 8 bytes");
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
  static __device__ __forceinline__ void call(rt::Task& t, const Args& a, seq<I...>) {
    F(t, arg<P>(slot_bits<I>(a))...);
  }
  using indices = typename make_seq<sizeof...(P)>::type;
};

// Calls rKernel F (e.g. &ns::K__rtask<16>) with arguments decoded from one op's argument slots.
template <auto F>
__device__ __forceinline__ void invoke(rt::Task& t, const Args& a) {
  using S = signature<decltype(F)>;
  S::template call<F>(t, a, typename S::indices{});
}

// ---- counters: publish and poll ---------------------------------------------------------------------------
// Only rTasks that some barrier-rTask awaits publish, each by one release reduction on the counter of its group
// (vdevice/codegen.py groups the awaited rTasks, normally one counter per awaited op); an rTask nobody awaits
// publishes nothing (no fence, no store).
// Why one red.release.gpu suffices: every thread's writes of the rTask precede the vEU barrier (bar.sync, which
// orders them before thread 0's later operations at CTA scope), and a release operation is cumulative: with the
// barrier it forms the PTX model's release pattern for all of them, at gpu scope. ptxas lowers the release half to
// MEMBAR.ALL.GPU (+ ERRBAR) ahead of the REDG: that drain is the release itself, and every gpu-scope release form
// (red.release, fence.release + red.relaxed, st.release) compiles to it on sm_90 (docs/vdevice-dispatch-sass.md).
__device__ __forceinline__ void publish(unsigned* counter) {
#if defined(RT_CPU_EMULATOR)
  atomicAdd(counter, 1u);  // fibers of one OS thread: every access is sequentially consistent
#else
  asm volatile("red.release.gpu.global.add.u32 [%0], 1;" ::"l"(counter) : "memory");
#endif
}

// A relaxed load wants only a fresh value: the order is taken once, by acquire_fence, when the poll is satisfied
// (an ld.acquire per poll would be a strong load plus an L1 invalidate each time).
__device__ __forceinline__ unsigned load_relaxed(const unsigned* p) {
#if defined(RT_CPU_EMULATOR)
  return *reinterpret_cast<const volatile unsigned*>(p);
#else
  unsigned value;
  asm volatile("ld.relaxed.gpu.global.u32 %0, [%1];" : "=r"(value) : "l"(p) : "memory");
  return value;
#endif
}

// After the relaxed load that saw the publish: ld.relaxed.gpu (strong, morally strong with the red.release.gpu it
// read from) followed by fence.acquire.gpu is the PTX model's acquire pattern (PTX ABI: "ld.relaxed; fence.acquire"
// is a valid mapping of an acquiring load), so the publisher's release synchronizes with it and the vEU barrier that
// follows carries the order to every thread of the vEU. fence.acquire has no release half: no MEMBAR, only the L1
// invalidation (CCTL.IVALL) that keeps the next rTask's weak loads from hitting lines this SM cached before the
// producer wrote them. That invalidation is what any gpu-scope acquire costs on sm_90 (ld.acquire.gpu, fence.
// acquire/acq_rel/sc.gpu, .cluster and .sys scopes all emit it), so a satisfied wait keeps exactly one per polling
// thread. fence.acquire needs PTX ISA 8.6 (CUDA 12.8+); older compilers get fence.acq_rel (adds the MEMBAR).
__device__ __forceinline__ void acquire_fence() {
#if !defined(RT_CPU_EMULATOR)
#if defined(__CUDACC_VER_MAJOR__) && (__CUDACC_VER_MAJOR__ > 12 || (__CUDACC_VER_MAJOR__ == 12 && __CUDACC_VER_MINOR__ >= 8))
  asm volatile("fence.acquire.gpu;" ::: "memory");
#else
  asm volatile("fence.acq_rel.gpu;" ::: "memory");
#endif
#endif
}

constexpr unsigned kBackoffNs = 32;  // fixed: a hand-off costs about 1.45 us (H100, 2026-11-27), so poll often
// The watchdog's clock path: the abort flag and the budget are looked at once per this many clock64 cycles (about
// 5 us at 1.8 GHz), so a failed poll is one global load (the counter) plus a clock read; a stuck program's other
// pollers still leave within microseconds of the first timeout.
constexpr long long kWatchCycles = 8192;
constexpr unsigned kWatchPolls = 64;  // the CPU emulator's clock path: every this many polls (a poll is one yield)

// Polls until *counter >= need (relaxed). budget: poll count on the CPU emulator, clock64 cycles on the GPU.
__device__ inline unsigned poll_until(const unsigned* counter, unsigned need, const unsigned* err, u64 budget) {
#if defined(RT_CPU_EMULATOR)
  for (u64 polls = 0;; ++polls) {
    if (load_relaxed(counter) >= need) return POLL_OK;
    if (polls % kWatchPolls == kWatchPolls - 1u) {  // the same structure as the GPU's clock path
      if (load_relaxed(err) != 0u) return POLL_ABORTED;
      if (polls >= budget) return POLL_TIMEOUT;
    }
    emu_yield("vdevice barrier-rTask");
  }
#else
  if (load_relaxed(counter) >= need) return POLL_OK;
  const long long start = clock64();
  long long watch = start + kWatchCycles;
  for (;;) {
    __nanosleep(kBackoffNs);
    if (load_relaxed(counter) >= need) return POLL_OK;
    const long long now = clock64();
    if (now >= watch) {  // the watchdog's clock path: the only place the abort flag is read
      if (load_relaxed(err) != 0u) return POLL_ABORTED;
      if (static_cast<u64>(now - start) > budget) return POLL_TIMEOUT;
      watch = now + kWatchCycles;
    }
  }
#endif
}

// First watchdog to fire records what it waited for; every other poller sees the flag and leaves.
__device__ inline void report_timeout(unsigned* err, unsigned veu, unsigned pc, unsigned counter, unsigned need,
                                      unsigned observed) {
  if (atomicCAS(err, 0u, 1u) == 0u) {
    err[1] = veu;
    err[2] = pc;
    err[3] = counter;
    err[4] = need;
    err[5] = observed;
    __threadfence();
  }
}

// Barrier-rTask: thread i polls counter i (a wait has one counter per awaited group, so normally one or a few,
// whatever the fan-in), then one acquire fence, then the vEU barrier hands the order to all threads. The first
// counter comes in the wait's own record (no dependent load when there is one); the others from targets.
// Returns nonzero (all threads) when aborted.
__device__ inline unsigned barrier_rtask(const Instr& in, const Target* targets, const unsigned* counters,
                                         unsigned* err, unsigned run, u64 budget, unsigned veu, unsigned pc,
                                         Control* ctl) {
  // the flag slot rotates with pc: the slot reset here is the one of a wait at least two instructions back,
  // and a vEU barrier lies between that wait's read of its flag and this reset
  const unsigned tid = threadIdx.x, count = in.b;
  unsigned* flag = &ctl->flags[pc % 3u];
  if (tid == 0) ctl->flags[(pc + 1u) % 3u] = 0u;
  for (unsigned i = tid; i < count; i += blockDim.x) {
    const unsigned c = i == 0 ? in.grid_x : targets[in.a + i].counter;
    const unsigned need = (run + 1u) * (i == 0 ? in.grid_yz : targets[in.a + i].count);
    const unsigned r = poll_until(counters + c, need, err, budget);
    if (r == POLL_TIMEOUT) report_timeout(err, veu, pc, c, need, load_relaxed(counters + c));
    if (r != POLL_OK) {
      *flag = 1u;
      break;
    }
  }
  if (tid < count) acquire_fence();
  __syncthreads();
  return *flag;
}

__device__ __forceinline__ bool is_run(const Instr& in) { return in.code != VD_WAIT; }
// The first argument slot of the rTask this record leads to: its own for a run; for a wait, the run after it (the
// wait's `block` field), so the arguments of the rTask after a barrier-rTask are in flight while it polls.
__device__ __forceinline__ unsigned args_of(const Instr& in) { return is_run(in) ? in.b : in.block; }
__device__ __forceinline__ bool needs_prepare(const Instr& in) { return is_run(in) && (in.code & VD_PREPARE); }
__device__ __forceinline__ unsigned nthreads_of(const Instr& in) {
  const unsigned m = (1u << VD_BLOCK_BITS) - 1u;
  return (in.block & m) * ((in.block >> VD_BLOCK_BITS) & m) * (in.block >> (2u * VD_BLOCK_BITS));
}

// Before an rTask that uses the slot (mbarrier or reductions): thread 0 sets it up, the vEU synchronises. Every
// caller has just passed a vEU barrier, so no thread still waits on the previous rTask's mbarrier.
__device__ __forceinline__ unsigned gang_of(const Instr& in);
__device__ __forceinline__ void prepare(const Instr& next, rt::TaskSlot* slot) {
  if (!needs_prepare(next) || gang_of(next) > 1u) return;  // a gang sets up its members' own slots
  if (threadIdx.x == 0) rt::prepare_slot(slot, nthreads_of(next));
  __syncthreads();
}

__device__ __forceinline__ rt::Task task_of(const Instr& in, rt::TaskSlot* slot, char* dynamic,
                                            unsigned home_bytes) {
  const unsigned m = (1u << VD_BLOCK_BITS) - 1u, ym = (1u << VD_GRID_YZ_BITS) - 1u;
  const dim3 grid(in.grid_x, in.grid_yz & ym, in.grid_yz >> VD_GRID_YZ_BITS);
  const dim3 block(in.block & m, (in.block >> VD_BLOCK_BITS) & m, in.block >> (2u * VD_BLOCK_BITS));
  rt::Task t = rt::make_task(slot, in.a, grid, block, dynamic + in.layout_offset, dynamic);
  t.named = (in.code & VD_NAMED) ? rt::RT_NAMED : rt::RT_MBARRIER;
  if (in.code & VD_RESIDENT)  // the vEU's resident region; a folded program's vEU has one per vEU it hosts
    t.resident = reinterpret_cast<char*>(slot) + kHeaderBytes + ((in.code >> VD_HOME_SHIFT) & VD_HOME_MASK) *
                                                                 home_bytes;
  return t;
}

// ---- rTasks side by side: a gang --------------------------------------------------------------------------
// A run record with gang bits leads `gang` consecutive records of one op whose rTasks are at most half a vEU each
// (vdevice/codegen.py forms them): member g runs on threads [g * stride, (g + 1) * stride) (stride: the rTask's
// threads in whole warps), with its own named barrier 1 + g, its own shared-memory region of gang_span bytes at
// g * gang_span (dynamic bytes, layout, and its own TaskSlot at the region's end: mbarrier, reductions, wide-tile
// words and the emulator's named-barrier words), and publishes after the vEU barrier that ends the gang. Members
// are rTasks of one launch, which CUDA never orders among themselves, so running them at once changes no result.
__device__ __forceinline__ unsigned gang_of(const Instr& in) {
  return is_run(in) ? ((in.code >> VD_GANG_SHIFT) & 15u) + 1u : 1u;
}

// A gang member's shared region: g * gang_span into the vEU's buffer, its own TaskSlot at the region's end.
__device__ __forceinline__ rt::TaskSlot* member_slot(char* dynamic, unsigned g, unsigned gang_span) {
  return reinterpret_cast<rt::TaskSlot*>(dynamic + (g + 1u) * gang_span - kHeaderBytes);
}

// Before a gang runs, each member's first thread sets its slot up afresh (the region held other rTasks' data);
// the vEU barrier after it (in interpret) publishes that to the member's threads.
__device__ __forceinline__ void setup_member(const Instr& in, rt::TaskSlot* own) {
  own->named_arrived = own->named_phase = 0u;
  rt::clear_tile_barriers(own);
  if (needs_prepare(in)) rt::prepare_slot(own, nthreads_of(in));
}

// Member g's rTask for this thread: its arguments, its region and slot, its thread index and lanes within the
// member, its named barrier 1 + g.
__device__ __forceinline__ rt::Task member_task(const Instr& in, Args& args, unsigned g, unsigned stride,
                                                const u64* argtab, char* dynamic, unsigned gang_span,
                                                unsigned home_bytes) {
  if (g > 0u) args = prefetch_args(argtab, in.b);
  // g * gang_span is a multiple of 16 (vdevice/codegen.gang_span); the mask lets the compiler see it, so a legacy
  // kernel's 128-bit shared loads (LDS.128) stay where the gang path joins the lone one (__builtin_assume_aligned
  // did not: tests/test_vdevice.py, converted inner loops)
  rt::Task t = task_of(in, member_slot(dynamic, g, gang_span), dynamic + ((g * gang_span) & ~15u), home_bytes);
  t.tid -= g * stride;
  const unsigned live = t.nthreads > (t.tid & ~31u) ? t.nthreads - (t.tid & ~31u) : 0u;
  t.lanemask = live >= 32u ? 0xffffffffu : ((1u << live) - 1u);
  t.bar_id = 1u + g;
  return t;
}

// The interpreter loop of one vEU (blockIdx.x). Dispatch(kid, task, args) calls the rKernel instantiation.
// One 32-byte record per instruction, fetched one instruction ahead: the record of the next rTask is in flight
// while the current one runs, and the next rTask's first kArgSlots argument slots are loaded into registers at the
// end of the current one (after its publish), or before a barrier-rTask polls, so an rTask's path starts with its
// own loads. progress[v] gets how many of its instructions the vEU completed when it leaves (for the watchdog's
// message; nothing is stored per rTask).
template <class Dispatch>
__device__ __forceinline__ void interpret(const Instr* instr, const unsigned* veu_begin, const Target* targets,
                                          const u64* argtab, unsigned* counters, unsigned* progress, unsigned* err,
                                          unsigned run, unsigned ctl_offset, unsigned gang_span,
                                          unsigned home_bytes, u64 budget, Dispatch dispatch) {
  char* dynamic = rt::dynamic_smem();
  rt::TaskSlot* slot = reinterpret_cast<rt::TaskSlot*>(dynamic + ctl_offset);
  Control* ctl = reinterpret_cast<Control*>(dynamic + ctl_offset + (sizeof(rt::TaskSlot) + 15u) / 16u * 16u);
  const unsigned v = blockIdx.x;
  const unsigned begin = veu_begin[v], end = veu_begin[v + 1];
  Instr next = instr[begin];  // the table ends with a pad row: reading one past a vEU's list is always in bounds
  if (threadIdx.x == 0) {
    ctl->flags[0] = ctl->flags[1] = ctl->flags[2] = 0u;
    slot->named_arrived = slot->named_phase = 0u;
    rt::clear_tile_barriers(slot);
  }
  __syncthreads();
  if (begin < end) prepare(next, slot);
  Args args = prefetch_args(argtab, args_of(next));
  unsigned pc = begin;
  for (; pc < end; ++pc) {
    const Instr in = next;
    const unsigned gang = gang_of(in);
    next = instr[pc + gang];  // the record after this run of rTasks (after all of a gang)
    if (is_run(in)) {
      rt::Task t;
      Instr mine = in;
      unsigned counter;  // 1 + the counter this thread publishes after the run (0: none)
      bool runs;
      if (gang == 1u) {  // a lone rTask on the whole vEU: the vEU's own slot and buffer
        t = task_of(in, slot, dynamic, home_bytes);
        counter = threadIdx.x == 0u ? in.publish : 0u;
        runs = t.tid < t.nthreads;
      } else {  // a gang: member g on threads [g * stride, (g + 1) * stride)
        const unsigned stride = (nthreads_of(in) + 31u) & ~31u, g = threadIdx.x / stride;
        const bool first = g < gang && threadIdx.x == g * stride;
        if (g > 0u && g < gang) mine = instr[pc + g];
        if (first) setup_member(mine, member_slot(dynamic, g, gang_span));
        __syncthreads();
        counter = first ? mine.publish : 0u;
        runs = false;
        if (g < gang) {
          t = member_task(mine, args, g, stride, argtab, dynamic, gang_span, home_bytes);
          runs = t.tid < t.nthreads;
        }
      }
      if (runs) {
        dispatch(mine.code & VD_KERNEL_MASK, t, args);
        rt::end_task(t);
      }
      __syncthreads();  // every rTask of the run is finished on every thread: publish, reuse the shared buffer
      if (counter != 0u) publish(counters + counter - 1u);
      pc += gang - 1u;
      args = prefetch_args(argtab, args_of(next));
    } else if (barrier_rtask(in, targets, counters, err, run, budget, v, pc, ctl)) {
      break;  // (a wait's args were prefetched with it: they belong to the run after it)
    }
    if (pc + 1 < end) prepare(next, slot);
  }
  if (threadIdx.x == 0) progress[v] = pc - begin;
}

}  // namespace vd
