// emu_cg.h — the block-level part of cooperative_groups on the emulator (thread_block, tiles, reduce).
// Grid groups are left out on purpose: the converter refuses grid-wide sync. Part of cuda_emu.h.
#pragma once

namespace cooperative_groups {

class thread_block {
 public:
  static void sync() { __syncthreads(); }
  static unsigned thread_rank() { return threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z); }
  static unsigned size() { return blockDim.x * blockDim.y * blockDim.z; }
  static unsigned num_threads() { return size(); }
  static dim3 group_index() { return dim3(blockIdx); }
  static dim3 thread_index() { return dim3(threadIdx); }
  static dim3 group_dim() { return blockDim; }
  static dim3 dim_threads() { return blockDim; }
};
inline thread_block this_thread_block() { return thread_block(); }

// N consecutive threads of the block (N a power of two <= 32); lanes past the end of the block do not exist.
template <unsigned N>
class thread_block_tile {
  static_assert(N >= 1 && N <= 32 && (N & (N - 1)) == 0, "tiles of 1..32 threads, a power of two");
  unsigned rank_ = 0;     // rank in the block
  unsigned nthreads_ = 0; // threads in the block

  unsigned shift() const { return (rank_ & 31u) / N * N; }
  unsigned bits(unsigned warp_bits) const { return N == 32 ? warp_bits : (warp_bits >> shift()) & ((1u << N) - 1u); }
  bool present(unsigned tile_lane) const { return rank_ / N * N + tile_lane < nthreads_; }

 public:
  thread_block_tile() = default;
  explicit thread_block_tile(unsigned rank, unsigned nthreads) : rank_(rank), nthreads_(nthreads) {}
  unsigned mask() const { return N == 32 ? 0xffffffffu : ((1u << N) - 1u) << shift(); }
  unsigned thread_rank() const { return rank_ % N; }
  static constexpr unsigned size() { return N; }
  static constexpr unsigned num_threads() { return N; }
  unsigned meta_group_rank() const { return rank_ / N; }
  unsigned meta_group_size() const { return (nthreads_ + N - 1) / N; }
  void sync() const { __syncwarp(mask()); }
  template <class T> T shfl(T v, int src) const { return __shfl_sync(mask(), v, src, (int)N); }
  template <class T> T shfl_down(T v, unsigned d) const { return __shfl_down_sync(mask(), v, d, (int)N); }
  template <class T> T shfl_up(T v, unsigned d) const { return __shfl_up_sync(mask(), v, d, (int)N); }
  template <class T> T shfl_xor(T v, unsigned m) const { return __shfl_xor_sync(mask(), v, (int)m, (int)N); }
  unsigned ballot(int p) const { return bits(__ballot_sync(mask(), p)); }
  int any(int p) const { return __any_sync(mask(), p); }
  int all(int p) const { return __all_sync(mask(), p); }
  template <class T> unsigned match_any(T v) const { return bits(__match_any_sync(mask(), v)); }
  template <class T> unsigned match_all(T v, int& pred) const { return bits(__match_all_sync(mask(), v, &pred)); }

  // Reduction to every thread of the tile; a partial tile (end of the block) gathers instead of a butterfly.
  template <class T, class Op>
  T reduce(T v, Op op) const {
    if (present(N - 1)) {
      for (unsigned o = 1; o < N; o <<= 1) v = op(v, shfl_xor(v, o));
      return v;
    }
    T acc = shfl(v, 0);
    for (unsigned l = 1; l < N; ++l) {
      T other = shfl(v, (int)l);
      if (present(l)) acc = op(acc, other);
    }
    return acc;
  }
};

template <unsigned N>
inline thread_block_tile<N> tiled_partition(const thread_block&) {
  return thread_block_tile<N>(thread_block::thread_rank(), thread_block::size());
}
template <unsigned N, unsigned M>
inline thread_block_tile<N> tiled_partition(const thread_block_tile<M>&) {
  static_assert(N <= M, "a tile splits into smaller tiles");
  return thread_block_tile<N>(thread_block::thread_rank(), thread_block::size());
}

inline void sync(const thread_block& g) { g.sync(); }
template <unsigned N>
inline void sync(const thread_block_tile<N>& g) { g.sync(); }

template <class T> struct plus { T operator()(T a, T b) const { return a + b; } };
template <class T> struct less { T operator()(T a, T b) const { return b < a ? b : a; } };
template <class T> struct greater { T operator()(T a, T b) const { return a < b ? b : a; } };
template <class T> struct bit_and { T operator()(T a, T b) const { return a & b; } };
template <class T> struct bit_or { T operator()(T a, T b) const { return a | b; } };
template <class T> struct bit_xor { T operator()(T a, T b) const { return a ^ b; } };

template <unsigned N, class T, class Op>
inline T reduce(const thread_block_tile<N>& g, T v, Op op) { return g.reduce(v, op); }

// ---- coalesced groups: the lanes of a warp that reach coalesced_threads() together ------------------------
// The emulator runs a warp's lanes as separate fibers with no convergence of their own, so "together" is decided
// by the scheduler's state: a lane waits at the call until every other live lane of its warp is either waiting
// at a coalesced_threads() call too or blocked (at a barrier or a warp collective); the group is then the lanes
// waiting at the same call site. The first lane to see that publishes the mask to every member.
}  // namespace cooperative_groups
namespace emu {
struct CoalesceWarp {
  unsigned long long serial[32] = {};  // the block run an entry belongs to (stale entries are ignored)
  uintptr_t site[32] = {};
  bool waiting[32] = {}, ready[32] = {};
  unsigned result[32] = {};
  unsigned line[32] = {};  // source order: the earliest call site forms its group first
};
inline std::map<const void*, CoalesceWarp[32]>& coalesce_table() {
  static std::map<const void*, CoalesceWarp[32]> t;
  return t;
}
// Settled: every live lane waits at a coalesced_threads() call, at a block barrier, or in a warp collective that
// needs a waiting lane (it cannot complete before the group forms); a lane still running, or in a collective
// that will complete without us, may yet arrive.
inline bool coalesce_stable(Block& b, CoalesceWarp& cw, unsigned w) {
  unsigned waiting = 0;
  for (unsigned l = 0; l < 32; ++l)
    if (cw.serial[l] == b.san_serial && cw.waiting[l] && !cw.ready[l]) waiting |= 1u << l;
  for (unsigned l = 0; l < 32; ++l) {
    if (((b.warp_exited[w] | waiting) >> l) & 1u) continue;
    Fiber* p = b.th[w * 32 + l];
    if (p->state == S_BAR || p->state == S_DONE) continue;
    if (p->state == S_WARP && (p->wmask & waiting)) continue;
    return false;
  }
  return true;
}
// The waited-at call that comes first in the source: lanes waiting at a later call may be ones that skipped a
// branch, which in CUDA wait for the branch's lanes where the warp reconverges (before that later call).
inline uintptr_t coalesce_first_site(Block& b, CoalesceWarp& cw) {
  uintptr_t site = 0;
  unsigned best = ~0u;
  for (unsigned l = 0; l < 32; ++l)
    if (cw.serial[l] == b.san_serial && cw.waiting[l] && !cw.ready[l] && cw.line[l] < best) {
      best = cw.line[l];
      site = cw.site[l];
    }
  return site;
}
inline unsigned coalesce(uintptr_t site, unsigned line) {
  Fiber* f = g.cur;
  if (!f) return 1u;
  Block& b = *f->blk;
  unsigned w = f->lin >> 5, lane = f->lin & 31u;
  CoalesceWarp& cw = coalesce_table()[&b][w];
  cw.serial[lane] = b.san_serial; cw.site[lane] = site; cw.waiting[lane] = true; cw.ready[lane] = false;
  cw.line[lane] = line;
  for (;;) {
    if (cw.ready[lane]) {
      cw.waiting[lane] = cw.ready[lane] = false;
      return cw.result[lane];
    }
    if (coalesce_stable(b, cw, w) && coalesce_first_site(b, cw) == site) {
      unsigned mask = 0;
      for (unsigned l = 0; l < 32; ++l)
        if (cw.serial[l] == b.san_serial && cw.waiting[l] && !cw.ready[l] && cw.site[l] == site) mask |= 1u << l;
      for (unsigned l = 0; l < 32; ++l)
        if ((mask >> l) & 1u) { cw.result[l] = mask; cw.ready[l] = true; }
      continue;
    }
    yield("coalesced_threads");
  }
}
}  // namespace emu
namespace cooperative_groups {
class coalesced_group {
  unsigned mask_ = 1u;
  unsigned lane() const { return threadIdx_lane(); }
  static unsigned threadIdx_lane() { return thread_block::thread_rank() & 31u; }
  int lane_of(unsigned rank) const {  // the lane holding group rank `rank`
    unsigned m = mask_;
    for (unsigned r = 0; r < rank && m; ++r) m &= m - 1;
    return m ? __builtin_ctz(m) : 0;
  }

 public:
  explicit coalesced_group(unsigned mask) : mask_(mask) {}
  unsigned get_mask() const { return mask_; }
  unsigned thread_rank() const { return __builtin_popcount(mask_ & ((1u << lane()) - 1u)); }
  unsigned size() const { return __builtin_popcount(mask_); }
  unsigned num_threads() const { return size(); }
  unsigned meta_group_rank() const { return 0; }
  unsigned meta_group_size() const { return 1; }
  void sync() const { __syncwarp(mask_); }
  template <class T> T shfl(T v, unsigned src_rank) const { return __shfl_sync(mask_, v, lane_of(src_rank)); }
  template <class T> T shfl_down(T v, unsigned d) const {
    unsigned r = thread_rank() + d;
    return __shfl_sync(mask_, v, r < size() ? lane_of(r) : (int)lane());
  }
  template <class T> T shfl_up(T v, unsigned d) const {
    unsigned r = thread_rank();
    return __shfl_sync(mask_, v, r >= d ? lane_of(r - d) : (int)lane());
  }
  unsigned ballot(int p) const {  // bit i: the predicate of group rank i
    unsigned bits = __ballot_sync(mask_, p), out = 0, m = mask_;
    for (unsigned r = 0; m; ++r, m &= m - 1) out |= ((bits >> __builtin_ctz(m)) & 1u) << r;
    return out;
  }
  int any(int p) const { return __any_sync(mask_, p); }
  int all(int p) const { return __all_sync(mask_, p); }
};
// the call site (file and line, as CUDA source) tells groups formed at different calls apart
inline coalesced_group coalesced_threads(const char* file = __builtin_FILE(), unsigned line = __builtin_LINE()) {
  return coalesced_group(emu::coalesce(reinterpret_cast<uintptr_t>(file) * 131u + line, line));
}
inline void sync(const coalesced_group& g) { g.sync(); }
template <class T, class Op>
inline T reduce(const coalesced_group& g, T v, Op op) {
  T acc = g.shfl(v, 0);
  for (unsigned r = 1; r < g.size(); ++r) acc = op(acc, g.shfl(v, r));
  return acc;
}

// Scans over a tile: lane i gets op over lanes 0..i (inclusive) or 0..i-1 (exclusive; lane 0 gets T()).
template <unsigned N, class T, class Op>
inline T inclusive_scan(const thread_block_tile<N>& g, T v, Op op) {
  for (unsigned o = 1; o < N; o <<= 1) {
    T other = g.shfl_up(v, o);
    if (g.thread_rank() >= o) v = op(other, v);
  }
  return v;
}
template <unsigned N, class T>
inline T inclusive_scan(const thread_block_tile<N>& g, T v) { return inclusive_scan(g, v, plus<T>()); }
template <unsigned N, class T, class Op>
inline T exclusive_scan(const thread_block_tile<N>& g, T v, Op op) {
  T inc = inclusive_scan(g, v, op);
  T prev = g.shfl_up(inc, 1);
  return g.thread_rank() == 0 ? T() : prev;
}
template <unsigned N, class T>
inline T exclusive_scan(const thread_block_tile<N>& g, T v) { return exclusive_scan(g, v, plus<T>()); }

// Scratch for tiles larger than a warp (CUDA 11.1+); on the emulator the block needs none.
template <unsigned N> struct block_tile_memory { unsigned char scratch[8]; };
template <unsigned N> inline thread_block this_thread_block(block_tile_memory<N>&) { return thread_block(); }

// Asynchronous block copies (cg::memcpy_async + cg::wait): the group's threads share the copy; it completes
// at wait(), which synchronises the group, as on the GPU.
template <class G, class T>
inline void memcpy_async(const G& g, T* dst, const T* src, size_t bytes) {
  char* d = reinterpret_cast<char*>(dst);
  const char* s = reinterpret_cast<const char*>(src);
  for (size_t i = g.thread_rank(); i < bytes; i += g.size()) d[i] = s[i];
}
template <class G> inline void wait(const G& g) { g.sync(); }
template <unsigned N, class G> inline void wait_prior(const G& g) { g.sync(); }

}  // namespace cooperative_groups

// ---- <cuda/barrier>: the block-scope split barrier of libcu++ ------------------------------------------
namespace cuda {
enum thread_scope { thread_scope_system = 0, thread_scope_device = 1, thread_scope_block = 2, thread_scope_thread = 3 };
template <thread_scope S = thread_scope_system>
class barrier {
  long expected_ = 0, pending_ = 0;
  unsigned long long phase_ = 0;

 public:
  using arrival_token = unsigned long long;
  barrier() = default;
  barrier(const barrier&) = delete;
  void init_count(long n) { expected_ = pending_ = n; phase_ = 0; }
  arrival_token arrive(long n = 1) {
    arrival_token t = phase_;
    pending_ -= n;
    if (pending_ <= 0) { pending_ = expected_; phase_++; emu_sync_point(); }  // orders accesses (racecheck)
    return t;
  }
  void wait(arrival_token&& t) const { wait(t); }
  void wait(const arrival_token& t) const {
    while (*static_cast<volatile const unsigned long long*>(&phase_) == t) emu::yield("cuda::barrier::wait");
  }
  void arrive_and_wait() { wait(arrive()); }
  void arrive_and_drop() { expected_--; arrive(); }
  template <thread_scope T> friend void init(barrier<T>* b, long n);
};
template <thread_scope S> inline void init(barrier<S>* b, long n) { b->init_count(n); }
// a size with a promised alignment (converts to the size, as libcu++'s does)
template <size_t Align>
struct aligned_size_t {
  size_t value;
  constexpr explicit aligned_size_t(size_t v) : value(v) {}
  constexpr operator size_t() const { return value; }
};
// memcpy_async with a barrier: the copy happens at once; the barrier's phase then covers it.
template <class G, thread_scope S>
inline void memcpy_async(const G& g, void* dst, const void* src, size_t bytes, barrier<S>&) {
  cooperative_groups::memcpy_async(g, static_cast<char*>(dst), static_cast<const char*>(src), bytes);
}
template <thread_scope S>
inline void memcpy_async(void* dst, const void* src, size_t bytes, barrier<S>&) { memcpy(dst, src, bytes); }
}  // namespace cuda
