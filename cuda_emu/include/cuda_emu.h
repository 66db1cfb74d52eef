// cuda_emu.h — run CUDA device code on the CPU (g++ -std=c++20), one fiber per CUDA thread.
//
// cuda_emu/module.py compiles a CUDA source as: #include "cuda_emu.h", the source, generated launchers; the
// preprocessed text is then rewritten so that every __shared__ declaration names per-block storage:
//   __shared__ T x[N];            ->  static emu::SharedSlot<T [N]> x__emu_slot; auto& x = x__emu_slot.get();
//   extern __shared__ T x[];      ->  T (&x)[] = *(T(*)[])::emu::dyn_smem();
// (namespace-scope ones stay static / bind to the home area, swapped per block in cooperative launches).
// The token __emu_shared__ below exists only between preprocessing and that rewrite.
//
// Model (emu_runtime.h): every CUDA thread is a fiber of one OS thread, switched only where CUDA code can
// block or poll: __syncthreads(_count/_and/_or), warp collectives, __syncwarp, cooperative-groups sync,
// emu_yield, __nanosleep, and atomics that leave memory unchanged (failed CAS, add 0: the usual polls). Plain
// memory operations are therefore atomic with respect to other threads. Barriers follow sm_70+: an exited
// thread no longer counts; warp lanes = linear thread index % 32, lanes past a partial last warp are exited.
// Plain launches run blocks one after another; cooperative launches keep all blocks alive. Globals
// threadIdx/blockIdx/blockDim/gridDim are variables (not macros), set by the scheduler for the fiber it runs,
// so converted code can shadow them with locals of the same name.
//
// A launch never hangs or kills the process (emu_guard.h): a deadlock, an exhausted yield budget, a thread
// running stall_ms without a yield point, a fault (segfault, stack overflow, dynamic shared memory out of
// bounds, integer division by zero), assert(), __trap() or an escaping exception ends it with a message.
//
// Known limits: __activemask() is "the lanes not exited" (no convergence model); inline PTX does not compile
// (emu_mma.h models mma.sync, ldmatrix and cp.async for kernels that call it beside their asm);
// grid groups (this_grid) are not provided; math comes from glibc (the fast __expf & co. are exact here);
// a __shared__ declaration right after a `case` label that another label follows needs braces (the rewrite
// introduces an initialised reference); declarations with initialisers are kept as plain statics; with a
// namespace-scope extern __shared__ array out-of-bounds detection of dynamic shared memory is per page.
#pragma once
#define RT_CPU_EMULATOR 1
#ifndef __CUDACC__
#define __CUDACC__ 1
#endif
#define CUDART_VERSION 13000
#define __CUDACC_VER_MAJOR__ 13
#define __CUDACC_VER_MINOR__ 0

#include <assert.h>
#include <float.h>
#include <limits.h>
// C++20's <math.h> declares std::lerp in the global namespace, where CUDA has none: a kernel file's own
// `__device__ float lerp(float, float, float)` (llm.c has one) would clash with it, so <cmath> is read with
// the name moved aside.
#define lerp emu_std_lerp_
#include <math.h>
#undef lerp
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <time.h>
#include <ucontext.h>

#include <map>
#include <new>
#include <tuple>
#include <type_traits>
#include <utility>

// ---- execution-space and storage qualifiers --------------------------------------------------------------
#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __noinline__
#define __launch_bounds__(...)
#define __maxnreg__(...)
#define __grid_constant__
#define __managed__
#define __constant__
#define __align__(n) __attribute__((aligned(n)))
#define __builtin_align__(n) __attribute__((aligned(n)))
#define __device_builtin__
#define __cudart_builtin__
#define __shared__ __emu_shared__
#define __CUDA_ALIGN__(n) __attribute__((aligned(n)))

#include "emu_types.h"

inline uint3 threadIdx;
inline uint3 blockIdx;
inline dim3 blockDim;
inline dim3 gridDim;
constexpr int warpSize = 32;

#include "emu_math.h"
#include "emu_fiber.h"
#include "emu_runtime.h"
#include "emu_guard.h"
#include "emu_sanitize.h"
#include "emu_sync.h"
#include "emu_cg.h"
#include "emu_wmma.h"
#include "emu_launch.h"

// ---- device printf: bounded like the GPU's printf buffer ----------------------------------------------------
// A launch's printf output stops at 1 MB (cudaLimitPrintfFifoSize's default), as the GPU drops what does not fit;
// the launch then notes on stderr how much was dropped. Outside a launch printf is the C library's.
inline int emu_device_printf(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
inline int emu_device_printf(const char* fmt, ...) {
  char small[1024];
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(small, sizeof small, fmt, ap);
  va_end(ap);
  if (n < 0) return n;
  char* text = small;
  if ((size_t)n >= sizeof small) {
    text = static_cast<char*>(malloc((size_t)n + 1));
    if (!text) return -1;
    va_start(ap, fmt);
    vsnprintf(text, (size_t)n + 1, fmt, ap);
    va_end(ap);
  }
  if (!emu::g.in_launch) {
    fwrite(text, 1, (size_t)n, stdout);
  } else if (emu::g.printf_bytes + (size_t)n > emu::kPrintfBuffer) {
    emu::g.printf_dropped += (size_t)n;
  } else {
    emu::g.printf_bytes += (size_t)n;
    fwrite(text, 1, (size_t)n, stdout);
  }
  if (text != small) free(text);
  return n;
}
#define printf emu_device_printf
namespace std { using ::emu_device_printf; }
