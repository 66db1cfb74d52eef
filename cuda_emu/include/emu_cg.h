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

}  // namespace cooperative_groups
// ---- tiles wider than a warp (64 .. 1024 threads) -----------------------------------------------------------
// CUDA keeps their barrier and exchange words in block_tile_memory (or memory it reserves per block on sm_80+);
// here each block run has a side table: per tile size and tile an arrival count and phase, and one exchange word
// per thread. Collectives read all of the tile's words after a barrier and fold them in a fixed order: within each
// warp the order of a shfl-down tree (reduce) or a shfl-up ladder (scans), then warp by warp.
namespace emu {
struct WideTiles {
  unsigned long long serial = 0;           // the block run the table belongs to
  unsigned arrived[5][16] = {}, phase[5][16] = {};
  unsigned long long word[1024] = {};      // by rank in the block
};
inline std::map<const void*, WideTiles>& wide_tile_table() {
  static std::map<const void*, WideTiles> t;
  return t;
}
EMU_NOSAN WideTiles& wide_tiles() {
  Block& b = *g.cur->blk;
  WideTiles& w = wide_tile_table()[&b];
  if (w.serial != b.san_serial) {
    w = WideTiles();
    w.serial = b.san_serial;
  }
  return w;
}
// a barrier over the n threads of tile `tile` of size index k
EMU_NOSAN void wide_sync(unsigned k, unsigned tile, unsigned n) {
  WideTiles& w = wide_tiles();
  const unsigned phase = w.phase[k][tile];
  if (++w.arrived[k][tile] == n) {
    w.arrived[k][tile] = 0;
    w.phase[k][tile] = phase + 1u;
    emu_sync_point();
    return;
  }
  while (w.phase[k][tile] == phase) yield("thread_block_tile<N>::sync (tile wider than a warp)");
}
EMU_NOSAN void wide_put(unsigned rank, unsigned long long v) { wide_tiles().word[rank] = v; }
EMU_NOSAN unsigned long long wide_get(unsigned rank) { return wide_tiles().word[rank]; }
}  // namespace emu
namespace cooperative_groups {

// N consecutive threads of the block (N a power of two, 1 .. 1024). Up to 32: lanes of a warp; lanes past the end
// of the block do not exist. Wider: whole warps, with what CUDA offers there (sync, ranks and sizes, shfl as a
// broadcast, any, all, reduce and scans of values of at most 8 bytes); the block's size must be a multiple of N.
template <unsigned N>
class thread_block_tile {
  static_assert(N >= 1 && N <= 1024 && (N & (N - 1)) == 0, "tiles of 1 .. 1024 threads, a power of two");
  static constexpr bool wide = N > 32;
  unsigned rank_ = 0;     // rank in the block
  unsigned nthreads_ = 0; // threads in the block

  unsigned shift() const { return (rank_ & 31u) / N * N; }
  unsigned bits(unsigned warp_bits) const { return N >= 32 ? warp_bits : (warp_bits >> shift()) & ((1u << N) - 1u); }
  bool present(unsigned tile_lane) const { return rank_ / N * N + tile_lane < nthreads_; }
  static constexpr unsigned size_index() { unsigned k = 0; for (unsigned n = 64; n < N; n <<= 1) ++k; return k; }
  unsigned base() const { return rank_ / N * N; }  // block rank of the tile's first thread
  // Wide tiles: every thread posts its value, then reads the tile's values in block-rank order.
  template <class T, class Fold>
  T wide_collective(T v, Fold fold) const {
    static_assert(sizeof(T) <= 8, "a tile wider than a warp exchanges values of at most 8 bytes (as in CUDA)");
    emu::wide_put(rank_, emu::pack(v));
    sync();
    T vals[N];
    for (unsigned r = 0; r < N; ++r) vals[r] = emu::unpack<T>(emu::wide_get(base() + r));
    T out = fold(vals);
    sync();
    return out;
  }

 public:
  thread_block_tile() = default;
  explicit thread_block_tile(unsigned rank, unsigned nthreads) : rank_(rank), nthreads_(nthreads) {}
  unsigned mask() const { return N >= 32 ? 0xffffffffu : ((1u << N) - 1u) << shift(); }
  unsigned thread_rank() const { return rank_ % N; }
  static constexpr unsigned size() { return N; }
  static constexpr unsigned num_threads() { return N; }
  unsigned meta_group_rank() const { return rank_ / N; }
  unsigned meta_group_size() const { return (nthreads_ + N - 1) / N; }
  void sync() const {
    if constexpr (wide) emu::wide_sync(size_index(), rank_ / N, N);
    else __syncwarp(mask());
  }
  template <class T> T shfl(T v, int src) const {
    if constexpr (wide) return wide_collective(v, [&](const T* vals) { return vals[src]; });
    else return __shfl_sync(mask(), v, src, (int)N);
  }
  template <class T> T shfl_down(T v, unsigned d) const {
    static_assert(!wide, "shfl_down exists on tiles of at most 32 threads (as in CUDA)");
    return __shfl_down_sync(mask(), v, d, (int)N);
  }
  template <class T> T shfl_up(T v, unsigned d) const {
    static_assert(!wide, "shfl_up exists on tiles of at most 32 threads (as in CUDA)");
    return __shfl_up_sync(mask(), v, d, (int)N);
  }
  template <class T> T shfl_xor(T v, unsigned m) const {
    static_assert(!wide, "shfl_xor exists on tiles of at most 32 threads (as in CUDA)");
    return __shfl_xor_sync(mask(), v, (int)m, (int)N);
  }
  unsigned ballot(int p) const {
    static_assert(!wide, "ballot exists on tiles of at most 32 threads (as in CUDA)");
    return bits(__ballot_sync(mask(), p));
  }
  int any(int p) const {
    if constexpr (wide) return reduce(p != 0 ? 1 : 0, [](int a, int b) { return a | b; });
    else return __any_sync(mask(), p);
  }
  int all(int p) const {
    if constexpr (wide) return reduce(p != 0 ? 1 : 0, [](int a, int b) { return a & b; });
    else return __all_sync(mask(), p);
  }
  template <class T> unsigned match_any(T v) const {
    static_assert(!wide, "match_any exists on tiles of at most 32 threads (as in CUDA)");
    return bits(__match_any_sync(mask(), v));
  }
  template <class T> unsigned match_all(T v, int& pred) const {
    static_assert(!wide, "match_all exists on tiles of at most 32 threads (as in CUDA)");
    return bits(__match_all_sync(mask(), v, &pred));
  }

  // Reduction to every thread of the tile; a partial tile (end of the block) gathers instead of a butterfly.
  template <class T, class Op>
  T reduce(T v, Op op) const {
    if constexpr (wide) {
      return wide_collective(v, [&](const T* vals) {
        T acc{};
        for (unsigned w = 0; w < N / 32; ++w) {
          T a[32];
          for (unsigned l = 0; l < 32; ++l) a[l] = vals[w * 32 + l];
          for (unsigned o = 16; o >= 1; o >>= 1)
            for (unsigned l = 0; l < o; ++l) a[l] = op(a[l], a[l + o]);
          acc = w == 0 ? a[0] : op(acc, a[0]);
        }
        return acc;
      });
    } else {
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
  }

  // Scans (lane i: op over lanes 0..i, or 0..i-1 with T() at rank 0): a shfl-up ladder within a warp; a wide
  // tile adds to each warp the fold of the earlier warps' totals, warp by warp.
  template <class T, class Op>
  T scan(T v, Op op, bool inclusive) const {
    if constexpr (wide) {
      const unsigned me = thread_rank();
      return wide_collective(v, [&](const T* vals) {
        T inc[N];
        for (unsigned w = 0; w < N / 32; ++w) {
          T a[32], b[32];
          for (unsigned l = 0; l < 32; ++l) a[l] = vals[w * 32 + l];
          for (unsigned o = 1; o < 32; o <<= 1) {
            for (unsigned l = 0; l < 32; ++l) b[l] = l >= o ? op(a[l - o], a[l]) : a[l];
            for (unsigned l = 0; l < 32; ++l) a[l] = b[l];
          }
          for (unsigned l = 0; l < 32; ++l) inc[w * 32 + l] = a[l];
        }
        const unsigned w = me / 32, lane = me % 32;
        const T own = inclusive ? inc[me] : (lane == 0 ? T() : inc[me - 1]);
        if (w == 0) return own;
        T before = inc[31];
        for (unsigned j = 1; j < w; ++j) before = op(before, inc[j * 32 + 31]);
        return !inclusive && lane == 0 ? before : op(before, own);
      });
    } else {
      for (unsigned o = 1; o < N; o <<= 1) {
        T other = shfl_up(v, o);
        if (thread_rank() >= o) v = op(other, v);
      }
      if (inclusive) return v;
      T prev = shfl_up(v, 1);
      return thread_rank() == 0 ? T() : prev;
    }
  }
};

template <unsigned N>
inline thread_block_tile<N> tiled_partition(const thread_block&) {
  if constexpr (N > 32) {
    if (thread_block::size() % N != 0)
      emu::fail("cg::tiled_partition<%u>: the block's %u threads are not a multiple of the tile size (undefined in "
                "CUDA)", N, thread_block::size());
  }
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

// Any group of the thread (CUDA's type-erased thread_group), made from the block or a tile: ranks, sizes and the
// group's own barrier (the block's, or the tile's).
class thread_group {
  unsigned rank_ = 0, size_ = 0, block_rank_ = 0, nthreads_ = 0;
  void (*sync_)(unsigned, unsigned) = nullptr;
  static void block_sync(unsigned, unsigned) { __syncthreads(); }
  template <unsigned N> static void tile_sync(unsigned r, unsigned n) { thread_block_tile<N>(r, n).sync(); }

 public:
  thread_group(const thread_block&)
      : rank_(thread_block::thread_rank()), size_(thread_block::size()), block_rank_(rank_), nthreads_(size_),
        sync_(&block_sync) {}
  template <unsigned N>
  thread_group(const thread_block_tile<N>& t)
      : rank_(t.thread_rank()), size_(N), block_rank_(thread_block::thread_rank()),
        nthreads_(thread_block::size()), sync_(&tile_sync<N>) {}
  unsigned thread_rank() const { return rank_; }
  unsigned size() const { return size_; }
  unsigned num_threads() const { return size_; }
  void sync() const { sync_(block_rank_, nthreads_); }
};
inline void sync(const thread_group& g) { g.sync(); }

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
inline T inclusive_scan(const thread_block_tile<N>& g, T v, Op op) { return g.scan(v, op, true); }
template <unsigned N, class T>
inline T inclusive_scan(const thread_block_tile<N>& g, T v) { return inclusive_scan(g, v, plus<T>()); }
template <unsigned N, class T, class Op>
inline T exclusive_scan(const thread_block_tile<N>& g, T v, Op op) { return g.scan(v, op, false); }
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
  // the barrier's own state is the synchronisation: never checked (EMU_NOSAN), as the rTask barriers
  EMU_NOSAN void init_count(long n) { expected_ = pending_ = n; phase_ = 0; }
  EMU_NOSAN arrival_token arrive(long n = 1) {
    arrival_token t = phase_;
    pending_ -= n;
    if (pending_ <= 0) { pending_ = expected_; phase_++; emu_sync_point(); }  // orders accesses (racecheck)
    return t;
  }
  void wait(arrival_token&& t) const { wait(t); }
  EMU_NOSAN void wait(const arrival_token& t) const {
    while (*static_cast<volatile const unsigned long long*>(&phase_) == t) emu::yield("cuda::barrier::wait");
  }
  void arrive_and_wait() { wait(arrive()); }
  EMU_NOSAN void arrive_and_drop() { expected_--; arrive(); }
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
