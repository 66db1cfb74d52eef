// emu_guard.h — how a launch ends instead of hanging or crashing: deadlock / watchdog reports, the yield
// budget, faults in device code (segfault, stack overflow, out-of-bounds dynamic shared memory, division by
// zero) and the stall timer for spin loops that never yield. Part of cuda_emu.h.
#pragma once

namespace emu {

// ---- reports ---------------------------------------------------------------------------------------------
// "0-4,6,9-31" for a sorted list of ids (shortened after a few ranges).
inline void append_ranges(char* buf, size_t cap, const unsigned* ids, unsigned n) {
  unsigned shown = 0;
  for (unsigned i = 0; i < n;) {
    unsigned j = i;
    while (j + 1 < n && ids[j + 1] == ids[j] + 1) ++j;
    if (shown++ == 6) { appendf(buf, cap, ",..."); return; }
    appendf(buf, cap, i == j ? "%s%u" : "%s%u-%u", i ? "," : "", ids[i], ids[j]);
    i = j + 1;
  }
}
inline void describe_wait(char* buf, size_t cap, const Fiber* f) {
  switch (f->state) {
    case S_BAR: appendf(buf, cap, "%s", bar_names[f->bar_kind]); break;
    case S_WARP: appendf(buf, cap, "%s mask 0x%08x", f->wname, f->wmask); break;
    case S_READY: appendf(buf, cap, "emu_yield(\"%s\")", f->why); break;
    default: appendf(buf, cap, "(running)"); break;
  }
}
inline bool same_wait(const Fiber* a, const Fiber* b) {
  if (a->state != b->state) return false;
  if (a->state == S_BAR) return a->bar_kind == b->bar_kind;
  if (a->state == S_WARP) return a->wname == b->wname && a->wmask == b->wmask;
  if (a->state == S_READY) return strcmp(a->why, b->why) == 0;
  return true;
}
// One line per block: its live threads grouped by what they wait for.
inline void describe_block(char* buf, size_t cap, Block& b) {
  static unsigned ids[1024];
  static bool done[1024];
  appendf(buf, cap, "\n  block (%u,%u,%u):", b.idx.x, b.idx.y, b.idx.z);
  for (unsigned i = 0; i < b.n; ++i) done[i] = b.th[i]->state == S_DONE;
  const char* sep = " ";
  for (unsigned i = 0; i < b.n; ++i) {
    if (done[i]) continue;
    unsigned n = 0;
    for (unsigned j = i; j < b.n; ++j)
      if (!done[j] && same_wait(b.th[i], b.th[j])) { ids[n++] = j; done[j] = true; }
    Fiber* f = b.th[i];
    if (n == 1) {
      appendf(buf, cap, "%sthread (%u,%u,%u) waits at ", sep, f->tid.x, f->tid.y, f->tid.z);
    } else {
      appendf(buf, cap, "%s%u threads (linear ", sep, n);
      append_ranges(buf, cap, ids, n);
      appendf(buf, cap, ") wait at ");
    }
    describe_wait(buf, cap, f);
    if (f->state == S_WARP) {
      unsigned w = f->lin >> 5, need = f->wmask & ~b.warp_exited[w], missing = need & ~b.warp_arrived[w];
      if (missing) appendf(buf, cap, " (lanes 0x%08x of warp %u are alive elsewhere)", missing, w);
      else appendf(buf, cap, " (lanes of warp %u disagree on the mask)", w);
    }
    sep = "; ";
  }
}
inline void describe_blocks(char* buf, size_t cap, Block* blocks, size_t nb) {
  unsigned shown = 0, skipped = 0;
  for (size_t i = 0; i < nb; ++i) {
    if (!blocks[i].live) continue;
    if (shown++ < 4) describe_block(buf, cap, blocks[i]); else skipped++;
  }
  if (skipped) appendf(buf, cap, "\n  ... and %u more blocks", skipped);
}

// ---- yielding --------------------------------------------------------------------------------------------
inline void yield(const char* why) {
  Fiber* f = g.cur;
  if (!f) return;
  if (++g.yields > g.budget) {
    if (!g.failed) {
      g.failed = true;
      snprintf(g.err, sizeof g.err,
               "watchdog: %lld yields without the launch finishing (endless polling? if the work is just long, "
               "raise the budget: --yield-budget N or $RAMMER_EMU_YIELD_BUDGET); %s polls at '%s'. Live threads:",
               g.budget, here(), why);
      f->why = why;
      f->state = S_READY;
      describe_blocks(g.err, sizeof g.err, g.blocks, g.coop ? g.stats.blocks : 1);
    }
    ctx_switch(f->ctx, g.sched);
  }
  f->why = why;
  f->yield_turn = g.turn;
  make_ready(f);
  suspend(f);
}

// ---- faults inside device code (segfault, stack overflow, division by zero) ------------------------------
inline struct sigaction old_actions[3];
inline const int fault_signals[3] = {SIGSEGV, SIGBUS, SIGFPE};
inline stack_t old_altstack;
inline char* alt_stack_mem = nullptr;
constexpr size_t kAltStack = 65536;

inline bool san_atomic_fault(uintptr_t a, char* buf, size_t cap);  // emu_sanitize.h: an atomic far out of bounds

inline void on_fault(int sig, siginfo_t* si, void*) {
  Fiber* f = g.cur;
  int k = sig == SIGSEGV ? 0 : sig == SIGBUS ? 1 : 2;
  if (!f || !g.in_launch || !pthread_equal(pthread_self(), g.thread)) {
    sigaction(sig, &old_actions[k], nullptr);  // not ours: the fault repeats under the previous handler
    return;
  }
  uintptr_t a = reinterpret_cast<uintptr_t>(si->si_addr), lo = reinterpret_cast<uintptr_t>(f->map);
  uintptr_t area = reinterpret_cast<uintptr_t>(g.coop && g.ns_dyn ? g.home : f->blk->smem);
  if (!g.failed) {
    g.failed = true;
    if (sig == SIGSEGV && a >= area + kStaticSmemCap && a < area + kSmemBytes + kPage)
      snprintf(g.err, sizeof g.err,
               "%s: dynamic shared memory access out of bounds: byte offset %lld of a %zu-byte launch (dyn_smem)",
               here(), (long long)(a - (area + (g.coop && g.ns_dyn ? kStaticSmemCap : g.dyn_off))), g.dyn);
    else if (sig == SIGSEGV && a >= lo && a < lo + kGuard)
      snprintf(g.err, sizeof g.err, "%s: stack overflow (fiber stack of %zu bytes; raise stack_size)", here(),
               f->map_size - kGuard);
    else if (sig == SIGFPE)
      snprintf(g.err, sizeof g.err, "%s: arithmetic exception (integer division by zero?)", here());
    else if (san_atomic_fault(a, g.err, sizeof g.err)) {
    } else
      snprintf(g.err, sizeof g.err, "%s: %s at address %p (out-of-bounds or invalid pointer)", here(),
               sig == SIGSEGV ? "segmentation fault" : "bus error", si->si_addr);
  }
  ctx_switch(f->ctx, g.sched);  // leaves the signal frame behind for good
}
// ---- stall watchdog: a spin loop without a yield point (e.g. on a volatile flag) ends the launch -----------
constexpr long kStallTickMs = 250;
inline timer_t stall_timer;
inline bool stall_armed = false;
inline unsigned long long stall_seen = 0;
inline long long stall_ticks = 0, stall_limit = 0;

inline int stall_signal() { return SIGRTMIN + 7; }
inline void on_stall(int, siginfo_t*, void*) {
  if (!g.in_launch || !g.cur || !pthread_equal(pthread_self(), g.thread)) return;
  if (g.switches != stall_seen) { stall_seen = g.switches; stall_ticks = 0; return; }
  if (++stall_ticks < stall_limit || g.failed) return;
  Fiber* f = g.cur;
  g.failed = true;
  snprintf(g.err, sizeof g.err,
           "stall: %s ran %.1f s without reaching a yield point (a spin loop without emu_yield() or "
           "__nanosleep()? if it is just long work, raise the limit: --stall-timeout S or "
           "$RAMMER_EMU_STALL_TIMEOUT). Other threads:",
           here(), stall_ticks * kStallTickMs / 1000.0);
  f->state = S_READY;
  f->why = "(spinning)";
  describe_blocks(g.err, sizeof g.err, g.blocks, g.coop ? g.stats.blocks : 1);
  ctx_switch(f->ctx, g.sched);  // leaves the signal frame behind for good
}
// The handler stays installed (it ignores ticks outside a launch): no late tick can meet a default action.
inline void stall_arm(long long ms) {
  static bool installed = false;
  if (ms <= 0) return;
  if (!installed) {
    struct sigaction sa{};
    sa.sa_sigaction = on_stall;
    sa.sa_flags = SA_SIGINFO | SA_ONSTACK | SA_NODEFER | SA_RESTART;
    sigemptyset(&sa.sa_mask);
    installed = sigaction(stall_signal(), &sa, nullptr) == 0;
    if (!installed) return;
  }
  sigevent ev{};
  ev.sigev_notify = SIGEV_THREAD_ID;
  ev.sigev_signo = stall_signal();
  ev._sigev_un._tid = (pid_t)syscall(SYS_gettid);
  if (timer_create(CLOCK_MONOTONIC, &ev, &stall_timer) != 0) return;
  itimerspec it{};
  it.it_interval.tv_nsec = it.it_value.tv_nsec = kStallTickMs * 1000000L;
  stall_seen = ~0ull;
  stall_ticks = 0;
  stall_limit = (ms + kStallTickMs - 1) / kStallTickMs;
  timer_settime(stall_timer, 0, &it, nullptr);
  stall_armed = true;
}
inline void stall_disarm() {
  if (!stall_armed) return;
  timer_delete(stall_timer);
  stall_armed = false;
}

inline void faults_install() {
  if (!alt_stack_mem) alt_stack_mem = static_cast<char*>(map_anon(kAltStack));
  stack_t ss{};
  ss.ss_sp = alt_stack_mem;
  ss.ss_size = kAltStack;
  sigaltstack(&ss, &old_altstack);
  struct sigaction sa{};
  sa.sa_sigaction = on_fault;
  sa.sa_flags = SA_SIGINFO | SA_ONSTACK | SA_NODEFER;
  sigemptyset(&sa.sa_mask);
  for (int k = 0; k < 3; ++k) sigaction(fault_signals[k], &sa, &old_actions[k]);
}
inline void faults_restore() {
  for (int k = 0; k < 3; ++k) sigaction(fault_signals[k], &old_actions[k], nullptr);
  sigaltstack(&old_altstack, nullptr);
}

}  // namespace emu

// The yield point of polling loops (rtask_runtime.cuh calls it in its barrier wait).
inline void emu_yield(const char* why) { emu::yield(why); }
extern "C" __attribute__((visibility("default"), used)) inline void emu_last_stats(emu::LaunchStats* out) {
  *out = emu::g.stats;
}
// glibc's assert() calls this; defined here (hidden) it ends the launch instead of the process.
extern "C" void __assert_fail(const char* expr, const char* file, unsigned line, const char* func) noexcept {
  emu::fail("%s: assertion '%s' failed (%s:%u, %s)", emu::here(), expr, file, line, func);
}
