// emu_sync.h — CUDA's synchronisation, warp, atomic and miscellaneous device intrinsics on the emulator's
// fibers. Part of cuda_emu.h; include that instead.
#pragma once

// Sanitized builds inline these wrappers for sure, so the out-of-line entry they call (bar_arrive,
// warp_collective) sees the CUDA source's call site as its return address.
#if defined(EMU_SANITIZE)
#define EMU_WRAP inline __attribute__((always_inline))
#else
#define EMU_WRAP inline
#endif

// ---- block barriers --------------------------------------------------------------------------------------
// The caller's file and line come in as default arguments: synccheck compares barrier sites by source line.
#define EMU_HERE const char* emu_file = __builtin_FILE(), unsigned emu_line = __builtin_LINE()
EMU_WRAP void __syncthreads(EMU_HERE) { emu::bar_arrive(emu::BAR_SYNC, 1, emu_file, emu_line); }
EMU_WRAP int __syncthreads_count(int pred, EMU_HERE) { return emu::bar_arrive(emu::BAR_COUNT, pred, emu_file, emu_line); }
EMU_WRAP int __syncthreads_and(int pred, EMU_HERE) { return emu::bar_arrive(emu::BAR_AND, pred, emu_file, emu_line); }
EMU_WRAP int __syncthreads_or(int pred, EMU_HERE) { return emu::bar_arrive(emu::BAR_OR, pred, emu_file, emu_line); }
#undef EMU_HERE

// ---- warp collectives ------------------------------------------------------------------------------------
namespace emu {
template <class T>
inline unsigned long long pack(T v) {
  static_assert(sizeof(T) <= 8 && std::is_trivially_copyable_v<T>, "warp shuffles move values of <= 8 bytes");
  unsigned long long u = 0;
  memcpy(&u, &v, sizeof(T));
  return u;
}
template <class T>
inline T unpack(unsigned long long u) {
  T v;
  memcpy(&v, &u, sizeof(T));
  return v;
}
}  // namespace emu

EMU_WRAP void __syncwarp(unsigned mask = 0xffffffffu) { emu::warp_collective(emu::W_SYNC, "__syncwarp", mask, 0); }
// Values wider than 8 bytes (cooperative groups' tile.shfl takes any trivially copyable type: uint4, structs)
// move as consecutive 8-byte shuffles with the same source lane, as CUDA's cg implementation splits them.
namespace emu {
template <class T, class One>
inline T shfl_any(T v, One one) {
  static_assert(std::is_trivially_copyable_v<T>, "warp shuffles move trivially copyable values");
  if constexpr (sizeof(T) <= 8) {
    return unpack<T>(one(pack(v)));
  } else {
    constexpr size_t n = (sizeof(T) + 7) / 8;
    unsigned long long in[n] = {}, out[n];
    memcpy(in, &v, sizeof(T));
    for (size_t i = 0; i < n; i++) out[i] = one(in[i]);
    T r;
    memcpy(&r, out, sizeof(T));
    return r;
  }
}
}  // namespace emu
template <class T>
EMU_WRAP T __shfl_sync(unsigned mask, T var, int src_lane, int width = warpSize) {
  return emu::shfl_any(var, [&](unsigned long long u) {
    return emu::warp_collective(emu::W_IDX, "__shfl_sync", mask, u, src_lane, width); });
}
template <class T>
EMU_WRAP T __shfl_up_sync(unsigned mask, T var, unsigned delta, int width = warpSize) {
  return emu::shfl_any(var, [&](unsigned long long u) {
    return emu::warp_collective(emu::W_UP, "__shfl_up_sync", mask, u, (int)delta, width); });
}
template <class T>
EMU_WRAP T __shfl_down_sync(unsigned mask, T var, unsigned delta, int width = warpSize) {
  return emu::shfl_any(var, [&](unsigned long long u) {
    return emu::warp_collective(emu::W_DOWN, "__shfl_down_sync", mask, u, (int)delta, width); });
}
template <class T>
EMU_WRAP T __shfl_xor_sync(unsigned mask, T var, int lane_mask, int width = warpSize) {
  return emu::shfl_any(var, [&](unsigned long long u) {
    return emu::warp_collective(emu::W_XOR, "__shfl_xor_sync", mask, u, lane_mask, width); });
}
EMU_WRAP unsigned __ballot_sync(unsigned mask, int pred) {
  return (unsigned)emu::warp_collective(emu::W_BALLOT, "__ballot_sync", mask, pred != 0);
}
EMU_WRAP int __any_sync(unsigned mask, int pred) {
  return (int)emu::warp_collective(emu::W_ANY, "__any_sync", mask, pred != 0);
}
EMU_WRAP int __all_sync(unsigned mask, int pred) {
  return (int)emu::warp_collective(emu::W_ALL, "__all_sync", mask, pred != 0);
}
inline int __uni_sync(unsigned mask, int pred) { return __all_sync(mask, pred) || !__any_sync(mask, pred); }
// Lanes of the caller's warp that have not exited (threads are not converged in the emulator's model).
inline unsigned __activemask() { return emu::active_mask(); }
template <class T>
inline unsigned __match_any_sync(unsigned mask, T value) {
  return (unsigned)emu::warp_collective(emu::W_MATCH_ANY, "__match_any_sync", mask, emu::pack(value));
}
template <class T>
inline unsigned __match_all_sync(unsigned mask, T value, int* pred) {
  unsigned r = (unsigned)emu::warp_collective(emu::W_MATCH_ALL, "__match_all_sync", mask, emu::pack(value));
  if (pred) *pred = emu::g.cur ? emu::g.cur->wpred : 1;
  return r;
}
#define EMU_WARP_REDUCE(NAME, T, OP)                                                              \
  inline T NAME(unsigned mask, T v) {                                                             \
    return (T)(unsigned)emu::warp_collective(emu::OP, #NAME, mask, (unsigned)v);                  \
  }
EMU_WARP_REDUCE(__reduce_add_sync, unsigned, W_ADD)
EMU_WARP_REDUCE(__reduce_add_sync, int, W_ADD)
EMU_WARP_REDUCE(__reduce_min_sync, unsigned, W_UMIN)
EMU_WARP_REDUCE(__reduce_min_sync, int, W_MIN)
EMU_WARP_REDUCE(__reduce_max_sync, unsigned, W_UMAX)
EMU_WARP_REDUCE(__reduce_max_sync, int, W_MAX)
EMU_WARP_REDUCE(__reduce_and_sync, unsigned, W_AND)
EMU_WARP_REDUCE(__reduce_or_sync, unsigned, W_OR)
EMU_WARP_REDUCE(__reduce_xor_sync, unsigned, W_XORR)
#undef EMU_WARP_REDUCE
// Pre-Volta names (implicit full mask).
template <class T> inline T __shfl(T v, int src, int width = warpSize) { return __shfl_sync(0xffffffffu, v, src, width); }
template <class T> inline T __shfl_up(T v, unsigned d, int width = warpSize) { return __shfl_up_sync(0xffffffffu, v, d, width); }
template <class T> inline T __shfl_down(T v, unsigned d, int width = warpSize) { return __shfl_down_sync(0xffffffffu, v, d, width); }
template <class T> inline T __shfl_xor(T v, int m, int width = warpSize) { return __shfl_xor_sync(0xffffffffu, v, m, width); }
inline unsigned __ballot(int p) { return __ballot_sync(0xffffffffu, p); }
inline int __any(int p) { return __any_sync(0xffffffffu, p); }
inline int __all(int p) { return __all_sync(0xffffffffu, p); }

// ---- atomics: one OS thread, so a read-modify-write is atomic; one that changes nothing is a poll -------
namespace emu {
template <class T>
EMU_NOSAN T rmw_done(T* p, T old) {
  san.atomic_hi = 0;  // the atomic is done: a later fault is not its (san_atomic_fault)
  if (memcmp(p, &old, sizeof(T)) == 0 && g.cur) yield("atomic poll");
  return old;
}
template <class T> using same_t = std::type_identity_t<T>;  // the operand converts to the pointee type
}  // namespace emu
template <class T> EMU_NOSAN T atomicAdd(T* p, emu::same_t<T> v) { emu::san_atomic(p, sizeof(T), EMU_CALL_SITE); T o = *p; *p = o + v; return emu::rmw_done(p, o); }
template <class T> EMU_NOSAN T atomicSub(T* p, emu::same_t<T> v) { emu::san_atomic(p, sizeof(T), EMU_CALL_SITE); T o = *p; *p = o - v; return emu::rmw_done(p, o); }
template <class T> EMU_NOSAN T atomicExch(T* p, emu::same_t<T> v) { emu::san_atomic(p, sizeof(T), EMU_CALL_SITE); T o = *p; *p = v; return emu::rmw_done(p, o); }
template <class T> EMU_NOSAN T atomicMin(T* p, emu::same_t<T> v) { emu::san_atomic(p, sizeof(T), EMU_CALL_SITE); T o = *p; *p = v < o ? v : o; return emu::rmw_done(p, o); }
template <class T> EMU_NOSAN T atomicMax(T* p, emu::same_t<T> v) { emu::san_atomic(p, sizeof(T), EMU_CALL_SITE); T o = *p; *p = o < v ? v : o; return emu::rmw_done(p, o); }
template <class T> EMU_NOSAN T atomicAnd(T* p, emu::same_t<T> v) { emu::san_atomic(p, sizeof(T), EMU_CALL_SITE); T o = *p; *p = o & v; return emu::rmw_done(p, o); }
template <class T> EMU_NOSAN T atomicOr(T* p, emu::same_t<T> v) { emu::san_atomic(p, sizeof(T), EMU_CALL_SITE); T o = *p; *p = o | v; return emu::rmw_done(p, o); }
template <class T> EMU_NOSAN T atomicXor(T* p, emu::same_t<T> v) { emu::san_atomic(p, sizeof(T), EMU_CALL_SITE); T o = *p; *p = o ^ v; return emu::rmw_done(p, o); }
template <class T>
EMU_NOSAN T atomicCAS(T* p, emu::same_t<T> cmp, emu::same_t<T> v) {
  emu::san_atomic(p, sizeof(T), EMU_CALL_SITE);
  T o = *p;
  if (o == cmp) *p = v;
  return emu::rmw_done(p, o);
}
EMU_NOSAN unsigned atomicInc(unsigned* p, unsigned v) {
  emu::san_atomic(p, sizeof(unsigned), EMU_CALL_SITE);
  unsigned o = *p; *p = o >= v ? 0u : o + 1u; return emu::rmw_done(p, o); }
EMU_NOSAN unsigned atomicDec(unsigned* p, unsigned v) {
  emu::san_atomic(p, sizeof(unsigned), EMU_CALL_SITE);
  unsigned o = *p;
  *p = (o == 0u || o > v) ? v : o - 1u;
  return emu::rmw_done(p, o);
}
#define EMU_ATOMIC_SCOPES(NAME)                                                       \
  template <class... A> inline auto NAME##_block(A... a) { return NAME(a...); }       \
  template <class... A> inline auto NAME##_system(A... a) { return NAME(a...); }
EMU_ATOMIC_SCOPES(atomicAdd)
EMU_ATOMIC_SCOPES(atomicSub)
EMU_ATOMIC_SCOPES(atomicExch)
EMU_ATOMIC_SCOPES(atomicMin)
EMU_ATOMIC_SCOPES(atomicMax)
EMU_ATOMIC_SCOPES(atomicAnd)
EMU_ATOMIC_SCOPES(atomicOr)
EMU_ATOMIC_SCOPES(atomicXor)
EMU_ATOMIC_SCOPES(atomicCAS)
EMU_ATOMIC_SCOPES(atomicInc)
EMU_ATOMIC_SCOPES(atomicDec)
#undef EMU_ATOMIC_SCOPES

// ---- memory-order, cache-hint and miscellaneous intrinsics -----------------------------------------------
inline void __threadfence() { __asm__ __volatile__("" ::: "memory"); }
inline void __threadfence_block() { __asm__ __volatile__("" ::: "memory"); }
inline void __threadfence_system() { __asm__ __volatile__("" ::: "memory"); }
inline void __nanosleep(unsigned) { emu_yield("__nanosleep"); }
inline long long clock64() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (long long)ts.tv_sec * 1000000000ll + ts.tv_nsec;
}
[[noreturn]] inline void __trap() { emu::fail("%s: __trap()", emu::here()); }
[[noreturn]] inline void __brkpt() { emu::fail("%s: __brkpt()", emu::here()); }
template <class T> inline T __ldg(const T* p) { return *p; }
template <class T> inline T __ldcg(const T* p) { return *p; }
template <class T> inline T __ldca(const T* p) { return *p; }
template <class T> inline T __ldcs(const T* p) { return *p; }
template <class T> inline T __ldlu(const T* p) { return *p; }
template <class T> inline T __ldcv(const T* p) { return *p; }
template <class T> inline void __stcg(T* p, T v) { *p = v; }
template <class T> inline void __stcs(T* p, T v) { *p = v; }
template <class T> inline void __stwb(T* p, T v) { *p = v; }
template <class T> inline void __stwt(T* p, T v) { *p = v; }
inline size_t __cvta_generic_to_shared(const void* p) { return (size_t)p; }
inline size_t __cvta_generic_to_global(const void* p) { return (size_t)p; }
inline void* __cvta_shared_to_generic(size_t a) { return reinterpret_cast<void*>(a); }
inline void* __cvta_global_to_generic(size_t a) { return reinterpret_cast<void*>(a); }
inline unsigned __isShared(const void*) { return 0; }
inline unsigned __isGlobal(const void*) { return 1; }
#define __builtin_assume(x) ((void)0)
#define __assume(x) ((void)0)
