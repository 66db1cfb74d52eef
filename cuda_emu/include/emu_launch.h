// emu_launch.h — host side of a launch: runs a grid on the fibers, and turns Python's argument slots into a
// kernel's parameter types.
// Part of cuda_emu.h; cuda_emu/module.py generates one extern "C" launcher per kernel expression that calls
// emu::launch_kernel(KERNEL, ...), so template kernels and __restrict__ parameters need no Python typing.
//
// Argument scheme: Python passes one Arg per parameter. kind PTR: data is the device pointer itself (a numpy
// buffer's address, or null). Numeric kinds: data points to the value, stored as the numpy dtype named by
// kind; the launcher reads it as that dtype and converts it to the parameter type (a float value that is
// not integral is refused for an integer parameter). kind RAW: data points to size bytes, copied into a
// trivially copyable class parameter of exactly that size.
#pragma once

namespace emu {

// ---- launch ----------------------------------------------------------------------------------------------
inline bool fibers_reserve(size_t n, size_t stack) {
  size_t map_size = ((stack + 4095) & ~size_t(4095)) + kGuard;
  size_t cap = g.pool_cap;
  if (!grow(g.pool, cap, n)) return false;
  g.pool_cap = cap;
  for (size_t i = 0; i < n; ++i) {
    if (!g.pool[i]) g.pool[i] = new Fiber();
    Fiber* f = g.pool[i];
    if (f->map && f->map_size != map_size) { munmap(f->map, f->map_size); f->map = nullptr; }
    if (!f->map) {
      f->map = static_cast<char*>(map_anon(map_size));
      if (!f->map) return false;
      f->map_size = map_size;
      mprotect(f->map, kGuard, PROT_NONE);
    }
  }
  if (n > g.pool_n) g.pool_n = n;
  return true;
}
// Every fiber stack and shared-memory area is its own mapping (plus a guard), and each built module keeps its
// own pool: kept between launches they exhaust vm.max_map_count (65530) once a process has run a few dozen
// large modules. After a launch only the first kKeepFibers stacks and kKeepAreas areas stay mapped: 16 keeps a
// whole test suite (hundreds of modules in one pytest process) well inside the limit; 64 did not.
constexpr size_t kKeepFibers = 16, kKeepAreas = 2;
inline void pools_trim() {
  for (size_t i = kKeepFibers; i < g.pool_n; ++i) {
    Fiber* f = g.pool[i];
    if (f && f->map) { munmap(f->map, f->map_size); f->map = nullptr; }
  }
  for (size_t i = kKeepAreas; i < g.coop_smem_n; ++i) {
    if (g.coop_smem[i]) { munmap(g.coop_smem[i], kSmemBytes + kPage); g.coop_smem[i] = nullptr; }
  }
}
inline void block_setup(Block& b, unsigned linear_id, Fiber** th, const unsigned* grid, const unsigned* blk) {
  b.idx = uint3{linear_id % grid[0], (linear_id / grid[0]) % grid[1], linear_id / (grid[0] * grid[1])};
  b.th = th;
  b.n = b.live = g.nthreads;
  b.bar_arrived = b.bar_true = 0;
  b.san_serial = ++san.serial;
  b.san_epoch = 0;
  for (unsigned& e : b.san_wepoch) e = 0;
  b.qhead = b.qtail = nullptr;
  b.qlen = 0;
  unsigned nw = (b.n + 31) / 32;
  for (unsigned w = 0; w < 32; ++w) {
    unsigned present = w < nw ? (b.n - w * 32 >= 32 ? 32u : b.n - w * 32) : 0u;
    b.warp_exited[w] = present == 32 ? 0u : ~((1u << present) - 1u);
    b.warp_arrived[w] = 0;
  }
  for (unsigned i = 0; i < b.n; ++i) {
    Fiber* f = th[i];
    f->blk = &b;
    f->lin = i;
    f->tid = uint3{i % blk[0], (i / blk[0]) % blk[1], i / (blk[0] * blk[1])};
    f->yield_turn = 0;
    f->why = "";
    f->san_pend = 0;          // a failed launch may leave a thread's sanitizer state behind
    f->san_oob = nullptr;
    ctx_make(f->ctx, f->map + kGuard, f->map_size - kGuard, fiber_entry);
    make_ready(f);
  }
  g.live_total += b.n;
}
// Runs the ready fibers of one block, in order, until its queue is empty or a fiber that yielded in this
// turn comes round again (then the next block gets its turn).
inline void run_turn(Block& b) {
  unsigned turn = ++g.turn;
  g.turns++;
  smem_switch_to(&b);
  blockIdx = b.idx;
  while (Fiber* f = q_pop(b)) {
    if (f->yield_turn == turn) { q_push(b, f, true); break; }
    g.cur = f;
    threadIdx = f->tid;
    f->state = S_RUNNING;
    g.switches++;
    ctx_switch(g.sched, f->ctx);
    if (f->san_pend && !g.failed) san_settle(f);  // a store after its last load, before another thread runs
    g.cur = nullptr;
    if (g.failed) return;
  }
}
inline void run_blocks(Block* blocks, size_t nb) {
  size_t bi = 0;
  while (g.live_total && !g.failed) {
    if (!g.ready_total) {
      sched_error("deadlock: no thread can proceed (every live thread waits at a barrier or warp collective "
                  "that can never complete):");
      describe_blocks(g.err, sizeof g.err, blocks, nb);
      return;
    }
    while (!blocks[bi].qlen) bi = (bi + 1) % nb;
    run_turn(blocks[bi]);
    bi = (bi + 1) % nb;
  }
}
inline const char* check_cfg(const LaunchCfg& c, char* err, size_t cap) {
  const unsigned* gr = c.grid;
  const unsigned* bl = c.block;
  unsigned long long nt = (unsigned long long)bl[0] * bl[1] * bl[2];
  if (!gr[0] || !gr[1] || !gr[2] || !bl[0] || !bl[1] || !bl[2])
    snprintf(err, cap, "bad launch: grid (%u,%u,%u) and block (%u,%u,%u) must be >= 1 in every dimension",
             gr[0], gr[1], gr[2], bl[0], bl[1], bl[2]);
  else if (nt > 1024 || bl[0] > 1024 || bl[1] > 1024 || bl[2] > 64)
    snprintf(err, cap, "bad launch: block (%u,%u,%u) = %llu threads; CUDA allows at most 1024 (z <= 64)",
             bl[0], bl[1], bl[2], nt);
  else if (gr[0] > 2147483647u || gr[1] > 65535u || gr[2] > 65535u)
    snprintf(err, cap, "bad launch: grid (%u,%u,%u) exceeds CUDA's limits (2^31-1, 65535, 65535)", gr[0], gr[1],
             gr[2]);
  else if (c.dyn_smem > kDynSmemCap)
    snprintf(err, cap, "bad launch: %llu bytes of dynamic shared memory; at most %zu", c.dyn_smem, kDynSmemCap);
  else if (c.smem_limit && c.dyn_smem > c.smem_limit)
    snprintf(err, cap, "bad launch: %llu bytes of dynamic shared memory; a block of %s has at most %llu",
             c.dyn_smem, c.arch ? c.arch : "this target", c.smem_limit);
  else if (c.stack_size < 16384 || c.stack_size > (64ull << 20))
    snprintf(err, cap, "bad launch: stack_size %llu must be in [16 KiB, 64 MiB]", c.stack_size);
  else if (c.cooperative && (double)nt * gr[0] * gr[1] * gr[2] > kMaxCoopThreads)
    snprintf(err, cap, "bad launch: cooperative launch of %.0f threads; the emulator keeps at most %u alive",
             (double)nt * gr[0] * gr[1] * gr[2], kMaxCoopThreads);
  else
    return nullptr;
  return err;
}
inline bool coop_prepare(size_t nb) {
  size_t cap = g.coop_smem_n;
  if (!grow(g.coop_smem, cap, nb)) return false;
  for (size_t i = g.coop_smem_n; i < cap; ++i) g.coop_smem[i] = nullptr;
  g.coop_smem_n = cap;
  for (size_t i = 0; i < nb; ++i) {
    if (!g.coop_smem[i]) g.coop_smem[i] = map_smem_area();
    if (!g.coop_smem[i]) return false;
    guard_dyn(g.coop_smem[i]);
    Block& b = g.blocks[i];
    b.smem = g.coop_smem[i];
    free(b.save);
    b.save = nullptr;
    if (swap_bytes()) {
      b.save = static_cast<char*>(malloc(swap_bytes()));
      if (!b.save) return false;
      ns_copy(b, true);
    }
  }
  g.owner = nullptr;
  return true;
}
inline double now_s() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}
inline void launch_body(const LaunchCfg& c, size_t nb) {
  if (c.cooperative) {
    for (size_t i = 0; i < nb; ++i) block_setup(g.blocks[i], (unsigned)i, g.pool + i * g.nthreads, c.grid, c.block);
    run_blocks(g.blocks, nb);
    if (g.owner) ns_copy(*g.owner, true);
    return;
  }
  g.blocks[0].smem = g.home;
  for (size_t i = 0; i < nb && !g.failed; ++i) {
    g.live_total = g.ready_total = 0;
    block_setup(g.blocks[0], c.order ? c.order[i] : (unsigned)i, g.pool, c.grid, c.block);
    run_blocks(g.blocks, 1);
  }
}
// Runs body(arg) as every thread of the grid. Returns 0, or 1 with a message in err.
inline int run_launch(const LaunchCfg& c, void (*body)(void*), void* arg, char* err, size_t cap) {
  if (g.in_launch) { snprintf(err, cap, "bad launch: a launch is already running in this module"); return 1; }
  if (check_cfg(c, err, cap)) return 1;
  size_t nb = (size_t)c.grid[0] * c.grid[1] * c.grid[2];
  g.nthreads = c.block[0] * c.block[1] * c.block[2];
  g.coop = c.cooperative != 0;
  g.dyn = c.dyn_smem;
  g.budget = c.yield_budget;
  g.launch_serial++;
  g.launch_static = 0;
  g.printf_bytes = g.printf_dropped = 0;
  g.static_limit = c.static_limit;
  g.smem_limit = c.smem_limit;
  g.arch = c.arch ? c.arch : "";
  g.body = body;
  g.body_arg = arg;
  g.failed = false;
  g.err[0] = 0;
  g.yields = 0;
  g.switches = g.turns = g.live_total = g.ready_total = 0;
  g.stats = LaunchStats{};
  g.stats.blocks = nb;
  g.stats.threads = nb * g.nthreads;
  blockDim = dim3(c.block[0], c.block[1], c.block[2]);
  gridDim = dim3(c.grid[0], c.grid[1], c.grid[2]);
  size_t nblk = g.coop ? nb : 1, cap_b = g.blocks_cap;
  bool ok = ensure_home() && grow(g.blocks, cap_b, nblk) && fibers_reserve(g.coop ? nb * g.nthreads : g.nthreads, c.stack_size);
  g.blocks_cap = cap_b;
  if (ok) {
    place_dyn();
    guard_dyn(g.home);
  }
  if (ok && g.coop) ok = coop_prepare(nb);
  if (!ok) { snprintf(err, cap, "bad launch: out of memory for fibers or shared memory"); return 1; }
  double t0 = now_s();
  g.thread = pthread_self();
  g.in_launch = true;
  faults_install();
  stall_arm(c.stall_ms);
  launch_body(c, nb);
  stall_disarm();
  faults_restore();
  g.in_launch = false;
  g.cur = nullptr;
  pools_trim();
  fflush(stdout);
  if (g.printf_dropped)
    fprintf(stderr, "cuda_emu: note: the launch's printf output passed the GPU's printf buffer (%zu bytes, "
            "cudaLimitPrintfFifoSize): %zu more bytes were dropped, as on the GPU\n", kPrintfBuffer, g.printf_dropped);
  g.stats.switches = g.switches;
  g.stats.yields = (unsigned long long)g.yields;
  g.stats.turns = g.turns;
  g.stats.seconds = now_s() - t0;
  if (!g.failed) return 0;
  snprintf(err, cap, "%s", g.err);
  return 1;
}


enum ArgKind : int { A_PTR = 0, A_I8, A_U8, A_I16, A_U16, A_I32, A_U32, A_I64, A_U64, A_F16, A_F32, A_F64, A_BOOL, A_RAW };
struct Arg {
  int kind;
  int size;
  const void* data;
};

// The C++ spelling of T, for error messages ("float const*").
template <class T>
inline const char* type_name() {
  static char buf[160];
  const char* s = strstr(__PRETTY_FUNCTION__, "T = ");
  if (!s) return "?";
  s += 4;
  size_t n = strcspn(s, ";]");
  snprintf(buf, sizeof buf, "%.*s", (int)n, s);
  return buf;
}

struct Num {
  bool is_float;
  bool is_signed;
  double f;
  long long i;
  unsigned long long u;
};
template <class S>
inline Num num_of(const void* p) {
  S v;
  memcpy(&v, p, sizeof v);
  if constexpr (std::is_floating_point_v<S>) return Num{true, true, (double)v, 0, 0};
  else if constexpr (std::is_signed_v<S>) return Num{false, true, (double)v, (long long)v, (unsigned long long)v};
  else return Num{false, false, (double)v, (long long)v, (unsigned long long)v};
}
inline bool read_num(const Arg& a, Num& out) {
  switch (a.kind) {
    case A_I8: out = num_of<signed char>(a.data); return true;
    case A_U8: out = num_of<unsigned char>(a.data); return true;
    case A_I16: out = num_of<short>(a.data); return true;
    case A_U16: out = num_of<unsigned short>(a.data); return true;
    case A_I32: out = num_of<int>(a.data); return true;
    case A_U32: out = num_of<unsigned>(a.data); return true;
    case A_I64: out = num_of<long long>(a.data); return true;
    case A_U64: out = num_of<unsigned long long>(a.data); return true;
    case A_F32: out = num_of<float>(a.data); return true;
    case A_F64: out = num_of<double>(a.data); return true;
    case A_BOOL: out = num_of<unsigned char>(a.data); out.u = out.i = out.u != 0; return true;
    case A_F16: {
      unsigned short h;
      memcpy(&h, a.data, 2);
      out = Num{true, true, (double)f16_to_f32(h), 0, 0};
      return true;
    }
    default: return false;
  }
}

// Converts argument i into parameter type P; on a mismatch writes one line into err and returns false.
template <class P>
inline bool convert_arg(const Arg& a, int i, P& out, char* err, size_t cap) {
  if constexpr (std::is_pointer_v<P>) {
    if (a.kind != A_PTR) {
      snprintf(err, cap, "argument %d: the kernel expects a pointer (%s), got a scalar", i, type_name<P>());
      return false;
    }
    out = (P)(a.data);
    return true;
  } else if constexpr (std::is_arithmetic_v<P> || std::is_enum_v<P> || std::is_same_v<P, __half> ||
                       std::is_same_v<P, __nv_bfloat16>) {
    Num v;
    if (!read_num(a, v)) {
      snprintf(err, cap, "argument %d: the kernel expects a value of type %s, got %s", i, type_name<P>(),
               a.kind == A_PTR ? "an array (pointer)" : "raw bytes");
      return false;
    }
    if constexpr (std::is_floating_point_v<P> || std::is_same_v<P, __half> || std::is_same_v<P, __nv_bfloat16>) {
      if constexpr (std::is_floating_point_v<P>) out = (P)v.f;
      else out = P((float)v.f);
    } else {
      if (v.is_float && v.f != (double)(long long)v.f) {
        snprintf(err, cap, "argument %d: the kernel expects %s, got the non-integral value %g", i, type_name<P>(), v.f);
        return false;
      }
      if (v.is_float) out = (P)(long long)v.f;
      else out = v.is_signed ? (P)v.i : (P)v.u;
    }
    return true;
  } else {
    static_assert(std::is_trivially_copyable_v<P>, "kernel parameters are trivially copyable");
    if (a.kind == A_PTR || a.size != (int)sizeof(P)) {
      snprintf(err, cap, "argument %d: the kernel expects %s (%zu bytes), got %s of %d bytes", i, type_name<P>(),
               sizeof(P), a.kind == A_PTR ? "a pointer" : "a value", a.kind == A_PTR ? 8 : a.size);
      return false;
    }
    memcpy((void*)&out, a.data, sizeof(P));
    return true;
  }
}

template <class... P>
struct Bound {
  void (*k)(P...);
  std::tuple<std::remove_cv_t<P>...> args;
  static void call(void* self) {
    Bound* b = static_cast<Bound*>(self);
    std::apply(b->k, b->args);  // each thread gets its own copy of the parameters, as in CUDA
  }
};
template <class... P, size_t... I>
inline bool convert_all(Bound<P...>& b, const Arg* args, char* err, size_t cap, std::index_sequence<I...>) {
  return (convert_arg(args[I], (int)I, std::get<I>(b.args), err, cap) && ...);
}

// What every generated launcher calls: checks and converts the arguments, then runs the grid.
template <class... P>
inline int launch_kernel(void (*k)(P...), const LaunchCfg* cfg, const Arg* args, int nargs, char* err, int cap) {
  if (nargs != (int)sizeof...(P)) {
    snprintf(err, (size_t)cap, "the kernel takes %zu arguments, got %d", sizeof...(P), nargs);
    return 1;
  }
  Bound<P...> b{k, {}};
  if (!convert_all(b, args, err, (size_t)cap, std::index_sequence_for<P...>{})) return 1;
  return run_launch(*cfg, &Bound<P...>::call, &b, err, (size_t)cap);
}

}  // namespace emu
