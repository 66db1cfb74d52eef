// emu_runtime.h — CUDA threads as fibers of one OS thread: state, ready queues, per-block shared memory,
// block barriers and warp collectives. Part of cuda_emu.h.
//
// Every CUDA thread is a fiber; the scheduler runs the ready fibers of one block at a time (a "turn") and
// a fiber runs until it blocks (barrier, warp collective) or yields (emu_yield, __nanosleep, an atomic that
// left memory unchanged). Plain launches run blocks one after another; cooperative launches keep all blocks
// alive and round-robin over them. Errors never abort the process: they end the launch with a message.
#pragma once

namespace emu {

// ---- state -----------------------------------------------------------------------------------------------
enum State : unsigned char { S_READY, S_RUNNING, S_BAR, S_WARP, S_DONE };
enum BarKind : unsigned char { BAR_SYNC, BAR_COUNT, BAR_AND, BAR_OR };
enum WarpOp : unsigned char {
  W_SYNC, W_IDX, W_UP, W_DOWN, W_XOR, W_BALLOT, W_ANY, W_ALL, W_MATCH_ANY, W_MATCH_ALL,
  W_ADD, W_MIN, W_MAX, W_UMIN, W_UMAX, W_AND, W_OR, W_XORR
};
inline const char* const bar_names[] = {"__syncthreads", "__syncthreads_count", "__syncthreads_and",
                                        "__syncthreads_or"};

constexpr size_t kGuard = 16384;              // PROT_NONE pages below every fiber stack
constexpr size_t kPage = 4096;
constexpr size_t kStaticSmemCap = 1u << 20;   // per block: lifted static __shared__ variables of the module
constexpr size_t kDynSmemCap = 232448;        // dynamic shared memory a launch may ask for (227 KiB, sm_90)
constexpr size_t kDynRegion = 233472;         // kDynSmemCap rounded up to pages
constexpr size_t kSmemBytes = kStaticSmemCap + kDynRegion;  // + one PROT_NONE page after each area
constexpr unsigned kMaxCoopThreads = 1u << 16;
constexpr size_t kPrintfBuffer = 1u << 20;    // device printf per launch (the GPU's default printf FIFO)

struct Block;
struct Fiber {
  Ctx ctx;
  char* map = nullptr;     // mapping: guard pages, then the stack
  size_t map_size = 0;
  Block* blk = nullptr;
  uint3 tid{};
  unsigned lin = 0;        // linear thread index in the block (x fastest)
  State state = S_DONE;
  Fiber* next = nullptr;   // ready queue link
  unsigned yield_turn = 0; // turn in which it last yielded (a turn ends when it comes round again)
  const char* why = "";    // what it polls for (emu_yield argument)
  BarKind bar_kind = BAR_SYNC;
  int bar_pred = 0, bar_res = 0;
  WarpOp wop = W_SYNC;
  uintptr_t san_wsite = 0;  // synccheck: call site of the warp collective it waits in
  uintptr_t san_pend = 0;   // racecheck: a shared load not yet settled (its store may follow uninstrumented),
  uintptr_t san_pend_site = 0;
  unsigned san_pend_n = 0;
  unsigned char san_pend_val[16] = {};  // the bytes it read
  const void* san_oob = nullptr;   // memcheck: an array subscript past its bound, reported at the access it makes
  uintptr_t san_oob_index = 0;
  const char* wname = "";
  unsigned wmask = 0;
  int warg = 0, wwidth = 32, wpred = 0;
  unsigned long long wval = 0, wres = 0;
};

struct Block {
  uint3 idx{};
  Fiber** th = nullptr;
  unsigned n = 0, live = 0;
  unsigned bar_arrived = 0, bar_true = 0;
  unsigned warp_exited[32] = {}, warp_arrived[32] = {};
  Fiber* qhead = nullptr;
  Fiber* qtail = nullptr;
  unsigned qlen = 0;
  char* smem = nullptr;    // static part at 0, dynamic part at kStaticSmemCap
  char* save = nullptr;    // cooperative: this block's copy of namespace-scope shared variables
  unsigned long long san_serial = 0;  // sanitizers (emu_sanitize.h): this block run's id,
  unsigned san_epoch = 0;             // completed barriers (block or rTask) so far,
  const char* san_bar_file = "";      // the source line of the barrier episode in progress,
  unsigned san_bar_line = 0;
  unsigned san_bar_first = 0;         // the first thread that arrived there,
  unsigned san_wepoch[32] = {};       // completed warp collectives (__syncwarp, shuffles, votes) per warp
};

struct Range { char* p; size_t n; };

struct LaunchCfg {
  unsigned grid[3], block[3];
  unsigned long long dyn_smem;
  int cooperative;
  long long yield_budget;
  unsigned long long stack_size;
  long long stall_ms;   // a fiber running this long without a switch ends the launch (0: never)
  unsigned long long static_limit;  // static __shared__ bytes a kernel may declare (the target's; 0: no check)
  unsigned long long smem_limit;    // static + dynamic shared bytes a block may have (the target's; 0: no check)
  const char* arch;                 // the target named in messages
  const unsigned* order;            // the linear block ids in the order the blocks run (nullptr: 0, 1, 2...);
                                    // a non-cooperative launch only (rtransform verify replays an rTask order)
};
struct LaunchStats {
  unsigned long long switches, yields, turns, blocks, threads;
  double seconds;
};

struct Global {
  Ctx sched;
  Fiber* cur = nullptr;
  bool failed = false;
  char err[4096] = {};
  void (*body)(void*) = nullptr;
  void* body_arg = nullptr;
  unsigned nthreads = 0;
  bool coop = false;
  size_t dyn = 0;
  long long yields = 0, budget = 0;
  unsigned long long switches = 0, turns = 0, live_total = 0, ready_total = 0;
  unsigned turn = 0;
  Fiber** pool = nullptr;
  size_t pool_n = 0, pool_cap = 0;
  Block* blocks = nullptr;
  size_t blocks_cap = 0;
  char* home = nullptr;              // plain-mode shared memory; home of namespace-scope shared variables
  size_t dyn_off = kStaticSmemCap;   // where this launch's dynamic shared memory starts in an area
  char** coop_smem = nullptr;        // cooperative: one shared-memory area per block
  size_t coop_smem_n = 0;
  size_t static_top = 0;             // bytes of the static area handed out to __shared__ variables
  Range* ns = nullptr;               // namespace-scope __shared__ variables (swapped per block)
  size_t ns_n = 0, ns_cap = 0, ns_bytes = 0;
  bool ns_dyn = false;               // a namespace-scope extern __shared__ array exists
  Block* owner = nullptr;            // cooperative: block whose namespace-scope variables are in place
  LaunchStats stats{};
  pthread_t thread{};
  bool in_launch = false;
  size_t printf_bytes = 0, printf_dropped = 0;  // device printf output of this launch, kept and dropped
  unsigned long long launch_serial = 0;  // launches of this module so far
  unsigned long long launch_static = 0;  // static __shared__ bytes this launch's kernel has touched
  unsigned long long static_limit = 0, smem_limit = 0;
  const char* arch = "";
};
inline Global g;

// ---- small helpers ---------------------------------------------------------------------------------------
inline void appendf(char* buf, size_t cap, const char* fmt, ...) __attribute__((format(printf, 3, 4)));
inline void appendf(char* buf, size_t cap, const char* fmt, ...) {
  size_t len = strlen(buf);
  if (len + 1 >= cap) return;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf + len, cap - len, fmt, ap);
  va_end(ap);
}
inline void* map_anon(size_t n) {
  void* p = mmap(nullptr, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  return p == MAP_FAILED ? nullptr : p;
}
template <class T>
inline bool grow(T*& arr, size_t& cap, size_t need) {
  if (need <= cap) return true;
  size_t n = cap ? cap : 16;
  while (n < need) n *= 2;
  T* a = static_cast<T*>(realloc(static_cast<void*>(arr), n * sizeof(T)));
  if (!a) return false;
  for (size_t i = cap; i < n; ++i) new (&a[i]) T();
  arr = a;
  cap = n;
  return true;
}

// Ends the launch with a message, from a fiber (never returns) or from the scheduler.
inline void set_error(const char* fmt, va_list ap) {
  if (g.failed) return;
  g.failed = true;
  vsnprintf(g.err, sizeof g.err, fmt, ap);
}
[[noreturn]] inline void fail(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
[[noreturn]] inline void fail(const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  set_error(fmt, ap);
  va_end(ap);
  if (g.cur && g.in_launch) ctx_switch(g.cur->ctx, g.sched);
  fprintf(stderr, "cuda_emu: %s\n", g.err);  // outside a launch there is nobody to report to
  abort();
}
inline void sched_error(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
inline void sched_error(const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  set_error(fmt, ap);
  va_end(ap);
}
inline const char* here() {  // "block (x,y,z) thread (x,y,z)" of the running fiber
  static char buf[96];
  if (!g.cur) return "host";
  Fiber* f = g.cur;
  snprintf(buf, sizeof buf, "block (%u,%u,%u) thread (%u,%u,%u)", f->blk->idx.x, f->blk->idx.y, f->blk->idx.z,
           f->tid.x, f->tid.y, f->tid.z);
  return buf;
}

// ---- ready queues ----------------------------------------------------------------------------------------
inline void q_push(Block& b, Fiber* f, bool front) {
  f->next = nullptr;
  if (!b.qhead) {
    b.qhead = b.qtail = f;
  } else if (front) {
    f->next = b.qhead;
    b.qhead = f;
  } else {
    b.qtail->next = f;
    b.qtail = f;
  }
  b.qlen++;
  g.ready_total++;
}
inline Fiber* q_pop(Block& b) {
  Fiber* f = b.qhead;
  if (!f) return nullptr;
  b.qhead = f->next;
  if (!b.qhead) b.qtail = nullptr;
  b.qlen--;
  g.ready_total--;
  return f;
}
inline void make_ready(Fiber* f) {
  f->state = S_READY;
  q_push(*f->blk, f, false);
}
// Gives the CPU back to the scheduler; returns when the scheduler resumes this fiber.
inline void suspend(Fiber* f) { ctx_switch(f->ctx, g.sched); }

// ---- shared memory ---------------------------------------------------------------------------------------
inline char* block_smem() { return g.cur ? g.cur->blk->smem : g.home; }
inline void san_note_slot(size_t off, size_t size, const char* name, size_t item);
#if defined(EMU_SANITIZE)
constexpr size_t kSlotRedzone = 64;  // memcheck: bytes between static __shared__ variables
#else
constexpr size_t kSlotRedzone = 0;
#endif
inline size_t static_alloc(size_t size, size_t align, const char* name = "?", size_t item = 1) {
  size_t off = (g.static_top + kSlotRedzone + align - 1) & ~(align - 1);
  if (off + size > kStaticSmemCap)
    fail("%s: __shared__ variables of this module need more than %zu bytes", here(), kStaticSmemCap);
  g.static_top = off + size;
  if (kSlotRedzone) san_note_slot(off, size, name, item);
  return off;
}
// The target's limits on a kernel's shared memory, checked as the launch first reaches each __shared__ variable:
// ptxas refuses more than 48 KB of static __shared__ on every architecture, and a block's static + dynamic
// shared memory is bounded per architecture (CUDA C++ Programming Guide, technical specifications table).
inline void note_static(size_t bytes, const char* name) {
  g.launch_static += bytes;
  if (g.static_limit && g.launch_static > g.static_limit)
    fail("%s: the kernel's static __shared__ variables take %llu bytes (reaching '%s'); a kernel may declare at "
         "most %llu bytes statically (%s: ptxas refuses more): move the largest into dynamic (extern) shared memory",
         here(), g.launch_static, name, g.static_limit, g.arch);
  if (g.smem_limit && g.launch_static + g.dyn > g.smem_limit)
    fail("%s: %llu bytes of static and %zu of dynamic shared memory; a block of %s has at most %llu", here(),
         g.launch_static, g.dyn, g.arch, g.smem_limit);
}
// A function-scope __shared__ variable: one offset per variable (per template instantiation), the storage
// in the running block's shared memory.
template <class T>
struct SharedSlot {
  size_t off = ~size_t(0);
  unsigned long long seen = 0;  // the launch that last counted it against the limits
  T& get(const char* name = "?") {
    if (off == ~size_t(0)) off = static_alloc(sizeof(T), alignof(T), name, sizeof(std::remove_all_extents_t<T>));
    if (seen != g.launch_serial) {
      seen = g.launch_serial;
      note_static(sizeof(T), name);
    }
    return *reinterpret_cast<T*>(block_smem() + off);
  }
};
// Dynamic shared memory (extern __shared__) of the running block. In a cooperative launch of a module with
// namespace-scope extern arrays, every block uses the home area, swapped in for the block that runs.
inline char* dyn_smem() {
  if (g.coop && g.ns_dyn) return g.home + kStaticSmemCap;
  return block_smem() + g.dyn_off;
}
// A shared-memory area: static part, dynamic region, one PROT_NONE page.
inline char* map_smem_area() {
  char* p = static_cast<char*>(map_anon(kSmemBytes + kPage));
  if (p) mprotect(p + kSmemBytes, kPage, PROT_NONE);
  return p;
}
inline bool ensure_home() {
  if (!g.home) g.home = map_smem_area();
  return g.home != nullptr;
}
// This launch's dynamic bytes end at a page boundary followed by PROT_NONE pages (start, when namespace-scope
// extern arrays pin it), so an access outside them faults instead of reading stale memory.
inline void place_dyn() {
  size_t rounded = (g.dyn + 255) & ~size_t(255);
  g.dyn_off = g.ns_dyn ? kStaticSmemCap : kSmemBytes - rounded;
}
inline void guard_dyn(char* area) {
  size_t lo = kStaticSmemCap, hi = kSmemBytes;
  if (g.ns_dyn) {
    size_t end = (lo + g.dyn + kPage - 1) & ~(kPage - 1);
    mprotect(area + lo, end - lo, PROT_READ | PROT_WRITE);
    if (end < hi) mprotect(area + end, hi - end, PROT_NONE);
    return;
  }
  size_t start = g.dyn_off & ~(kPage - 1);
  if (start > lo) mprotect(area + lo, start - lo, PROT_NONE);
  mprotect(area + start, hi - start, PROT_READ | PROT_WRITE);
}
inline char* ns_dyn_smem() {  // for namespace-scope extern __shared__ arrays (bound once, at load time)
  g.ns_dyn = true;
  if (!ensure_home()) abort();
  g.dyn_off = kStaticSmemCap;
  return g.home + kStaticSmemCap;
}
// Registers a namespace-scope __shared__ variable so that cooperative launches give each block its own copy.
struct NsShared {
  NsShared(void* p, size_t n) {
    if (!grow(g.ns, g.ns_cap, g.ns_n + 1)) abort();
    g.ns[g.ns_n++] = Range{static_cast<char*>(p), n};
    g.ns_bytes += n;
  }
};
inline size_t swap_bytes() { return g.ns_bytes + (g.ns_dyn ? g.dyn : 0); }
// Copies the namespace-scope shared variables between their home and a block's save area.
inline void ns_copy(Block& b, bool to_block) {
  char* s = b.save;
  for (size_t i = 0; i < g.ns_n; ++i) {
    if (to_block) memcpy(s, g.ns[i].p, g.ns[i].n); else memcpy(g.ns[i].p, s, g.ns[i].n);
    s += g.ns[i].n;
  }
  if (g.ns_dyn) {
    char* d = g.home + kStaticSmemCap;
    if (to_block) memcpy(s, d, g.dyn); else memcpy(d, s, g.dyn);
  }
}
inline void smem_switch_to(Block* b) {
  if (!g.coop || g.owner == b || !b->save) return;
  if (g.owner) ns_copy(*g.owner, true);
  ns_copy(*b, false);
  g.owner = b;
}

// ---- thread exit, block barriers, warp collectives -------------------------------------------------------
inline void warp_try_all(Block& b, unsigned w);

inline void bar_release(Block& b) {
  unsigned count = b.bar_true, arrived = b.bar_arrived;
  b.bar_arrived = b.bar_true = 0;
  b.san_epoch++;
  for (unsigned i = 0; i < b.n; ++i) {
    Fiber* f = b.th[i];
    if (f->state != S_BAR) continue;
    switch (f->bar_kind) {
      case BAR_SYNC: f->bar_res = 0; break;
      case BAR_COUNT: f->bar_res = (int)count; break;
      case BAR_AND: f->bar_res = count == arrived; break;
      case BAR_OR: f->bar_res = count != 0; break;
    }
    if (f == g.cur) f->state = S_RUNNING; else make_ready(f);
  }
}
inline void san_barrier_arrive(Block& b, Fiber* f, const char* file, unsigned line);
inline unsigned long long san_shfl_from_exited(const Block& b, const Fiber* p, unsigned src);
inline void san_settle(Fiber* f);
// Sanitized builds keep the barrier and collective entry points out of line: their return address is then
// the CUDA source's call site (synccheck compares and reports it).
#if defined(EMU_SANITIZE)
#define EMU_SITE_FN __attribute__((noinline))
#define EMU_CALL_SITE reinterpret_cast<uintptr_t>(__builtin_return_address(0))
#else
#define EMU_SITE_FN inline
#define EMU_CALL_SITE uintptr_t(0)
#endif
// __syncthreads family: completes when every live (not exited) thread of the block has arrived.
inline int bar_arrive(BarKind kind, int pred, const char* file = "", unsigned line = 0) {
  Fiber* f = g.cur;
  if (!f) return kind == BAR_COUNT ? (pred != 0) : (pred != 0);
  Block& b = *f->blk;
  san_barrier_arrive(b, f, file, line);
  f->bar_kind = kind;
  f->bar_pred = pred != 0;
  f->state = S_BAR;
  b.bar_arrived++;
  b.bar_true += f->bar_pred;
  if (b.bar_arrived == b.live) bar_release(b); else suspend(f);
  return f->bar_res;
}

inline int shfl_src(WarpOp op, int lane, int b, int width) {  // PTX shfl.sync lane selection
  int segmask = (32 - width) & 31, clamp = op == W_UP ? 0 : 31;
  int max_lane = (lane & segmask) | (clamp & ~segmask), min_lane = lane & segmask, j = lane;
  bool ok = false;
  b &= 31;
  switch (op) {
    case W_UP: j = lane - b; ok = j >= max_lane; break;
    case W_DOWN: j = lane + b; ok = j <= max_lane; break;
    case W_XOR: j = lane ^ b; ok = j <= max_lane; break;
    default: j = min_lane | (b & ~segmask); ok = j <= max_lane; break;
  }
  return ok ? j : lane;
}
inline unsigned long long fold(WarpOp op, unsigned long long a, unsigned long long v) {
  unsigned x = (unsigned)a, y = (unsigned)v;
  switch (op) {
    case W_ADD: return x + y;
    case W_MIN: return (unsigned)((int)x < (int)y ? x : y);
    case W_MAX: return (unsigned)((int)x > (int)y ? x : y);
    case W_UMIN: return x < y ? x : y;
    case W_UMAX: return x > y ? x : y;
    case W_AND: return x & y;
    case W_OR: return x | y;
    default: return x ^ y;
  }
}
// Result of one participant of a completed collective over the lanes in group.
inline void warp_result(Block& b, unsigned w, unsigned group, Fiber* p) {
  auto val = [&](unsigned lane) { return b.th[w * 32 + lane]->wval; };
  unsigned lane = p->lin & 31u, bits = 0;
  for (unsigned l = 0; l < 32; ++l)
    if ((group >> l) & 1u) {
      bool hit = p->wop == W_MATCH_ANY || p->wop == W_MATCH_ALL ? val(l) == p->wval : val(l) != 0;
      bits |= (unsigned)hit << l;
    }
  switch (p->wop) {
    case W_SYNC: p->wres = 0; break;
    case W_IDX: case W_UP: case W_DOWN: case W_XOR: {
      int j = shfl_src(p->wop, (int)lane, p->warg, p->wwidth);
      if (((b.warp_exited[w] >> j) & 1u) && (unsigned)j != lane) p->wres = san_shfl_from_exited(b, p, (unsigned)j);
      else p->wres = ((group >> j) & 1u) ? val((unsigned)j) : p->wval;
      break;
    }
    case W_BALLOT: case W_MATCH_ANY: p->wres = bits; break;
    case W_ANY: p->wres = bits != 0; break;
    case W_ALL: p->wres = bits == group; break;
    case W_MATCH_ALL: p->wpred = bits == group; p->wres = bits == group ? group : 0u; break;
    default: {
      unsigned long long acc = val((unsigned)__builtin_ctz(group));
      for (unsigned l = (unsigned)__builtin_ctz(group) + 1; l < 32; ++l)
        if ((group >> l) & 1u) acc = fold(p->wop, acc, val(l));
      p->wres = (unsigned)acc;
    }
  }
}
// Completes the collective of the lanes in need if all of them wait with that same set of live lanes.
inline bool warp_try(Block& b, unsigned w, unsigned need) {
  if (need & ~b.warp_arrived[w]) return false;
  for (unsigned l = 0; l < 32; ++l)
    if (((need >> l) & 1u) && (b.th[w * 32 + l]->wmask & ~b.warp_exited[w]) != need) return false;
  for (unsigned l = 0; l < 32; ++l)
    if ((need >> l) & 1u) warp_result(b, w, need, b.th[w * 32 + l]);
  b.warp_arrived[w] &= ~need;
  b.san_wepoch[w]++;  // orders the warp's shared accesses before and after it (racecheck)
  for (unsigned l = 0; l < 32; ++l) {
    if (!((need >> l) & 1u)) continue;
    Fiber* p = b.th[w * 32 + l];
    if (p == g.cur) p->state = S_RUNNING; else make_ready(p);
  }
  return true;
}
inline void warp_try_all(Block& b, unsigned w) {
  unsigned pending = b.warp_arrived[w];
  while (pending) {
    unsigned l = (unsigned)__builtin_ctz(pending);
    unsigned need = b.th[w * 32 + l]->wmask & ~b.warp_exited[w];
    warp_try(b, w, need);
    pending &= ~(need | (1u << l));
  }
}
// A warp collective: waits for every live lane of mask (the caller's own lane always counts).
EMU_SITE_FN unsigned long long warp_collective(WarpOp op, const char* name, unsigned mask, unsigned long long val,
                                               int arg = 0, int width = 32) {
  Fiber* f = g.cur;
  if (width < 1 || width > 32 || (width & (width - 1)))
    fail("%s: %s width %d is not a power of two in [1, 32]", here(), name, width);
  if (!f) return op == W_BALLOT || op == W_MATCH_ANY || op == W_MATCH_ALL ? 1u : val;
  Block& b = *f->blk;
  san_settle(f);
  unsigned lane = f->lin & 31u, w = f->lin >> 5;
  f->wop = op; f->wname = name; f->wmask = mask | (1u << lane);
  f->wval = val; f->warg = arg; f->wwidth = width;
  f->state = S_WARP;
  f->san_wsite = EMU_CALL_SITE;
  b.warp_arrived[w] |= 1u << lane;
  if (!warp_try(b, w, f->wmask & ~b.warp_exited[w])) suspend(f);
  return f->wres;
}
inline unsigned active_mask() {
  if (!g.cur) return 1u;
  return ~g.cur->blk->warp_exited[g.cur->lin >> 5];
}

[[noreturn]] inline void thread_exit(Fiber* f) {
  Block& b = *f->blk;
  f->state = S_DONE;
  b.live--;
  g.live_total--;
  unsigned w = f->lin >> 5;
  b.warp_exited[w] |= 1u << (f->lin & 31u);
  if (b.bar_arrived && b.bar_arrived == b.live) bar_release(b);
  warp_try_all(b, w);
  ctx_switch(f->ctx, g.sched);
  __builtin_unreachable();
}
inline void fiber_entry() {
  try {
    g.body(g.body_arg);
  } catch (...) {  // nothing may unwind past the fiber's first frame
    fail("%s: a C++ exception escaped the kernel", here());
  }
  thread_exit(g.cur);
}

}  // namespace emu
