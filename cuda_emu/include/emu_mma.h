// emu_mma.h — models of the PTX warp-level matrix instructions legacy kernels issue through inline asm on the GPU
// (mma.sync m16n8k8 tf32 and m16n8k16 bf16, ldmatrix, cp.async with its groups, cvt to tf32 / bf16x2). Part of
// cuda_emu.h (through emu_wmma.h); include that instead. Inline PTX does not compile on the emulator, and the
// emulator compiles device code with __CUDA_ARCH__ defined (as nvcc's device pass does), so a kernel writes each
// instruction as
//     #if defined(__CUDA_ARCH__) && !defined(RT_CPU_EMULATOR)  asm volatile("mma.sync.aligned.m16n8k8 ...");
//     #elif defined(RT_CPU_EMULATOR)  emu::ptx::mma_m16n8k8_tf32(d, a, b, c);
//     #endif
// and these functions give every lane what the instruction gives it on the GPU.
//
// Per-lane fragment layouts are those of the PTX ISA ("Matrix Fragments for mma.m16n8k8 / mma.m16n8k16",
// "Warp-level matrix load instruction: ldmatrix"): with g = lane / 4 and t = lane % 4,
//   m16n8k8 .tf32   A (16 x 8): a0 (g, t), a1 (g + 8, t), a2 (g, t + 4), a3 (g + 8, t + 4)
//                   B (8 x 8):  b0 (k = t, n = g), b1 (k = t + 4, n = g)
//   m16n8k16 .bf16  A (16 x 16), bf16 pairs (low half first): a0 (g, 2t..2t+1), a1 (g + 8, 2t..), a2 (g, 2t+8..),
//                   a3 (g + 8, 2t+8..);  B (16 x 8): b0 (k = 2t..2t+1, n = g), b1 (k = 2t+8..2t+9, n = g)
//   accumulators    C, D (16 x 8, float): c0 (g, 2t), c1 (g, 2t + 1), c2 (g + 8, 2t), c3 (g + 8, 2t + 1)
//   ldmatrix .m8n8 .b16 .xN: lanes 8i .. 8i+7 give the row addresses (16 bytes each, 16-byte aligned) of matrix i;
//                   lane l receives in register i the 32-bit word l % 4 of row l / 4 of matrix i.
// Arithmetic (fixed so tests can reproduce it bit for bit, as emu_wmma.h): D(i, j) = C(i, j), then for k in the
// instruction's k order D(i, j) = fmaf(a(i, k), b(k, j), D(i, j)) in float; a product of two tf32 or bf16 values is
// exact in float, so each step rounds once. A tf32 operand is its 32-bit pattern with the low 13 mantissa bits
// ignored (as the tensor cores read it); cvt.rna.tf32.f32 rounds to nearest, ties away (nvcuda::wmma::__float_to_tf32),
// cvt.rn.bf16x2.f32 rounds each half to nearest even (__float2bfloat16).
//
// The .sync.aligned instructions need all 32 lanes of the warp: a warp with exited or absent lanes stops the launch
// with one line. Lanes exchange their operands through two warp collectives (the first publishes a pointer to each
// lane's registers, the second keeps them unchanged until every lane has read what it needs).
//
// cp.async is asynchronous as on the GPU: a copy is queued by the issuing thread, cp.async.commit_group closes a
// group, and cp.async.wait_group N performs (reads the source, writes shared memory, zero-filling past src-size)
// every group but the N most recent; a kernel that reads its destination before waiting reads what was there
// before, as the hardware may. The source and destination must be aligned to the copy's size (4, 8 or 16 bytes).
#pragma once

#include <unordered_map>
#include <vector>

namespace emu {
namespace ptx {

// The running fiber's warp, every lane present and live; else the launch stops naming the instruction.
inline Fiber* whole_warp(const char* what) {
  Fiber* f = g.cur;
  if (!f) fail("%s is a warp instruction: it runs inside a launch only", what);
  Block& b = *f->blk;
  unsigned w = f->lin >> 5;
  if (w * 32 + 32 > b.n || b.warp_exited[w])
    fail("%s: %s: .sync.aligned needs all 32 lanes of the warp, lanes 0x%08x have exited or do not exist", here(),
         what, w * 32 + 32 > b.n ? ~0u << (b.n - w * 32) : b.warp_exited[w]);
  return f;
}

// Every lane publishes `mine`; use(all) runs with all[l] = lane l's pointer, while no lane can leave the exchange
// (and change what its pointer shows) until every lane has run its use.
template <class T, class Use>
inline void warp_exchange(const char* what, const T* mine, Use&& use) {
  Fiber* f = whole_warp(what);
  const unsigned long long p = reinterpret_cast<uintptr_t>(mine);
  warp_collective(W_SYNC, what, 0xffffffffu, p);
  Fiber* const* lanes = f->blk->th + (f->lin & ~31u);
  const T* all[32];
  for (unsigned l = 0; l < 32; ++l) all[l] = reinterpret_cast<const T*>(static_cast<uintptr_t>(lanes[l]->wval));
  use(all);
  warp_collective(W_SYNC, what, 0xffffffffu, p);  // each lane passes the same value again: wval stays its pointer
}

inline unsigned lane() { return g.cur ? (g.cur->lin & 31u) : 0u; }
// Memory is read and written through typed accesses (never memcpy), so the sanitizers' hooks see each one.
typedef unsigned __attribute__((may_alias)) word_alias;
typedef unsigned char __attribute__((may_alias)) byte_alias;
inline void copy_bytes(char* dst, const char* src, unsigned n) {
  if (n % 4 == 0 && reinterpret_cast<uintptr_t>(dst) % 4 == 0 && reinterpret_cast<uintptr_t>(src) % 4 == 0)
    for (unsigned i = 0; i < n; i += 4) *reinterpret_cast<word_alias*>(dst + i) = *reinterpret_cast<const word_alias*>(src + i);
  else
    for (unsigned i = 0; i < n; ++i) reinterpret_cast<byte_alias*>(dst)[i] = reinterpret_cast<const byte_alias*>(src)[i];
}
inline float tf32_operand(unsigned u) { return bits_f32(u & 0xffffe000u); }
inline float bf16_lo(unsigned u) { return bf16_to_f32((unsigned short)(u & 0xffffu)); }
inline float bf16_hi(unsigned u) { return bf16_to_f32((unsigned short)(u >> 16)); }

struct MmaRegs {
  const unsigned* a;
  const unsigned* b;
};

// D = C + A B over this lane's four accumulators (rows g, g + 8; columns 2t, 2t + 1), k = 0 .. K-1 in order:
// x(lanes, row, k) and y(lanes, k, col) read an operand element from the exchanged registers. d may be c.
template <unsigned K, class X, class Y>
inline void mma_m16n8(const char* what, float* d, const unsigned* a, const unsigned* b, const float* c, X x, Y y) {
  const MmaRegs mine{a, b};
  const unsigned g4 = lane() / 4, t = lane() % 4;
  float out[4];
  warp_exchange(what, &mine, [&](const MmaRegs* const* all) {
    for (unsigned e = 0; e < 4; ++e) {
      const unsigned row = g4 + 8 * (e / 2), col = 2 * t + e % 2;
      float acc = c[e];
      for (unsigned k = 0; k < K; ++k) acc = fmaf(x(all, row, k), y(all, k, col), acc);
      out[e] = acc;
    }
  });
  for (unsigned e = 0; e < 4; ++e) d[e] = out[e];
}

// mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 d, a, b, c: a(row, k) is register 2(k / 4) + row / 8 of lane
// (row % 8)*4 + k % 4, b(k, col) register k / 4 of lane col*4 + k % 4.
inline void mma_m16n8k8_tf32(float* d, const unsigned* a, const unsigned* b, const float* c) {
  mma_m16n8<8>("mma.sync.m16n8k8.tf32", d, a, b, c,
               [](const MmaRegs* const* all, unsigned row, unsigned k) {
                 return tf32_operand(all[(row % 8) * 4 + k % 4]->a[2 * (k / 4) + row / 8]);
               },
               [](const MmaRegs* const* all, unsigned k, unsigned col) {
                 return tf32_operand(all[col * 4 + k % 4]->b[k / 4]);
               });
}

// mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 d, a, b, c: k = 8h + 2q + s is half s of register 2h + row / 8
// of lane (row % 8)*4 + q (a), of register h of lane col*4 + q (b).
inline void mma_m16n8k16_bf16(float* d, const unsigned* a, const unsigned* b, const float* c) {
  auto half = [](unsigned w, unsigned s) { return s ? bf16_hi(w) : bf16_lo(w); };
  mma_m16n8<16>("mma.sync.m16n8k16.bf16", d, a, b, c,
                [&](const MmaRegs* const* all, unsigned row, unsigned k) {
                  return half(all[(row % 8) * 4 + (k % 8) / 2]->a[2 * (k / 8) + row / 8], k % 2);
                },
                [&](const MmaRegs* const* all, unsigned k, unsigned col) {
                  return half(all[col * 4 + (k % 8) / 2]->b[k / 8], k % 2);
                });
}

// ldmatrix.sync.aligned.m8n8.xN.shared.b16 {r0..r(N-1)}, [row]: N = 1, 2 or 4 matrices.
inline void ldmatrix(unsigned* r, int n, const void* row) {
  if (reinterpret_cast<uintptr_t>(row) % 16 && (int)lane() < 8 * n)
    fail("%s: ldmatrix row address %p is not 16-byte aligned", here(), row);
  const unsigned l = lane();
  warp_exchange("ldmatrix.sync.m8n8", static_cast<const char*>(row), [&](const char* const* all) {
    for (int i = 0; i < n; ++i) r[i] = *reinterpret_cast<const word_alias*>(all[8 * i + l / 4] + 4 * (l % 4));
  });
}

// ldmatrix.sync.aligned.m8n8.xN.trans.shared.b16: each matrix transposed: lane l receives in register i the 16-bit
// elements (row 2(l % 4), column l / 4) (low half) and (row 2(l % 4) + 1, column l / 4) (high half) of matrix i.
inline void ldmatrix_trans(unsigned* r, int n, const void* row) {
  if (reinterpret_cast<uintptr_t>(row) % 16 && (int)lane() < 8 * n)
    fail("%s: ldmatrix row address %p is not 16-byte aligned", here(), row);
  const unsigned l = lane();
  warp_exchange("ldmatrix.sync.m8n8.trans", static_cast<const char*>(row), [&](const char* const* all) {
    for (int i = 0; i < n; ++i) {
      unsigned short lo, hi;
      memcpy(&lo, all[8 * i + 2 * (l % 4)] + 2 * (l / 4), 2);
      memcpy(&hi, all[8 * i + 2 * (l % 4) + 1] + 2 * (l / 4), 2);
      r[i] = (unsigned)lo | ((unsigned)hi << 16);
    }
  });
}

// mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32: as the bf16 form, the operands fp16 pairs (low half first).
inline void mma_m16n8k16_f16(float* d, const unsigned* a, const unsigned* b, const float* c) {
  auto half = [](unsigned w, unsigned s) { return f16_to_f32((unsigned short)(s ? w >> 16 : w & 0xffffu)); };
  mma_m16n8<16>("mma.sync.m16n8k16.f16", d, a, b, c,
                [&](const MmaRegs* const* all, unsigned row, unsigned k) {
                  return half(all[(row % 8) * 4 + (k % 8) / 2]->a[2 * (k / 8) + row / 8], k % 2);
                },
                [&](const MmaRegs* const* all, unsigned k, unsigned col) {
                  return half(all[col * 4 + (k % 8) / 2]->b[k / 8], k % 2);
                });
}
// mma.sync.aligned.m16n8k16.row.col.f16.f16.f16.f16 {d0, d1}, a, b, {c0, c1}: fp16 accumulators, c0 = (row g, columns
// 2t, 2t + 1), c1 = (row g + 8, ...), low half first. Modelled as the f32 form on the widened accumulators, each
// result rounded to fp16 once at the end (nearest even): the PTX ISA leaves the internal precision open, so this
// is a model (an estimate of the hardware's rounding), the same on both sides of a verify.
inline void mma_m16n8k16_f16_f16(unsigned* d, const unsigned* a, const unsigned* b, const unsigned* c) {
  float cf[4], df[4];
  for (int i = 0; i < 4; ++i) cf[i] = f16_to_f32((unsigned short)(i % 2 ? c[i / 2] >> 16 : c[i / 2] & 0xffffu));
  mma_m16n8k16_f16(df, a, b, cf);
  for (int i = 0; i < 2; ++i) d[i] = (unsigned)f32_to_f16(df[2 * i]) | ((unsigned)f32_to_f16(df[2 * i + 1]) << 16);
}

// A shared-state-space address as inline PTX takes it ("r": the 32-bit value a kernel keeps of
// __cvta_generic_to_shared, which is a generic pointer on the emulator; or all 64 bits of it): the pointer into
// the running block's shared memory whose low 32 bits those are.
inline void* shared_at(unsigned long long a) {
  char* base = block_smem();
  uintptr_t p = a >> 32 ? (uintptr_t)a : ((uintptr_t)base & ~(uintptr_t)0xffffffffu) | (uintptr_t)a;
  if (a >> 32 == 0 && p < (uintptr_t)base) p += (uintptr_t)1 << 32;
  if (!base || p < (uintptr_t)base || p >= (uintptr_t)base + kSmemBytes)
    fail("%s: shared address 0x%llx of an inline PTX instruction is outside the block's shared memory", here(), a);
  return reinterpret_cast<void*>(p);
}

// ---- cp.async ---------------------------------------------------------------------------------------------
struct CpAsyncCopy {
  char* dst;
  const char* src;
  unsigned size, valid;  // bytes written; bytes read from src (the rest is zero-filled)
};
struct CpAsyncState {
  unsigned long long serial = 0;         // the block run the copies belong to (a later run drops them)
  std::vector<CpAsyncCopy> open;         // issued, not yet committed
  std::vector<std::vector<CpAsyncCopy>> groups;  // committed, oldest first
};
inline std::unordered_map<const Fiber*, CpAsyncState> cp_async_states;

// The calling thread's queue, emptied when it belongs to an earlier block run.
inline CpAsyncState& cp_async_state(const char* what) {
  Fiber* f = g.cur;
  if (!f) fail("%s runs inside a launch only", what);
  CpAsyncState& s = cp_async_states[f];
  if (s.serial != f->blk->san_serial) {
    s.open.clear();
    s.groups.clear();
    s.serial = f->blk->san_serial;
  }
  return s;
}

// cp.async.{ca,cg}.shared.global [dst], [src], size, valid: size 4, 8 or 16 (16 only for .cg), valid <= size.
inline void cp_async(void* dst, const void* src, unsigned size, unsigned valid) {
  if (size != 4 && size != 8 && size != 16) fail("%s: cp.async copies 4, 8 or 16 bytes, not %u", here(), size);
  if (valid > size) fail("%s: cp.async src-size %u exceeds the copy size %u", here(), valid, size);
  if (reinterpret_cast<uintptr_t>(dst) % size || (valid && reinterpret_cast<uintptr_t>(src) % size))
    fail("%s: cp.async of %u bytes from %p to %p: both addresses must be %u-byte aligned", here(), size, src, dst,
         size);
  cp_async_state("cp.async").open.push_back({static_cast<char*>(dst), static_cast<const char*>(src), size, valid});
}
// cp.async.commit_group: the copies issued since the last commit become one group (possibly empty).
inline void cp_async_commit() {
  CpAsyncState& s = cp_async_state("cp.async.commit_group");
  s.groups.push_back(std::move(s.open));
  s.open.clear();
}
// cp.async.wait_group n: every committed group but the n most recent is complete.
inline void cp_async_wait(unsigned n) {
  CpAsyncState& s = cp_async_state("cp.async.wait_group");
  const size_t done = s.groups.size() > n ? s.groups.size() - n : 0;
  for (size_t i = 0; i < done; ++i)
    for (const CpAsyncCopy& c : s.groups[i]) {
      copy_bytes(c.dst, c.src, c.valid);
      for (unsigned i = c.valid; i < c.size; ++i) reinterpret_cast<byte_alias*>(c.dst)[i] = 0;
    }
  s.groups.erase(s.groups.begin(), s.groups.begin() + (std::ptrdiff_t)done);
}

// cvt.rn.bf16x2.f32 d, hi, lo: lo in the low half, hi in the high half.
inline unsigned cvt_bf16x2(float hi, float lo) {
  return ((unsigned)f32_to_bf16(hi) << 16) | (unsigned)f32_to_bf16(lo);
}

}  // namespace ptx
}  // namespace emu
