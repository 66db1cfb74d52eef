// emu_sanitize.h — the emulator as a sanitizer (what compute-sanitizer does on a GPU, here on the CPU).
// Part of cuda_emu.h.
//
// A module built with sanitizers (CpuModule(..., sanitize=...)) is compiled by g++ with
// -fsanitize=kernel-address in its "outline" form: before every load and store of the source, g++ calls
// __asan_{load,store}{1,2,4,8,16,N}_noabort(address[, size]). This file defines those hooks (no ASan runtime is
// involved), so each access of the running CUDA thread (fiber) is checked:
//   memcheck   global buffers handed to a launch live in guarded regions (cuda_emu/module.py copies them there,
//              registered here with their names); an access that leaves its buffer and lands in the redzone
//              around it is reported with the buffer, the element offset and the size. Shared memory: static
//              __shared__ variables get redzones between them; the dynamic part is bounded by the launch.
//   racecheck  shared memory only: a shadow entry per 4-byte word remembers the last writer and the readers
//              since the block's last barrier; an access from another warp that conflicts (write after read,
//              read after write, write after write) with no __syncthreads (or rTask barrier) in between is
//              reported with both sites. g++ checks only the load of a read-modify-write (`acc[0] += x`): the
//              load's bytes are kept until the thread's next check or switch, and a change by then is the
//              thread's own uninstrumented store, checked as a write at that site. Lanes of one warp that touch
//              the same word (one writing) with no __syncwarp or other warp collective in between are a
//              warp-synchronous hazard: since Volta a warp's lanes need not run in lockstep (the `volatile`
//              reduction tail without __syncwarp), so it is reported like a race.
//   memcheck also: a 2/4/8/16-byte access at an address not aligned to its size (the GPU's "misaligned
//              address"), an array subscript past its bound (g++ -fsanitize=bounds: local arrays too).
//   synccheck  a block barrier whose threads arrive from different __syncthreads call sites; a warp shuffle
//              that reads its value from a lane that has exited (or that a partial last warp lacks). Exited
//              threads are otherwise legal (sm_70+): they no longer count at barriers or in masks.
// A report names the thread and carries "@@SITE:+0x..@@" for each code location (an offset into the built
// library); cuda_emu/module.py turns those into file:line with addr2line. Emulator internals that touch user
// memory on purpose (atomics) are not instrumented (EMU_NOSAN) and check bounds explicitly.
#pragma once

#include <dlfcn.h>

#if defined(EMU_SANITIZE)
#define EMU_NOSAN __attribute__((no_sanitize_address, no_sanitize("bounds"), noinline)) inline
#define EMU_SAN_FN __attribute__((no_sanitize_address, no_sanitize("bounds"))) inline  // the checker is never checked
#else
#define EMU_NOSAN inline
#define EMU_SAN_FN inline
#endif

namespace emu {

enum : unsigned { SAN_MEM = 1u, SAN_RACE = 2u, SAN_SYNC = 4u };

struct SanBuf {
  uintptr_t lo, hi;   // the buffer's bytes [lo, hi)
  uintptr_t red;      // redzone bytes on each side (the region the hooks attribute to this buffer)
  unsigned item;      // element size, for the reported offset
  char name[64];
};
struct SanSlot {      // a static __shared__ variable in the block's area (sanitized builds)
  size_t off, size;
  const char* name;
  size_t item;        // its element size
};
struct Shadow {       // racecheck: one 4-byte word of shared memory
  unsigned long long serial;       // the block run the entry belongs to
  unsigned epoch;                  // the block's barrier count when the entry was last written
  unsigned short wwarp[4], r1warp, r2warp, lwarp;  // warp + 1 of the last writer of each byte (threads writing
  unsigned wthread[4], r1thread, r2thread, lthread;  // their own __half or char of one word do not race) / two
  unsigned wwe[4], r1we, lwe;      // readers of different warps / the last reader (0: none); their warp's
  uintptr_t wsite[4], r1site, r2site, lsite;  // collective count at the access (warp-synchronous hazards)
  unsigned char r1mask, r2mask, lmask;  // the bytes of the word each reader read (bit k: byte k)
};

constexpr size_t kMaxSanBufs = 4096;
constexpr size_t kShadowWords = (kSmemBytes + kPage) / 4;

struct SanState {
  unsigned flags = 0;
  SanBuf* bufs = nullptr;       // sorted by lo
  size_t nbufs = 0;
  SanSlot* slots = nullptr;
  size_t nslots = 0, slots_cap = 0;
  Shadow* shadow = nullptr;     // racecheck shadow of the area in use (plain launches) or of the home area
  char* shadow_area = nullptr;
  unsigned long long serial = 0;
  bool busy = false;            // inside a check (its own memory accesses are not checked)
  unsigned undef_reads = 0;     // synccheck: shuffles of this launch that read an exited lane
  char undef_first[768] = {};   // the first of them, described
  bool poison = false;          // such a read returns the complement of the reader's value (the host's rerun)
  // memcheck: the atomic running now when its address lies in no buffer and no shared memory ([lo, hi), its site
  // and thread): a fault there is reported as this atomic's out-of-bounds access (on_fault), not a segfault
  uintptr_t atomic_lo = 0, atomic_hi = 0, atomic_site = 0;
  const void* atomic_fiber = nullptr;
};
inline SanState san;

// "@@SITE:+0x1a2b@@": an offset into the library that holds the code (module.py resolves it to file:line).
EMU_SAN_FN void append_site(char* buf, size_t cap, uintptr_t site) {
  Dl_info info;
  if (site && dladdr(reinterpret_cast<void*>(site), &info) && info.dli_fbase)
    appendf(buf, cap, "@@SITE:+0x%lx@@", (unsigned long)(site - reinterpret_cast<uintptr_t>(info.dli_fbase)));
  else
    appendf(buf, cap, "(unknown site)");
}
EMU_SAN_FN void describe_thread(char* buf, size_t cap, const Block& b, unsigned lin) {
  unsigned x = blockDim.x, y = blockDim.y;
  appendf(buf, cap, "thread (%u,%u,%u)", lin % x, (lin / x) % y, lin / (x * y));
  (void)b;
}
// Ends the launch with a sanitizer report: from inside a fiber it never returns; from the scheduler (a store
// settled after the thread switched out) it records the report and returns.
inline bool san_in_sched = false;
EMU_SAN_FN void san_report(const char* report) {
  san.busy = false;
  if (!g.failed) {
    g.failed = true;
    snprintf(g.err, sizeof g.err, "%s", report);
  }
  if (san_in_sched) return;
  ctx_switch(g.cur->ctx, g.sched);
  __builtin_unreachable();
}
[[noreturn]] EMU_SAN_FN void san_fail(const char* report) {
  san_report(report);
  __builtin_unreachable();
}

// ---- memcheck: global buffers -----------------------------------------------------------------------------
EMU_SAN_FN const SanBuf* san_buf_near(uintptr_t a) {
  size_t lo = 0, hi = san.nbufs;  // last buffer with lo - red <= a
  while (lo < hi) {
    size_t mid = (lo + hi) / 2;
    if (san.bufs[mid].lo - san.bufs[mid].red <= a) lo = mid + 1; else hi = mid;
  }
  for (size_t i = lo; i-- > 0;) {
    const SanBuf& b = san.bufs[i];
    if (a < b.hi + b.red) return &b;
    if (i + 8 < lo) break;  // regions do not overlap: the nearest few are enough
  }
  return nullptr;
}
[[noreturn]] EMU_SAN_FN void report_oob(const char* space, const SanBuf& b, uintptr_t a, size_t n, bool write, uintptr_t site) {
  char msg[1024] = {};
  long long rel = (long long)(a - b.lo);
  long long elem = rel >= 0 ? rel / (long long)b.item : -((-rel + b.item - 1) / (long long)b.item);
  appendf(msg, sizeof msg, "memcheck: %s: out-of-bounds %s of %zu bytes at %s[%+lld] (%s buffer '%s', %llu elements",
          here(), write ? "write" : "read", n, b.name, elem, space, b.name,
          (unsigned long long)((b.hi - b.lo) / b.item));
  if (rel % (long long)b.item) appendf(msg, sizeof msg, "; byte offset %+lld", rel);
  appendf(msg, sizeof msg, ") at ");
  append_site(msg, sizeof msg, site);
  san_fail(msg);
}
EMU_SAN_FN bool san_check_global(uintptr_t a, size_t n, bool write, uintptr_t site) {
  const SanBuf* b = san_buf_near(a);
  if (!b) return false;
  if (a >= b->lo && a + n <= b->hi) return true;
  report_oob("global", *b, a, n, write, site);
}

// ---- shared memory: which area, memcheck of static slots and the dynamic part -------------------------------
EMU_SAN_FN char* san_area() { return g.coop && g.ns_dyn ? g.home : g.cur->blk->smem; }
EMU_SAN_FN void san_note_slot(size_t off, size_t size, const char* name, size_t item) {
  if (!grow(san.slots, san.slots_cap, san.nslots + 1)) return;
  san.slots[san.nslots++] = SanSlot{off, size, name, item ? item : 1};
}
EMU_SAN_FN void san_check_shared(char* area, uintptr_t a, size_t n, bool write, uintptr_t site) {
  uintptr_t base = reinterpret_cast<uintptr_t>(area), off = a - base;
  if (off < kStaticSmemCap) {
    const SanSlot* near = nullptr;
    for (size_t i = 0; i < san.nslots; ++i) {
      const SanSlot& s = san.slots[i];
      if (off >= s.off && off + n <= s.off + s.size) return;
      if (!near || (off < s.off ? s.off - off : off - (s.off + s.size)) <
                       (off < near->off ? near->off - off : off - (near->off + near->size)))
        near = &s;
    }
    if (!near) return;  // no static __shared__ variable at all: nothing to attribute the access to
    SanBuf b{base + near->off, base + near->off + near->size, 0, (unsigned)near->item, {}};
    snprintf(b.name, sizeof b.name, "%s", near->name ? near->name : "?");
    report_oob("shared", b, a, n, write, site);
  }
  uintptr_t dlo = base + g.dyn_off, dhi = dlo + g.dyn;
  if (a >= dlo && a + n <= dhi) return;
  SanBuf b{dlo, dhi, 0, 1, {}};
  snprintf(b.name, sizeof b.name, "extern __shared__ (%zu bytes)", g.dyn);
  report_oob("dynamic shared", b, a, n, write, site);
}

// ---- racecheck --------------------------------------------------------------------------------------------
EMU_SAN_FN Shadow* san_shadow(char* area) {
  if (san.shadow_area != area || !san.shadow) {
    if (!san.shadow) {
      san.shadow = static_cast<Shadow*>(map_anon(kShadowWords * sizeof(Shadow)));
      if (!san.shadow) return nullptr;
    }
    if (san.shadow_area && san.shadow_area != area) madvise(san.shadow, kShadowWords * sizeof(Shadow), MADV_DONTNEED);
    san.shadow_area = area;
  }
  return san.shadow;
}
EMU_SAN_FN void report_race(const char* kind, const char* other_verb, uintptr_t a, const Block& b,
                            unsigned other_thread, uintptr_t other_site, bool write, uintptr_t site, bool warp) {
  char msg[1400] = {};
  uintptr_t off = a - reinterpret_cast<uintptr_t>(san_area());
  const char* name = "shared memory";
  size_t rel = off;
  for (size_t i = 0; i < san.nslots; ++i)
    if (off >= san.slots[i].off && off < san.slots[i].off + san.slots[i].size) {
      name = san.slots[i].name;
      rel = off - san.slots[i].off;
    }
  if (off >= g.dyn_off && off < g.dyn_off + g.dyn) { name = "extern __shared__"; rel = off - g.dyn_off; }
  appendf(msg, sizeof msg, "racecheck: %s (%s) on %s byte %zu: %s %s at ",
          warp ? "warp-synchronous hazard" : "shared-memory race", kind, name, rel, here(), write ? "writes" : "reads");
  append_site(msg, sizeof msg, site);
  appendf(msg, sizeof msg, "; ");
  describe_thread(msg, sizeof msg, b, other_thread);
  appendf(msg, sizeof msg, " %s%s it at ", warp ? "of the same warp " : "", other_verb);
  append_site(msg, sizeof msg, other_site);
  if (warp)
    appendf(msg, sizeof msg, " with no __syncwarp in between (a warp's lanes do not run in lockstep since Volta: "
            "the GPU's result depends on their timing; add __syncwarp() between the steps, or use shuffles)");
  else
    appendf(msg, sizeof msg, " with no barrier in between");
  san_report(msg);
}
// One access of thread f to [a, a + n) of the shared area; returns after a report only from the scheduler.
EMU_SAN_FN void san_race(char* area, uintptr_t a, size_t n, bool write, uintptr_t site, Fiber* f) {
  Shadow* sh = san_shadow(area);
  if (!sh) return;
  Block& b = *f->blk;
  unsigned short w = (unsigned short)((f->lin >> 5) + 1);
  unsigned we = b.san_wepoch[w - 1], me = f->lin;
  auto same_warp = [&](unsigned short ow, unsigned ot, unsigned owe) { return ow == w && ot != me && owe == we; };
  const uintptr_t base = reinterpret_cast<uintptr_t>(area);
  uintptr_t first = (a - base) / 4, last = (a + n - 1 - base) / 4;
  for (uintptr_t i = first; i <= last && i < kShadowWords; ++i) {
    Shadow& e = sh[i];
    if (e.serial != b.san_serial || e.epoch != b.san_epoch) {
      e = Shadow{};
      e.serial = b.san_serial;
      e.epoch = b.san_epoch;
    }
    // the bytes of this word the access covers: threads that touch different bytes of one word (a __half or char
    // array, each thread its element) do not conflict
    const uintptr_t lo = a > base + 4 * i ? a : base + 4 * i, hi = a + n < base + 4 * i + 4 ? a + n : base + 4 * i + 4;
    const unsigned char m = (unsigned char)(((1u << (hi - lo)) - 1u) << (lo - base - 4 * i));
    for (unsigned k = 0; k < 4; ++k) {
      if (!(m >> k & 1u) || !e.wwarp[k]) continue;
      const char* kind = write ? "write after write" : "read after write";
      if (e.wwarp[k] != w) return report_race(kind, "wrote", a, b, e.wthread[k], e.wsite[k], write, site, false);
      if (same_warp(e.wwarp[k], e.wthread[k], e.wwe[k]))
        return report_race(kind, "wrote", a, b, e.wthread[k], e.wsite[k], write, site, true);
    }
    const bool wr1 = e.r1mask & m, wr2 = e.r2mask & m, wl = e.lmask & m;
    if (write) {
      if (wr1 && e.r1warp && e.r1warp != w) return report_race("write after read", "read", a, b, e.r1thread, e.r1site, true, site, false);
      if (wr2 && e.r2warp && e.r2warp != w) return report_race("write after read", "read", a, b, e.r2thread, e.r2site, true, site, false);
      if (wr1 && same_warp(e.r1warp, e.r1thread, e.r1we)) return report_race("write after read", "read", a, b, e.r1thread, e.r1site, true, site, true);
      if (wl && same_warp(e.lwarp, e.lthread, e.lwe)) return report_race("write after read", "read", a, b, e.lthread, e.lsite, true, site, true);
      for (unsigned k = 0; k < 4; ++k)
        if (m >> k & 1u) { e.wwarp[k] = w; e.wthread[k] = me; e.wsite[k] = site; e.wwe[k] = we; }
      e.r1mask &= (unsigned char)~m; e.r2mask &= (unsigned char)~m; e.lmask &= (unsigned char)~m;
      if (!e.r1mask) e.r1warp = 0;
      if (!e.r2mask) e.r2warp = 0;
      if (!e.lmask) e.lwarp = 0;
    } else {
      if (!e.r1warp) { e.r1warp = w; e.r1thread = me; e.r1site = site; e.r1we = we; e.r1mask = m; }
      else if (e.r1warp == w) e.r1mask |= m;
      else if (!e.r2warp) { e.r2warp = w; e.r2thread = me; e.r2site = site; e.r2mask = m; }
      else if (e.r2warp == w) e.r2mask |= m;
      e.lwarp = w; e.lthread = me; e.lsite = site; e.lwe = we; e.lmask = m;
    }
  }
}
// A shared load's bytes, kept until the thread's next check or switch (see san_settle).
EMU_SAN_FN void san_pend(Fiber* f, uintptr_t a, size_t n, uintptr_t site) {
  if (n > sizeof f->san_pend_val) return;
  memcpy(f->san_pend_val, reinterpret_cast<const void*>(a), n);
  f->san_pend = a;
  f->san_pend_n = (unsigned)n;
  f->san_pend_site = site;
}
// g++ checks only the load of a read-modify-write: bytes of the last shared load that changed before the thread's
// next check or switch were written by the thread itself (no other thread runs meanwhile), at the load's site.
EMU_SAN_FN void san_settle_checked(Fiber* f) {
  uintptr_t a = f->san_pend;
  f->san_pend = 0;
  if (!(san.flags & SAN_RACE) || memcmp(reinterpret_cast<const void*>(a), f->san_pend_val, f->san_pend_n) == 0) return;
  san_race(san_area(), a, f->san_pend_n, true, f->san_pend_site, f);
}

// ---- the access hook --------------------------------------------------------------------------------------
EMU_SAN_FN bool san_is_shared(char* area, uintptr_t a) {
  uintptr_t base = reinterpret_cast<uintptr_t>(area);
  if (a >= base && a < base + kSmemBytes + kPage) return true;
  for (size_t i = 0; i < g.ns_n; ++i)  // namespace-scope __shared__ variables live in the module's data
    if (a >= reinterpret_cast<uintptr_t>(g.ns[i].p) && a < reinterpret_cast<uintptr_t>(g.ns[i].p) + g.ns[i].n)
      return true;
  return false;
}
[[noreturn]] EMU_SAN_FN void report_misaligned(const char* space, uintptr_t a, size_t n, bool write, uintptr_t site) {
  char msg[1024] = {};
  appendf(msg, sizeof msg, "memcheck: %s: misaligned %s of %zu bytes at address 0x%lx (%s memory, %zu bytes past a "
          "%zu-byte boundary): the GPU requires an access of %zu bytes to be %zu-byte aligned (a float4/int4 at an "
          "offset that is not a multiple of 4 elements, a pointer cast from a narrower type) at ", here(),
          write ? "write" : "read", n, (unsigned long)a, space, (size_t)(a & (n - 1)), n, n, n);
  append_site(msg, sizeof msg, site);
  san_fail(msg);
}
// ---- memcheck: array subscripts past their bound (g++ -fsanitize=bounds, with g++'s own source location) --------
// The layouts are UBSan's (GCC and LLVM share them).
struct UbsanLoc { const char* file; unsigned line, col; };
struct UbsanType { unsigned short kind, info; char name[1]; };
struct UbsanOob { UbsanLoc loc; const UbsanType* array; const UbsanType* index; };
EMU_SAN_FN void san_oob_index(const void* d, uintptr_t index) {
  if (!(san.flags & SAN_MEM) || !g.cur || !g.in_launch || g.failed || san.busy || g.cur->san_oob) return;
  g.cur->san_oob = d;
  g.cur->san_oob_index = index;
}
// Reported after the access's own checks, which name a shared or global buffer more precisely when it leaves one.
[[noreturn]] EMU_SAN_FN void san_report_oob_index(Fiber* f) {
  const UbsanOob* d = static_cast<const UbsanOob*>(f->san_oob);
  f->san_oob = nullptr;
  bool is_signed = d->index && d->index->kind == 0 && (d->index->info & 1u);
  char msg[1024] = {};
  appendf(msg, sizeof msg, "memcheck: %s: array index ", here());
  if (is_signed) appendf(msg, sizeof msg, "%lld", (long long)f->san_oob_index);
  else appendf(msg, sizeof msg, "%llu", (unsigned long long)f->san_oob_index);
  appendf(msg, sizeof msg, " out of bounds for type %s (a local or fixed-size array: the GPU would read or write "
          "another variable, or fault) at %s:%u", d->array ? d->array->name : "?", d->loc.file ? d->loc.file : "?",
          d->loc.line);
  san_fail(msg);
}
// `align`: the access's natural alignment (its size, for g++'s fixed-size checks; 0 for a memcpy-like range).
EMU_SAN_FN void san_access_checked(uintptr_t a, size_t n, bool write, uintptr_t site, size_t align) {
  Fiber* f = g.cur;
  if (f->san_pend) san_settle_checked(f);
  char* area = san_area();
  bool shared = san_is_shared(area, a);
  if (shared) {
    bool in_area = a >= reinterpret_cast<uintptr_t>(area) && a < reinterpret_cast<uintptr_t>(area) + kSmemBytes;
    if ((san.flags & SAN_MEM) && align > 1 && (a & (align - 1))) report_misaligned("shared", a, n, write, site);
    if ((san.flags & SAN_MEM) && in_area) san_check_shared(area, a, n, write, site);
    if (san.flags & SAN_RACE) {
      san_race(area, a, n, write, site, f);
      if (!write && in_area) san_pend(f, a, n, site);
    }
  } else if (!san_buf_near(a)) {
    // neither shared memory nor a device buffer: a thread's local variable, or the emulator's own (threadIdx)
    if (f->san_oob && a >= reinterpret_cast<uintptr_t>(f->map) &&
        a < reinterpret_cast<uintptr_t>(f->map) + f->map_size)
      san_report_oob_index(f);  // an access to the thread's own stack: a local array
    return;
  } else if (san.flags & SAN_MEM) {
    if (align > 1 && (a & (align - 1))) report_misaligned("global", a, n, write, site);
    san_check_global(a, n, write, site);
  }
  if (f->san_oob) san_report_oob_index(f);
}
// Whether the code running is the CUDA thread g.cur (on its fiber stack), not the scheduler between two of its
// turns (run_turn's own instrumented copies of threadIdx happen with g.cur already set).
EMU_SAN_FN bool on_fiber(const Fiber* f) {
  uintptr_t sp = reinterpret_cast<uintptr_t>(__builtin_frame_address(0));
  return sp >= reinterpret_cast<uintptr_t>(f->map) && sp < reinterpret_cast<uintptr_t>(f->map) + f->map_size;
}
EMU_NOSAN void san_access(uintptr_t a, size_t n, bool write, uintptr_t site, size_t align = 0) {
  if (!san.flags || !g.cur || !g.in_launch || g.failed || san.busy || !on_fiber(g.cur)) return;
  san.busy = true;  // code the checks call (libc, the emulator's helpers) is not checked in turn
  san_access_checked(a, n, write, site, align);
  san.busy = false;
}
// Settles a thread's pending load (see san_settle_checked): at its next barrier, collective or atomic, and in
// the scheduler as soon as it switches out.
EMU_NOSAN void san_settle(Fiber* f) {
  if (!f || !f->san_pend || g.failed || san.busy) return;
  bool sched = g.cur != f || san_in_sched;
  Fiber* cur = g.cur;
  san.busy = true;
  san_in_sched = sched;
  g.cur = f;
  san_settle_checked(f);
  g.cur = cur;
  san_in_sched = false;
  san.busy = false;
}
// Atomics: bounds-checked like loads and stores, never a race (they are the synchronisation). An address in no
// buffer and no shared memory may still be valid (a __device__ variable, device malloc): it is remembered, and a
// fault at it (an index far out of bounds: `atomicAdd(h + i, 1)` on a __shared__ h) becomes a memcheck line with
// the atomic's site (san_atomic_fault), as a load or store just past its buffer does.
EMU_NOSAN void san_atomic(const void* p, size_t n, uintptr_t site) {
  if (g.cur && g.cur->san_pend) san_settle(g.cur);
  if (!(san.flags & SAN_MEM) || !g.cur || !g.in_launch || g.failed || san.busy) return;
  if (g.cur->san_oob) {  // `atomicAdd(&h[i], 1)` with i past h's bound: g++'s subscript check flagged it
    san.busy = true;
    san_report_oob_index(g.cur);
  }
  uintptr_t a = reinterpret_cast<uintptr_t>(p);
  char* area = san_area();
  if (san_is_shared(area, a)) {
    if (a >= reinterpret_cast<uintptr_t>(area) && a < reinterpret_cast<uintptr_t>(area) + kSmemBytes)
      san_check_shared(area, a, n, true, site);
    return;
  }
  if (san_check_global(a, n, true, site)) return;
  san.atomic_lo = a;
  san.atomic_hi = a + n;
  san.atomic_site = site;
  san.atomic_fiber = g.cur;
}
// on_fault's report of a fault at the address of the atomic running now (see san_atomic); false when the fault
// is not one. Names the __shared__ variable nearest to the address when the block has one.
EMU_SAN_FN bool san_atomic_fault(uintptr_t a, char* buf, size_t cap) {
  if (!san.atomic_hi || san.atomic_fiber != g.cur || a < san.atomic_lo || a >= san.atomic_hi) return false;
  size_t n = san.atomic_hi - san.atomic_lo;
  uintptr_t at = san.atomic_lo, base = reinterpret_cast<uintptr_t>(san_area());
  buf[0] = 0;
  appendf(buf, cap, "memcheck: %s: out-of-bounds atomic of %zu bytes at address 0x%lx: in no buffer, shared memory "
          "or variable (an index far out of bounds", here(), n, (unsigned long)at);
  const SanSlot* near = nullptr;
  for (size_t i = 0; i < san.nslots; ++i) {
    uintptr_t lo = base + san.slots[i].off;
    if (!near || (at > lo ? at - lo : lo - at) < (at > base + near->off ? at - base - near->off : base + near->off - at))
      near = &san.slots[i];
  }
  if (near) {
    long long rel = (long long)(at - (base + near->off));
    appendf(buf, cap, "; the nearest __shared__ variable is '%s' of %zu elements: [%+lld] from it",
            near->name ? near->name : "?", near->size / near->item, rel / (long long)near->item);
  }
  appendf(buf, cap, ") at ");
  append_site(buf, cap, san.atomic_site);
  san.atomic_hi = 0;
  return true;
}

// ---- synccheck --------------------------------------------------------------------------------------------
// A barrier episode: the first thread to arrive fixes the source line; another line in the same episode is
// divergence (threads of one block meeting at different __syncthreads).
EMU_SAN_FN void san_barrier_arrive(Block& b, Fiber* f, const char* file, unsigned line) {
  if (f->san_pend) san_settle(f);
  if (f->san_oob && !g.failed) san_report_oob_index(f);
  if (!(san.flags & SAN_SYNC)) return;
  if (b.bar_arrived == 0) { b.san_bar_file = file; b.san_bar_line = line; b.san_bar_first = f->lin; return; }
  if (line == b.san_bar_line && strcmp(file, b.san_bar_file) == 0) return;
  char msg[1024] = {};
  appendf(msg, sizeof msg, "synccheck: divergent barrier: %s arrives at the __syncthreads at %s:%u while ", here(),
          file, line);
  describe_thread(msg, sizeof msg, b, b.san_bar_first);
  appendf(msg, sizeof msg, " and %u other thread(s) of its block wait at the one at %s:%u", b.bar_arrived - 1,
          b.san_bar_file, b.san_bar_line);
  san_fail(msg);
}
// What the PTX ISA says of exited threads, and so what synccheck does not report:
//   exit:        "As threads exit, barriers waiting on all threads are checked to see if the exiting threads are
//                the only threads that have not yet made it to a barrier{.cta} for all threads in the CTA [...]
//                If the exiting threads are holding up the barrier, the barrier is released."
//   barrier:     "barrier{.cta} instruction causes executing thread to wait for all non-exited threads from its
//                warp [...] and for non-exited threads of all other warps participating in the barrier".
//   shfl.sync, vote.sync, match.sync, bar.warp.sync: the executing thread waits "until all non-exited threads
//                corresponding to membermask have executed" the instruction.
// So a thread may return while the rest of its block meets a later __syncthreads (llm.c's `if (i >= n) return;`),
// and a mask may name lanes that return before or after the collective begins. What the ISA leaves undefined
// is the value such a lane would supply: shfl.sync "results are undefined if a thread sources a register from an
// inactive thread or a thread that is not in membermask" (PTX ISA, shfl.sync). An exited lane is inactive for
// good, so a shuffle whose computed source lane has exited is reported (the emulator would hand back the
// caller's own value; a GPU hands back whatever the register file holds). A discarded undefined value is no
// defect (a warp reduction over a partial warp reads past its last lane and drops what it got), so the read is
// only recorded here; cuda_emu/module.py reruns the launch with the value poisoned (san.poison) and reports the
// read when the launch's results change with it.
EMU_SAN_FN unsigned long long san_shfl_from_exited(const Block& b, const Fiber* p, unsigned src) {
  if (!(san.flags & SAN_SYNC) || g.failed) return p->wval;
  if (san.undef_reads++ == 0) {
    unsigned w = p->lin >> 5;
    char* msg = san.undef_first;
    size_t cap = sizeof san.undef_first;
    msg[0] = 0;
    appendf(msg, cap, "%s at ", p->wname);
    append_site(msg, cap, p->san_wsite);
    appendf(msg, cap, ": block (%u,%u,%u) ", b.idx.x, b.idx.y, b.idx.z);
    describe_thread(msg, cap, b, p->lin);
    appendf(msg, cap, " (lane %u) reads lane %u of its warp, which %s: the value is undefined (PTX ISA, shfl.sync)",
            p->lin & 31u, src, w * 32 + src < b.n ? "has exited" : "does not exist (the block's last warp is partial)");
  }
  return san.poison ? ~p->wval : p->wval;
}

}  // namespace emu

// A completed rTask barrier (vdevice/include/rtask_runtime.cuh) orders shared accesses as __syncthreads does.
inline void emu_sync_point() {
  if (!emu::g.cur) return;
  emu::san_settle(emu::g.cur);  // the arriving thread's own last store belongs before the barrier
  emu::g.cur->blk->san_epoch++;
}

#if defined(EMU_SANITIZE)
// The hooks g++ calls before each access of instrumented code (-fsanitize=kernel-address, outline form).
#define EMU_SAN_HOOK(N)                                                                                        \
  extern "C" __attribute__((no_sanitize_address)) void __asan_load##N##_noabort(void* p) {                                               \
    emu::san_access(reinterpret_cast<uintptr_t>(p), N, false, reinterpret_cast<uintptr_t>(__builtin_return_address(0)), N); \
  }                                                                                                            \
  extern "C" __attribute__((no_sanitize_address)) void __asan_store##N##_noabort(void* p) {                                              \
    emu::san_access(reinterpret_cast<uintptr_t>(p), N, true, reinterpret_cast<uintptr_t>(__builtin_return_address(0)), N); \
  }
EMU_SAN_HOOK(1)
EMU_SAN_HOOK(2)
EMU_SAN_HOOK(4)
EMU_SAN_HOOK(8)
EMU_SAN_HOOK(16)
#undef EMU_SAN_HOOK
extern "C" __attribute__((no_sanitize_address)) void __asan_loadN_noabort(void* p, size_t n) {
  emu::san_access(reinterpret_cast<uintptr_t>(p), n, false, reinterpret_cast<uintptr_t>(__builtin_return_address(0)));
}
extern "C" __attribute__((no_sanitize_address)) void __asan_storeN_noabort(void* p, size_t n) {
  emu::san_access(reinterpret_cast<uintptr_t>(p), n, true, reinterpret_cast<uintptr_t>(__builtin_return_address(0)));
}
// g++ -fsanitize=bounds calls this before an array subscript past the array's bound (local arrays, struct members,
// __shared__ arrays of known size); the access that follows reports it (see san_report_oob_index).
extern "C" __attribute__((no_sanitize_address)) void __ubsan_handle_out_of_bounds(void* d, void* index) {
  emu::san_oob_index(d, reinterpret_cast<uintptr_t>(index));
}
extern "C" __attribute__((no_sanitize_address)) void __ubsan_handle_out_of_bounds_abort(void* d, void* index) {
  emu::san_oob_index(d, reinterpret_cast<uintptr_t>(index));
}
// What instrumented code calls besides the checks (no-ops here: there is no ASan runtime).
extern "C" __attribute__((no_sanitize_address)) void __asan_handle_no_return() {}
extern "C" __attribute__((no_sanitize_address)) void __asan_before_dynamic_init(const char*) {}
extern "C" __attribute__((no_sanitize_address)) void __asan_after_dynamic_init() {}
#endif

// ---- the sanitizer's host API (cuda_emu/module.py) ------------------------------------------------------------
extern "C" __attribute__((visibility("default"), used)) inline int emu_san_available() {
#if defined(EMU_SANITIZE)
  return 1;
#else
  return 0;
#endif
}
// Starts a launch's checks: which sanitizers, and no registered buffers yet.
extern "C" __attribute__((visibility("default"), used)) inline void emu_san_begin(unsigned flags) {
  emu::san.flags = flags;
  emu::san.nbufs = 0;
  if (flags) emu::san.undef_reads = 0;
  if (!emu::san.bufs) emu::san.bufs = static_cast<emu::SanBuf*>(calloc(emu::kMaxSanBufs, sizeof(emu::SanBuf)));
}
// synccheck: how many shuffles of the last launch read an exited lane (the first described in buf), and whether
// the next launches poison the values they read.
extern "C" __attribute__((visibility("default"), used)) inline unsigned emu_san_undefined(char* buf, unsigned cap) {
  if (cap) snprintf(buf, cap, "%s", emu::san.undef_reads ? emu::san.undef_first : "");
  return emu::san.undef_reads;
}
extern "C" __attribute__((visibility("default"), used)) inline void emu_san_poison(int on) { emu::san.poison = on != 0; }
// Registers a device buffer [p, p + n) whose redzones span `red` bytes on each side.
extern "C" __attribute__((visibility("default"), used)) inline int emu_san_add(void* p, unsigned long long n,
                                                                                 unsigned long long red,
                                                                                 unsigned item, const char* name) {
  using namespace emu;
  if (!san.bufs || san.nbufs >= kMaxSanBufs) return 1;
  SanBuf b{reinterpret_cast<uintptr_t>(p), reinterpret_cast<uintptr_t>(p) + n, red, item ? item : 1u, {}};
  snprintf(b.name, sizeof b.name, "%s", name ? name : "?");
  size_t i = san.nbufs++;
  while (i > 0 && san.bufs[i - 1].lo > b.lo) { san.bufs[i] = san.bufs[i - 1]; --i; }
  san.bufs[i] = b;
  return 0;
}
// A guarded region for one buffer: PROT_NONE redzones of `red` bytes (a multiple of the page size) on both
// sides of n bytes rounded up to pages; returns the data's start (page aligned) or null.
extern "C" __attribute__((visibility("default"), used)) inline void* emu_san_alloc(unsigned long long n,
                                                                                    unsigned long long red) {
  size_t data = (n + emu::kPage - 1) / emu::kPage * emu::kPage;
  char* p = static_cast<char*>(emu::map_anon(data + 2 * red));
  if (!p) return nullptr;
  mprotect(p, red, PROT_NONE);
  mprotect(p + red + data, red, PROT_NONE);
  return p + red;
}
extern "C" __attribute__((visibility("default"), used)) inline void emu_san_free(void* p, unsigned long long n,
                                                                                  unsigned long long red) {
  size_t data = (n + emu::kPage - 1) / emu::kPage * emu::kPage;
  munmap(static_cast<char*>(p) - red, data + 2 * red);
}
