// tc.cu — legacy tensor-core GEMM and implicit-GEMM convolution kernels (float32 in and out, sm_80+), written as a
// tuned library writes them: mma.sync through inline PTX, fragments through ldmatrix and 64-bit shared loads with no
// register moves, 16-byte cp.async into a 3-4 stage pipeline, per-thread addresses computed once. On the CPU the
// emulator models each instruction (cuda_emu/include/emu_mma.h).
//
// PREC picks the arithmetic of the products (the accumulator is always float):
//   0  3xTF32: each operand x = hi + lo, hi = x with its low 13 mantissa bits cleared (one LOP3; cvt.rna.tf32 costs
//      more), lo = x - hi (exact), which the tensor core reads truncated to tf32; per k8 step
//      acc += a_lo*b_hi, then a_hi*b_lo, then a_hi*b_hi (the a_lo*b_lo term, ~2^-20 relative, is dropped): about
//      2^-19 relative error per product, float32 accuracy for the sums, at three mma.m16n8k8 per step;
//   1  TF32: one product of the operands rounded with cvt.rna.tf32.f32 (10-bit mantissas: ~5e-4 relative error);
//   2  BF16: operands rounded to bfloat16 (cvt.rn.bf16x2.f32) in registers, one mma.m16n8k16 per 16-deep stage
//      (7-bit mantissas: ~4e-3 relative error). Its k order within a stage is 0,4,1,5,2,6,3,7, 8,12,9,13,...: the
//      fragments are the TF32 ones, paired across k and k + 4.
// Block: warps of at most 32 x 32 outputs each (TcShape): 32x32 and 64x64 tiles take 4 warps (128 threads) in a 2 x 2
// arrangement, 128x64 takes 8 (256 threads, 4 x 2): no thread holds more than 32 accumulators, every tile fits 128
// registers (two 256-thread vEUs per SM). K advances BK = 16 at a time through TcShape::STAGES shared-memory stages
// (4 for 64x64; 3 for 128x64, whose four would pass 48 KB, and for 32x32, which batch-1 LSTM plans keep under 16 KB):
// the copies of stage t + STAGES - 1 are in flight while the tensor cores work on stage t, one barrier per stage.
// Shared memory per stage: As [BM][BK + 4] (m, k) and Bs [BK][BN + 8] (k, n), rows 16-byte aligned; the fragment
// loads (tc_load_frags) are free of bank conflicts.
//
// Copies: with VEC bit 0 (A) / bit 1 (B) set, 16-byte cp.async.cg of 4 consecutive k (A) or n (B) elements (the
// binding sets a bit when the strides and sizes allow it; the kernel checks the pointers' alignment at run time and
// otherwise runs the 4-byte copies); else one 4-byte cp.async per element. Zero-filled outside the matrix.
//
// GEMM operands are addressed through element strides exactly as in gemm.cu:
//   A(m,k) = A[z*batch_a + m*sam + k*sak]      B(k,n) = B[z*batch_b + k*sbk + n*sbn]
//   C(m,n) = C[m*scm + n*scn]                  Y(z,m,n) = act(alpha * sum_k A(m,k) B(k,n) + beta * C(m,n))
// (the C term only when bias != 0), Y(z,m,n) = Y[z*ysz + m*ysm + n] (ysz = M*N, ysm = N: row-major [batch, M, N]).
// The convolution is the GEMM Y_g[m][p] = sum_r W_g[m][r] * im2col(X)[r][p] per group g (r = (c, kh, kw),
// p = (n, oh, ow)); the im2col offsets of every r come precomputed from conv_tc_offsets, so the inner loop has no
// integer division (1x1, stride-1, unpadded convolutions with VEC bit 1 read X directly, 16 bytes at a time).
//
// Split-K (splits > 1): blockIdx.z = z * splits + s; the block sums the k of stages [s * stages / splits,
// (s + 1) * stages / splits) (stages = ceil(K / BK), integer division) and writes its raw partial sums to P; the
// block that stores a tile's partial sums last (an arrival counter per tile) then adds the tile's splits in order
// s = 0, 1, ... and applies the epilogue: one launch, GEMM or convolution. Deterministic, bit for bit run to run
// whatever order the blocks run in.

#define TC_BK 16

// The warp arrangement of a BM x BN tile: warps of WM x WN outputs (half the tile, at most 32 x 32), FM x FN
// fragments of 16 x 8 each; the shared-memory pipeline.
template <int BM, int BN>
struct TcShape {
  static constexpr int WM = BM / 2 < 32 ? BM / 2 : 32, WN = BN / 2 < 32 ? BN / 2 : 32;
  static constexpr int WARPS_N = BN / WN, WARPS = (BM / WM) * WARPS_N, THREADS = 32 * WARPS;
  static constexpr int NP = WN / 16, NQ = WM / 8;  // fragments of 16 columns, of 8 rows
  static constexpr int LDA = TC_BK + 4, LDB = BN + 8;  // floats per shared row
  static constexpr int STAGES = BM * BN == 64 * 64 ? 4 : 3;
  static constexpr int A_STAGE = BM * LDA, B_STAGE = TC_BK * LDB;  // floats per stage
  static constexpr int A_FLOATS = STAGES * A_STAGE, B_FLOATS = STAGES * B_STAGE;  // the shared buffers
};

// ---- the instructions: inline PTX on the GPU, the emulator's models on the CPU (cuda_emu/include/emu_mma.h) ------
// (the emulator defines __CUDA_ARCH__ for device code as nvcc's device pass does: RT_CPU_EMULATOR tells it apart)
// A shared-memory address as the instructions take it: 32-bit in the shared window on the GPU.
#if defined(__CUDA_ARCH__) && !defined(RT_CPU_EMULATOR)
typedef unsigned tc_sptr;
#else
typedef size_t tc_sptr;
#endif
__device__ __forceinline__ tc_sptr tc_smem_addr(const void* p) {
#if defined(RT_PARSE)  // the converter's parse declares no __cvta_generic_to_shared; it needs no value here
  return 0;
#else
  return (tc_sptr)__cvta_generic_to_shared(p);
#endif
}

// cp.async of `bytes` (4 or 16) from src to the shared address dst, zero-filled when !valid.
template <int BYTES>
__device__ __forceinline__ void tc_copy(tc_sptr dst, const float* src, bool valid) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800 && !defined(RT_CPU_EMULATOR)
  if (BYTES == 16)
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(valid ? 16 : 0));
  else
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(dst), "l"(src), "r"(valid ? 4 : 0));
#elif defined(RT_CPU_EMULATOR)
  emu::ptx::cp_async(reinterpret_cast<void*>(dst), src, BYTES, valid ? BYTES : 0);
#endif
}
__device__ __forceinline__ void tc_copy_commit() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800 && !defined(RT_CPU_EMULATOR)
  asm volatile("cp.async.commit_group;\n" ::);
#elif defined(RT_CPU_EMULATOR)
  emu::ptx::cp_async_commit();
#endif
}
template <int N>
__device__ __forceinline__ void tc_copy_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800 && !defined(RT_CPU_EMULATOR)
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
#elif defined(RT_CPU_EMULATOR)
  emu::ptx::cp_async_wait(N);
#endif
}

// ldmatrix.x4: the four 8 x 8 b16 matrices whose rows the lanes address (lanes 8i..8i+7: matrix i).
__device__ __forceinline__ void tc_ldsm4(unsigned (&r)[4], tc_sptr row) {
#if defined(__CUDA_ARCH__) && !defined(RT_CPU_EMULATOR)
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(row));
#elif defined(RT_CPU_EMULATOR)
  emu::ptx::ldmatrix(r, 4, reinterpret_cast<const void*>(row));
#endif
}

// Two consecutive 32-bit words of shared memory in one 64-bit load.
__device__ __forceinline__ void tc_lds64(unsigned (&r)[2], tc_sptr p) {
#if defined(__CUDA_ARCH__) && !defined(RT_CPU_EMULATOR)
  asm volatile("ld.shared.v2.u32 {%0, %1}, [%2];\n" : "=r"(r[0]), "=r"(r[1]) : "r"(p));
#elif defined(RT_CPU_EMULATOR)
  for (int i = 0; i < 2; ++i) r[i] = reinterpret_cast<const unsigned*>(p)[i];
#endif
}

// d += a x b on the tensor cores: mma.sync m16n8k8 with tf32 operands.
__device__ __forceinline__ void tc_mma_tf32(float (&d)[4], const unsigned (&a)[4], const unsigned (&b)[2]) {
#if defined(__CUDA_ARCH__) && !defined(RT_CPU_EMULATOR)
  asm volatile("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
               "{%0, %1, %2, %3};\n"
               : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
#elif defined(RT_CPU_EMULATOR)
  emu::ptx::mma_m16n8k8_tf32(d, a, b, d);
#endif
}

// d += a x b on the tensor cores: mma.sync m16n8k16 with bf16 operands.
__device__ __forceinline__ void tc_mma_bf16(float (&d)[4], const unsigned (&a)[4], const unsigned (&b)[2]) {
#if defined(__CUDA_ARCH__) && !defined(RT_CPU_EMULATOR)
  asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
               "{%0, %1, %2, %3};\n"
               : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
#elif defined(RT_CPU_EMULATOR)
  emu::ptx::mma_m16n8k16_bf16(d, a, b, d);
#endif
}

// cvt.rna.tf32.f32: round to nearest, ties away from zero, to a 10-bit mantissa.
__device__ __forceinline__ unsigned tc_to_tf32(unsigned x) {
#if defined(__CUDA_ARCH__) && !defined(RT_CPU_EMULATOR)
  unsigned r;
  asm("cvt.rna.tf32.f32 %0, %1;\n" : "=r"(r) : "f"(__uint_as_float(x)));
  return r;
#elif defined(RT_CPU_EMULATOR)
  return __float_as_uint(nvcuda::wmma::__float_to_tf32(__uint_as_float(x)));
#else
  return x;
#endif
}

// cvt.rn.bf16x2.f32: hi in the upper half, lo in the lower, each rounded to nearest even.
__device__ __forceinline__ unsigned tc_to_bf16x2(unsigned hi, unsigned lo) {
#if defined(__CUDA_ARCH__) && !defined(RT_CPU_EMULATOR)
  unsigned r;
  asm("cvt.rn.bf16x2.f32 %0, %1, %2;\n" : "=r"(r) : "f"(__uint_as_float(hi)), "f"(__uint_as_float(lo)));
  return r;
#elif defined(RT_CPU_EMULATOR)
  return emu::ptx::cvt_bf16x2(__uint_as_float(hi), __uint_as_float(lo));
#else
  return hi ^ lo;
#endif
}

// ---- the warp-level product of one shared-memory stage ------------------------------------------------------------
// The tensor cores compute the transposed tile: D^T (n x m) = B^T A^T, so the operand the mma takes as four
// consecutive registers (its "A", 16 x 8) comes from Bs and the one it takes as two (its "B", 8 x 8) from As; both
// then load without register moves. Lane (g, t) (g = lane / 4, t = lane % 4) holds, for k8 step k0:
//   p[i] (P fragment i: output columns wn + 16i .. +15): words B(k0 + t, n), B(k0 + t, n + 1), B(k0 + t + 4, n),
//        B(k0 + t + 4, n + 1), n = wn + 16i + 2g: two LDS.64, mma rows g and g + 8 are columns n and n + 1;
//   q[j] (Q fragment j: output rows wm + 8j .. +7): words A(m, k0 + t), A(m, k0 + t + 4), m = wm + 8j + g: one
//        ldmatrix.x4 loads two Q fragments (its matrices: rows +0..7 at k0, at k0 + 4, rows +8..15 at k0, k0 + 4).
template <int NP, int NQ>
struct TcFrags {
  unsigned p[NP][4];
  unsigned q[NQ][2];
};

// Loads the k8 step at shared byte addresses a_at (this lane's ldmatrix row) and b_at (this lane's first P word).
template <int NP, int NQ, int LDA, int LDB>
__device__ __forceinline__ void tc_load_frags(TcFrags<NP, NQ>& f, tc_sptr a_at, tc_sptr b_at) {
#pragma unroll
  for (int j = 0; j < NQ; j += 2) {
    unsigned r[4];
    tc_ldsm4(r, a_at + j * 8 * LDA * 4);
    f.q[j][0] = r[0];
    f.q[j][1] = r[1];
    f.q[j + 1][0] = r[2];
    f.q[j + 1][1] = r[3];
  }
#pragma unroll
  for (int i = 0; i < NP; ++i)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      unsigned r[2];
      tc_lds64(r, b_at + (h * 4 * LDB + 16 * i) * 4);
      f.p[i][2 * h] = r[0];
      f.p[i][2 * h + 1] = r[1];
    }
}

// The 3xTF32 split of one operand word: hi = x with the low 13 mantissa bits cleared, lo = x - hi.
__device__ __forceinline__ void tc_split(unsigned x, unsigned& hi, unsigned& lo) {
  hi = x & 0xffffe000u;
  lo = __float_as_uint(__uint_as_float(x) - __uint_as_float(hi));
}

// acc[i][j] += the k8 step f, in PREC 0 (three products, the small terms first: A_lo B_hi, A_hi B_lo, A_hi B_hi)
// or 1 (operands rounded to tf32).
template <int PREC, int NP, int NQ>
__device__ __forceinline__ void tc_step_tf32(float (&acc)[NP][NQ][4], const TcFrags<NP, NQ>& f) {
  unsigned qh[NQ][2], ql[NQ][2];
#pragma unroll
  for (int j = 0; j < NQ; ++j)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      if (PREC == 0) tc_split(f.q[j][h], qh[j][h], ql[j][h]);
      else qh[j][h] = tc_to_tf32(f.q[j][h]);
    }
#pragma unroll
  for (int i = 0; i < NP; ++i) {  // one P fragment (hi, lo) live at a time
    unsigned ph[4], pl[4];
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      if (PREC == 0) tc_split(f.p[i][e], ph[e], pl[e]);
      else ph[e] = tc_to_tf32(f.p[i][e]);
    }
#pragma unroll
    for (int j = 0; j < NQ; ++j) {
      if (PREC == 0) {
        tc_mma_tf32(acc[i][j], ph, ql[j]);
        tc_mma_tf32(acc[i][j], pl, qh[j]);
      }
      tc_mma_tf32(acc[i][j], ph, qh[j]);
    }
  }
}

// acc[i][j] += both k8 steps of a stage as one bf16 m16n8k16 product: bf16 register h of each fragment pairs the
// tf32 words of k8 step h for k and k + 4 (so the product's k order is 0,4,1,5,2,6,3,7, 8,12,...).
template <int NP, int NQ>
__device__ __forceinline__ void tc_step_bf16(float (&acc)[NP][NQ][4], const TcFrags<NP, NQ> (&f)[2]) {
  unsigned q[NQ][2];
#pragma unroll
  for (int j = 0; j < NQ; ++j)
#pragma unroll
    for (int h = 0; h < 2; ++h) q[j][h] = tc_to_bf16x2(f[h].q[j][1], f[h].q[j][0]);
#pragma unroll
  for (int i = 0; i < NP; ++i) {
    unsigned p[4];
#pragma unroll
    for (int h = 0; h < 2; ++h) {  // rows g and g + 8 of step h: tf32 words (k, k + 4) are 0, 2 and 1, 3
      p[2 * h] = tc_to_bf16x2(f[h].p[i][2], f[h].p[i][0]);
      p[2 * h + 1] = tc_to_bf16x2(f[h].p[i][3], f[h].p[i][1]);
    }
#pragma unroll
    for (int j = 0; j < NQ; ++j) tc_mma_bf16(acc[i][j], p, q[j]);
  }
}

// acc += this warp's product of one stage; a_at / b_at: this lane's addresses in the stage.
template <int BM, int BN, int PREC, int NP, int NQ>
__device__ __forceinline__ void tc_stage_product(float (&acc)[NP][NQ][4], tc_sptr a_at, tc_sptr b_at) {
  typedef TcShape<BM, BN> S;
  if (PREC == 2) {
    TcFrags<NP, NQ> f[2];
#pragma unroll
    for (int h = 0; h < 2; ++h) tc_load_frags<NP, NQ, S::LDA, S::LDB>(f[h], a_at + h * 32, b_at + h * 8 * S::LDB * 4);
    tc_step_bf16(acc, f);
  } else {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      TcFrags<NP, NQ> f;
      tc_load_frags<NP, NQ, S::LDA, S::LDB>(f, a_at + h * 32, b_at + h * 8 * S::LDB * 4);
      tc_step_tf32<PREC>(acc, f);
    }
  }
}

// The multistage main loop over `tiles` stages: load() issues the copies of the next stage (0, 1, ... in order) into
// the shared stage at byte addresses a_dst / b_dst. Stage t + STAGES - 1 is issued right after the barrier that ends
// every warp's work on the buffer it reuses (stage t - 1's). Ends with every copy complete and a barrier, so the
// caller may reuse shared memory.
template <int BM, int BN, int PREC, int NP, int NQ, class Loader>
__device__ __forceinline__ void tc_mainloop(float (&acc)[NP][NQ][4], tc_sptr as, tc_sptr bs, tc_sptr a_lane,
                                            tc_sptr b_lane, int tiles, Loader& load) {
  typedef TcShape<BM, BN> S;
  constexpr int A_BYTES = S::A_STAGE * 4, B_BYTES = S::B_STAGE * 4;
#pragma unroll
  for (int i = 0; i < S::NP; ++i)
#pragma unroll
    for (int j = 0; j < S::NQ; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[i][j][e] = 0.0f;
#pragma unroll
  for (int s = 0; s < S::STAGES - 1; ++s) {
    if (s < tiles) load(as + s * A_BYTES, bs + s * B_BYTES);
    tc_copy_commit();
  }
  // Unrolled by STAGES: stage t computes from buffer t % STAGES = u and copies into (u + STAGES - 1) % STAGES, both
  // constants, so the buffers' addresses are immediate offsets (no rotating indices in the loop).
  for (int t0 = 0; t0 < tiles; t0 += S::STAGES) {
#pragma unroll
    for (int u = 0; u < S::STAGES; ++u) {
      const int t = t0 + u;
      if (t >= tiles) break;
      tc_copy_wait<S::STAGES - 2>();
      __syncthreads();
      const int write = (u + S::STAGES - 1) % S::STAGES;
      if (t + S::STAGES - 1 < tiles) load(as + write * A_BYTES, bs + write * B_BYTES);
      tc_copy_commit();
      tc_stage_product<BM, BN, PREC>(acc, a_lane + u * A_BYTES, b_lane + u * B_BYTES);
    }
  }
  tc_copy_wait<0>();
  __syncthreads();
}

// This lane's ldmatrix row (As) and first P word (Bs) in stage 0, as byte offsets: warp tile (wm, wn).
template <int BM, int BN>
__device__ __forceinline__ int tc_a_lane(int lane, int wm) {
  return ((wm + lane % 8 + 8 * (lane / 16)) * TcShape<BM, BN>::LDA + 4 * ((lane / 8) % 2)) * 4;
}
template <int BM, int BN>
__device__ __forceinline__ int tc_b_lane(int lane, int wn) {
  return ((lane % 4) * TcShape<BM, BN>::LDB + wn + 2 * (lane / 4)) * 4;
}

// Hands every accumulator of this warp to out(row, column, value) within the block tile: lane (g, t) holds, of
// fragments (i, j), row wm + 8j + 2t + e % 2 of column wn + 16i + 2g + e / 2 in acc[i][j][e].
template <int NP, int NQ, class Out>
__device__ __forceinline__ void tc_store(const float (&acc)[NP][NQ][4], int lane, int wm, int wn, const Out& out) {
  const int g = lane / 4, t = lane % 4;
#pragma unroll
  for (int j = 0; j < NQ; ++j)
#pragma unroll
    for (int i = 0; i < NP; ++i)
#pragma unroll
      for (int e = 0; e < 4; ++e) out(wm + 8 * j + 2 * t + e % 2, wn + 16 * i + 2 * g + e / 2, acc[i][j][e]);
}

// The k range [k_begin, k_end) of split s of `splits`, in `tiles` stages of BK: the ceil(K / BK) stages shared out
// as evenly as whole stages allow (split s starts at stage floor(s * stages / splits)).
struct TcSplit {
  int k_begin, k_end, tiles;
  __device__ TcSplit(int s, int splits, int K) {
    const int stages = (K + TC_BK - 1) / TC_BK;
    const int first = s * stages / splits, last = (s + 1) * stages / splits;
    k_begin = first * TC_BK;
    k_end = last * TC_BK < K ? last * TC_BK : K;
    tiles = last - first;
  }
};

// Split-K in place: this block's partial sums published (fence) and one arrival on its tile's counter; true in the
// block that arrives last, after an acquire fence: it then adds the tile's splits in split order, reading them past
// L1 (__ldcg: a persistent vEU's L1 may hold lines of an earlier inference), applies the epilogue and rearms the
// counter. `flag`: a word of shared memory no warp reads any more (the finished pipeline's stages).
__device__ __forceinline__ bool tc_split_last(int* flag, int* arrival, int splits) {
  __threadfence();
  __syncthreads();
  if (threadIdx.x == 0) *flag = atomicAdd(arrival, 1) == splits - 1;
  __syncthreads();
  if (!*flag) return false;
  __threadfence();
  return true;
}

// ---- GEMM ------------------------------------------------------------------------------------------------------
// alpha * acc (+ beta * C(m,n) when bias), then the activation act (0 none, 1 Relu, 2 Gelu erf, 3 Gelu tanh), as
// gemm.cu. Run-time flags: the epilogue is outside the inner loop, and fewer instantiations keep code size down.
__device__ __forceinline__ float tc_gemm_epilogue(float acc, const float* C, size_t c_index, float alpha, float beta,
                                                  int bias, int act) {
  float v = alpha * acc;
  if (bias) v += beta * C[c_index];
  if (act == 1) return v < 0.0f ? 0.0f : v;  // not fmaxf: Relu keeps NaN, as ONNX does
  if (act == 2) return 0.5f * v * (1.0f + erff(v * 0.70710678118654752f));
  if (act == 3) return 0.5f * v * (1.0f + tanhf(0.79788456080286536f * (v + 0.044715f * v * v * v)));
  return v;
}

// Copies of the GEMM stages, in order (the split's first stage first). 16-byte copies (WIDE): thread tid copies A
// chunks (row tid/4 + i*THREADS/4, k 4*(tid%4)..+3) and B chunks (k row tid/(BN/4) + i*THREADS/(BN/4), n
// 4*(tid%(BN/4))..+3); 4-byte copies: A elements (row tid/BK + i*THREADS/BK, k tid%BK), B elements (k row tid/BN +
// i*THREADS/BN, n tid%BN). Only the first copy's source (advanced a stage at a time) and destination and constant
// steps are kept (registers: the interpreter keeps what is hoisted out of its dispatch loop across every rTask). A
// copy outside the matrix reads nothing (src-size 0) and zero-fills.
template <int BM, int BN, int WIDE_A, int WIDE_B>
struct TcGemmLoader {
  typedef TcShape<BM, BN> S;
  static constexpr int EA = WIDE_A ? 4 : 1, EB = WIDE_B ? 4 : 1;  // elements per copy
  static constexpr int A_COLS = TC_BK / EA, B_COLS = BN / EB;      // copies per shared row
  static constexpr int A_PER = BM * A_COLS / S::THREADS, B_PER = TC_BK * B_COLS / S::THREADS;
  static constexpr int A_ROWS = S::THREADS / A_COLS, B_ROWS = S::THREADS / B_COLS;  // rows between a thread's copies
  const float* a;  // A(m0 + first row, k of the next stage + first column)
  const float* b;  // B(k of the next stage + first row, n0 + first column)
  int a_step, b_step, a_stage, b_stage;  // elements between a thread's copies, between stages
  int k_left_a, k_left_b;                // k of the split left from the first copy on, at the next stage
  int a_rows, a_dst, b_dst;              // rows of A left from the first copy on; shared byte offsets
  bool b_ok;

  __device__ TcGemmLoader(int tid, const float* a_, const float* b_, int M, int N, int K, int sam, int sak, int sbk,
                          int sbn, int m0, int n0, const TcSplit& split)
      : a_step(A_ROWS * sam), b_step(B_ROWS * sbk), a_stage(TC_BK * sak), b_stage(TC_BK * sbk) {
    const int a_row = tid / A_COLS, a_col = EA * (tid % A_COLS), b_row = tid / B_COLS, b_col = EB * (tid % B_COLS);
    a_rows = M - m0 - a_row;
    k_left_a = split.k_end - split.k_begin - a_col;
    a = a_ + (size_t)(m0 + a_row) * sam + (size_t)(split.k_begin + a_col) * sak;
    b_ok = n0 + b_col < N;
    k_left_b = split.k_end - split.k_begin - b_row;
    b = b_ + (size_t)(split.k_begin + b_row) * sbk + (size_t)(n0 + b_col) * sbn;
    a_dst = (a_row * S::LDA + a_col) * 4;
    b_dst = (b_row * S::LDB + b_col) * 4;
  }
  __device__ void operator()(tc_sptr as, tc_sptr bs) {
    const bool a_k = k_left_a > 0;
#pragma unroll
    for (int i = 0; i < A_PER; ++i)
      tc_copy<4 * EA>(as + a_dst + i * A_ROWS * S::LDA * 4, a + i * a_step, a_k && i * A_ROWS < a_rows);
#pragma unroll
    for (int i = 0; i < B_PER; ++i)
      tc_copy<4 * EB>(bs + b_dst + i * B_ROWS * S::LDB * 4, b + i * b_step, b_ok && i * B_ROWS < k_left_b);
    a += WIDE_A ? TC_BK : a_stage;
    b += b_stage;
    k_left_a -= TC_BK;
    k_left_b -= TC_BK;
  }
};

// The GEMM's outputs: alpha, bias and activation, bounds-checked; or (part != 0) the raw sums into the partial
// buffer y (split-K).
struct TcGemmOut {
  float* y;
  const float* C;
  int M, N, ldy, m0, n0, scm, scn;
  float alpha, beta;
  int bias, act, part;
  __device__ void operator()(int row, int col, float v) const {
    const int m = m0 + row, n = n0 + col;
    if (m >= M || n >= N) return;
    y[(size_t)m * ldy + n] = part ? v : tc_gemm_epilogue(v, C, (size_t)m * scm + (size_t)n * scn, alpha, beta, bias,
                                                       act);
  }
};

// The main loop and the stores of one GEMM block with the copies WIDE_A / WIDE_B.
template <int BM, int BN, int PREC, int WIDE_A, int WIDE_B, int NP, int NQ>
__device__ __forceinline__ void tc_gemm_block(float (&acc)[NP][NQ][4], tc_sptr as, tc_sptr bs, tc_sptr a_lane,
                                              tc_sptr b_lane, const float* A, const float* B, int M, int N, int K,
                                              int sam, int sak, int sbk, int sbn, int m0, int n0,
                                              const TcSplit& split) {
  TcGemmLoader<BM, BN, WIDE_A, WIDE_B> load(threadIdx.x, A, B, M, N, K, sam, sak, sbk, sbn, m0, n0, split);
  tc_mainloop<BM, BN, PREC>(acc, as, bs, a_lane, b_lane, split.tiles, load);
}

// Tensor-core GEMM: a BM x BN tile of Y per block. VEC: bit 0, A(m, k..k+3) may be copied 16 bytes at a time (sak 1,
// sam, K and batch_a multiples of 4); bit 1, B(k, n..n+3) (sbn 1, sbk, N and batch_b multiples of 4).
// block (TcShape<BM, BN>::THREADS), grid (ceil(N/BN), ceil(M/BM), batch * splits); P [splits][batch][M][N] and
// arrivals [batch][ceil(M/BM)][ceil(N/BN)] (zero before the first launch: tc_arrivals_zero; each tile's last block
// sets its counter back to zero) are read when splits > 1 (else Y stands in for both). SPLIT: the instantiation the
// split launches use (splits > 1 needs SPLIT 1); SPLIT 0 compiles without the in-place fixup, whose code after the
// loop costs the loop instructions in ptxas' allocation (the 64x64 tile's 167 become 182).
template <int BM, int BN, int PREC, int VEC, int SPLIT>
__global__ void __launch_bounds__(TcShape<BM, BN>::THREADS)
gemm_tc(const float* __restrict__ A, const float* __restrict__ B, const float* __restrict__ C, float* __restrict__ Y,
        float* __restrict__ P, int* __restrict__ arrivals, int M, int N, int K, int sam, int sak, int sbk, int sbn,
        int scm, int scn, int batch_a, int batch_b, float alpha, float beta, int bias, int act, int splits, int ysz,
        int ysm) {
  typedef TcShape<BM, BN> S;
  __shared__ __align__(16) float As[TcShape<BM, BN>::A_FLOATS];  // spelled out: the converter lifts these
  __shared__ __align__(16) float Bs[TcShape<BM, BN>::B_FLOATS];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int wm = (warp / S::WARPS_N) * S::WM, wn = (warp % S::WARPS_N) * S::WN;
  const int m0 = blockIdx.y * BM, n0 = blockIdx.x * BN;
  const int ways = SPLIT != 0 ? splits : 1;  // SPLIT 0 is never launched split: no division to keep across the loop
  const int z = blockIdx.z / ways, s = blockIdx.z % ways, batch = gridDim.z / ways;
  const float* a = A + (size_t)z * batch_a;
  const float* b = B + (size_t)z * batch_b;
  const tc_sptr as = tc_smem_addr(As), bs = tc_smem_addr(Bs);
  const tc_sptr a_lane = as + tc_a_lane<BM, BN>(lane, wm), b_lane = bs + tc_b_lane<BM, BN>(lane, wn);
  const TcSplit split(s, ways, K);
  float acc[S::NP][S::NQ][4];
  const bool wide = ((VEC & 1) == 0 || ((size_t)a & 15) == 0) && ((VEC & 2) == 0 || ((size_t)b & 15) == 0);
  constexpr int WIDE_A = VEC % 2, WIDE_B = VEC / 2 % 2;
  if (VEC != 0 && wide)
    tc_gemm_block<BM, BN, PREC, WIDE_A, WIDE_B>(acc, as, bs, a_lane, b_lane, a, b, M, N, K, sam, sak, sbk, sbn, m0, n0,
                                                split);
  else
    tc_gemm_block<BM, BN, PREC, 0, 0>(acc, as, bs, a_lane, b_lane, a, b, M, N, K, sam, sak, sbk, sbn, m0, n0, split);
  const bool part = SPLIT != 0 && splits > 1;
  float* y = part ? P + ((size_t)s * batch + z) * M * N : Y + (size_t)z * ysz;
  const TcGemmOut out{y, C, M, N, part ? N : ysm, m0, n0, scm, scn, alpha, beta, bias, act, part};
  tc_store(acc, lane, wm, wn, out);
  if (SPLIT == 0 || !part) return;
  int* arrival = arrivals + ((size_t)z * gridDim.y + blockIdx.y) * gridDim.x + blockIdx.x;
  if (!tc_split_last(reinterpret_cast<int*>(As), arrival, splits)) return;  // the tile's last block goes on
  const size_t total = (size_t)batch * M * N;
  for (int e = threadIdx.x; e < BM * BN; e += S::THREADS) {
    const int m = m0 + e / BN, n = n0 + e % BN;
    if (m >= M || n >= N) continue;
    const size_t at = ((size_t)z * M + m) * N + n;
    float v = __ldcg(P + at);
    for (int t = 1; t < splits; ++t) v += __ldcg(P + t * total + at);
    Y[(size_t)z * ysz + (size_t)m * ysm + n] = tc_gemm_epilogue(v, C, (size_t)m * scm + (size_t)n * scn, alpha, beta,
                                                                bias, act);
  }
  if (threadIdx.x == 0) *arrival = 0;
}

// The split GEMM's arrival counters zeroed, once before its first launch (a setup launch). block any, grid
// ceil(n / blockDim.x).
__global__ void tc_arrivals_zero(int* __restrict__ arrivals, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) arrivals[i] = 0;
}

// ---- implicit-GEMM convolution ---------------------------------------------------------------------------------
// One im2col row r = (c*KH + kh)*KW + kw: where its input element lies relative to the pixel's top-left input
// element X[n, c0, ih0, iw0] (offset = 4 * ((c*H + kh*dh)*W + kw*dw) >= 0, in bytes: the copy's address is then one
// 64-bit add, not a scaled one) and the taps it needs inside the input, as bits: need = bit kw | bit 16 + kh | bit 31
// (bit 31 marks a written entry). A thread holds the same bits for its pixel (TcConvLoader::inside: bit kw when
// column iw0 + kw*dw is inside, bit 16 + kh when row ih0 + kh*dh is, bit 31 when the pixel exists), so the padding
// test is one three-input logic op per copy (tc_tap_in), not two adds and two compares. Rows past R (to a whole
// stage) need bit 15, which no pixel has; an entry never written (zero) fails the test too. The bits hold windows of
// up to TC_TAP_MAX taps a side; a wider one (DeepSpeech2's 41 x 11) runs the VEC bit 2 instantiation, which tests
// the row and column shifts dh, dw against the pixel's top-left corner (rows past R shift by TC_ROW_NONE).
struct __align__(16) TcTap {
  int offset;
  unsigned need;
  int dh, dw;
};
#define TC_TAP_MAX 15  // the most taps per row and per column the bits hold
#define TC_TAP_REAL (1u << 31)
#define TC_TAP_NONE (TC_TAP_REAL | 1u << 15)
#define TC_ROW_NONE (-(1 << 30))

// Whether a pixel with the taps `inside` has the element a table entry `need`s: a written entry all of whose taps
// the pixel has inside.
__device__ __forceinline__ bool tc_tap_in(unsigned need, unsigned inside) {
  return ((~need & TC_TAP_REAL) | (need & ~inside)) == 0;
}

// tab[r] for r < R_pad (R rounded up to a whole stage). block (BLOCK), grid ceil(R_pad / BLOCK).
template <int BLOCK>
__global__ void conv_tc_offsets(TcTap* __restrict__ tab, int R, int R_pad, int H, int W, int KH, int KW, int dh,
                                int dw) {
  const int r = blockIdx.x * BLOCK + threadIdx.x;
  if (r >= R_pad) return;
  const int kw = r % KW, kh = (r / KW) % KH, c = r / (KW * KH);
  const unsigned need = kh < TC_TAP_MAX && kw < TC_TAP_MAX ? TC_TAP_REAL | 1u << kw | 1u << (16 + kh) : TC_TAP_NONE;
  tab[r] = r < R ? TcTap{4 * ((c * H + kh * dh) * W + kw * dw), need, kh * dh, kw * dw}
                 : TcTap{0, TC_TAP_NONE, TC_ROW_NONE, 0};
}

// acc (+ Bias[m] when bias) (+ Z[at] when res: a residual tensor of Y's shape, at Y's index), then Relu when relu,
// as conv.cu (run-time flags, as the GEMM's).
__device__ __forceinline__ float tc_conv_epilogue(float acc, const float* Bias, int m, int bias, const float* Z,
                                                  size_t at, int res, int relu) {
  if (bias) acc += Bias[m];
  if (res) acc += Z[at];
  return relu && acc < 0.0f ? 0.0f : acc;  // not fmaxf: Relu keeps NaN, as ONNX does
}

// The convolution's shape as the copies need it (cg = C/group input and mg = M/group output channels per group,
// R = cg*KH*KW im2col rows).
struct TcConvGeom {
  int N, C, H, W, OH, OW, sh, sw, ph, pw, KH, KW, dh, dw, cg, mg, R;
};

// Copies of the convolution stages, in order (r from the split's first). A = this group's filters W_g [mg, R]
// (row-major), copied as the GEMM's A. B = im2col(X) [R, P]: 4-byte copies (WIDE_B 0): thread tid always copies pixel
// column tid % BN (its image, top-left input row and column computed once) at rows tid / BN + i * (THREADS / BN), the
// row's (channel, kh, kw) offset and needed taps from the table (its padded rows, and a pixel past the end, fail the
// taps test: no other test per element; WINDOW 1: the shifts' bounds test); 16-byte copies (WIDE_B 1: a 1x1,
// stride-1, unpadded convolution,
// OH*OW a multiple of 4): im2col row r is channel r of the group, pixels 4*(tid % (BN/4)) .. +3 lie in one image, at
// rows tid/(BN/4) + i * (THREADS/(BN/4)).
template <int BM, int BN, int WIDE_A, int WIDE_B, int WINDOW>
struct TcConvLoader {
  typedef TcShape<BM, BN> S;
  static constexpr int EA = WIDE_A ? 4 : 1, EB = WIDE_B ? 4 : 1;
  static constexpr int A_COLS = TC_BK / EA, B_COLS = BN / EB;
  static constexpr int A_PER = BM * A_COLS / S::THREADS, B_PER = TC_BK * B_COLS / S::THREADS;
  static constexpr int A_ROWS = S::THREADS / A_COLS, B_ROWS = S::THREADS / B_COLS;
  const float* w;      // W_g(m0 + first row, r of the next stage + first column)
  const float* x;      // X[n, g*cg, ih0, iw0] of this thread's pixel (WIDE_B: X[n, g*cg + r of the next stage, pixel])
  const TcTap* tab;    // the table at r of the next stage + first row
  int R, hw, a_rows, r_left_a, r_left_b, a_dst, b_dst;
  unsigned inside;     // the taps of this thread's pixel inside the input (TcTap::need's bits; 0 past the end)
  int H, W, ih0, iw0;  // (WINDOW) the input's size, the pixel's top-left input row and column (TC_ROW_NONE past the end)
  bool p_ok;

  __device__ TcConvLoader(int tid, const float* X, const float* Wt, const TcTap* tab_, const TcConvGeom& q, int g,
                          int m0, int p0, const TcSplit& split)
      : R(q.R), hw(q.H * q.W), H(q.H), W(q.W) {
    const int a_row = tid / A_COLS, a_col = EA * (tid % A_COLS), b_row = tid / B_COLS, b_col = EB * (tid % B_COLS);
    const int OHW = q.OH * q.OW, p = p0 + b_col, cg = q.cg, mg = q.mg;
    p_ok = p < q.N * OHW;
    a_rows = mg - m0 - a_row;
    r_left_a = split.k_end - split.k_begin - a_col;
    r_left_b = split.k_end - split.k_begin - b_row;
    w = Wt + ((size_t)g * mg + m0 + a_row) * R + split.k_begin + a_col;
    const int n = p / OHW, pix = p % OHW;
    ih0 = WINDOW && !p_ok ? TC_ROW_NONE : (pix / q.OW) * q.sh - q.ph;  // past the end: never inside
    iw0 = (pix % q.OW) * q.sw - q.pw;
    inside = p_ok ? TC_TAP_REAL : 0;
    for (int kh = 0; !WIDE_B && !WINDOW && p_ok && kh < q.KH; ++kh)
      inside |= (unsigned)((unsigned)(ih0 + kh * q.dh) < (unsigned)q.H) << (16 + kh);
    for (int kw = 0; !WIDE_B && !WINDOW && p_ok && kw < q.KW; ++kw)
      inside |= (unsigned)((unsigned)(iw0 + kw * q.dw) < (unsigned)q.W) << kw;
    x = X + ((size_t)n * q.C + (size_t)g * cg) * hw +
        (WIDE_B ? pix + (size_t)(split.k_begin + b_row) * hw : (ptrdiff_t)ih0 * q.W + iw0);
    tab = tab_ + split.k_begin + b_row;
    a_dst = (a_row * S::LDA + a_col) * 4;
    b_dst = (b_row * S::LDB + b_col) * 4;
  }
  __device__ void operator()(tc_sptr as, tc_sptr bs) {
    const bool a_k = r_left_a > 0;
#pragma unroll
    for (int i = 0; i < A_PER; ++i)
      tc_copy<4 * EA>(as + a_dst + i * A_ROWS * S::LDA * 4, w + i * A_ROWS * R, a_k && i * A_ROWS < a_rows);
#pragma unroll
    for (int i = 0; i < B_PER; ++i) {
      const int r = i * B_ROWS;  // relative to this thread's first row of the stage
      if (WIDE_B) {
        tc_copy<16>(bs + b_dst + r * S::LDB * 4, x + (size_t)r * hw, p_ok && r < r_left_b);
      } else {
        const TcTap o = tab[r];
        const bool in = WINDOW ? (unsigned)(ih0 + o.dh) < (unsigned)H && (unsigned)(iw0 + o.dw) < (unsigned)W
                               : tc_tap_in(o.need, inside);
        const char* at = reinterpret_cast<const char*>(x) + (unsigned)o.offset;
        tc_copy<4>(bs + b_dst + r * S::LDB * 4, reinterpret_cast<const float*>(at), in);
      }
    }
    w += TC_BK;
    x += WIDE_B ? (size_t)TC_BK * hw : 0;
    tab += TC_BK;
    r_left_a -= TC_BK;
    r_left_b -= TC_BK;
  }
};

// The convolution's outputs: bias, residual and Relu, bounds-checked; output channel g*mg + m of pixel
// p = (n, oh, ow); or (part != 0) the raw sums into the partial buffer y [M][N*OH*OW] (split-K).
struct TcConvOut {
  float* y;
  const float* Bias;
  const float* Z;
  int M, OHW, P, mg, m0, p0, g, bias, res, relu, part;
  __device__ void operator()(int row, int col, float v) const {
    const int p = p0 + col, m = m0 + row;
    if (p >= P || m >= mg) return;
    const int mo = g * mg + m;
    if (part) {
      y[(size_t)mo * P + p] = v;
    } else {
      const int n = p / OHW;
      const size_t at = ((size_t)n * M + mo) * OHW + (p - n * OHW);
      y[at] = tc_conv_epilogue(v, Bias, mo, bias, Z, at, res, relu);
    }
  }
};

// The main loop of one convolution block with the copies WIDE_A / WIDE_B.
template <int BM, int BN, int PREC, int WIDE_A, int WIDE_B, int WINDOW, int NP, int NQ>
__device__ __forceinline__ void tc_conv_block(float (&acc)[NP][NQ][4], tc_sptr as, tc_sptr bs, tc_sptr a_lane,
                                              tc_sptr b_lane, const float* X, const float* Wt, const TcTap* tab,
                                              const TcConvGeom& q, int g, int m0, int p0, const TcSplit& split) {
  TcConvLoader<BM, BN, WIDE_A, WIDE_B, WINDOW> load(threadIdx.x, X, Wt, tab, q, g, m0, p0, split);
  tc_mainloop<BM, BN, PREC>(acc, as, bs, a_lane, b_lane, split.tiles, load);
}

// X [N, C, H, W], Wt [M, C/group, KH, KW], Bias [M] (read when bias), Y [N, M, OH, OW] = conv
// (strides sh, sw, pads ph, pw, dilations dh, dw) + bias (+ Z, a residual [N, M, OH, OW] read when res), then Relu when
// relu;
// tab (R = C/group*KH*KW entries) from conv_tc_offsets (not read with VEC bit 1). VEC: bit 0, W rows may be copied 16
// bytes at a time (R a multiple of 4); bit 1, X rows (a 1x1, stride-1, unpadded convolution, H*W a multiple of 4);
// bit 2, a window wider than TC_TAP_MAX taps a side (the padding tested by the table's shifts, not its bits).
// block (TcShape<BM, BN>::THREADS), grid (ceil(N*OH*OW / BN), ceil((M/group) / BM), group * splits);
// P [splits][M][N*OH*OW] and arrivals [group][ceil((M/group) / BM)][ceil(N*OH*OW / BN)] (zero before the first
// launch: tc_arrivals_zero) are read when splits > 1, which needs SPLIT 1: the instantiation with the in-place fixup
// (SPLIT 0 compiles without it: its loop keeps ptxas' allocation of the unsplit kernel).
template <int BM, int BN, int PREC, int VEC, int SPLIT>
__global__ void __launch_bounds__(TcShape<BM, BN>::THREADS)
conv_tc(const float* __restrict__ X, const float* __restrict__ Wt, const float* __restrict__ Bias,
        float* __restrict__ Y, float* __restrict__ P, int* __restrict__ arrivals, const TcTap* __restrict__ tab, int N,
        int C, int H, int W, int M,
        int OH, int OW, int sh, int sw, int ph, int pw, int KH, int KW, int dh, int dw, int R, int group, int bias,
        int relu, int splits, const float* __restrict__ Z, int res) {
  typedef TcShape<BM, BN> S;
  __shared__ __align__(16) float As[TcShape<BM, BN>::A_FLOATS];  // spelled out: the converter lifts these
  __shared__ __align__(16) float Bs[TcShape<BM, BN>::B_FLOATS];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int wm = (warp / S::WARPS_N) * S::WM, wn = (warp % S::WARPS_N) * S::WN;
  // (divided by splits even in SPLIT 0, unlike gemm_tc: without the division ptxas gives the unsplit 32x32 loops
  // 309 and 249 instructions instead of 283 and 229, gathered and 1x1; nvcc 13.0)
  const int g = blockIdx.z / splits, s = blockIdx.z % splits, cg = C / group, mg = M / group;
  const int m0 = blockIdx.y * BM, p0 = blockIdx.x * BN;
  const tc_sptr as = tc_smem_addr(As), bs = tc_smem_addr(Bs);
  const tc_sptr a_lane = as + tc_a_lane<BM, BN>(lane, wm), b_lane = bs + tc_b_lane<BM, BN>(lane, wn);
  const TcSplit split(s, splits, R);
  const TcConvGeom q{N, C, H, W, OH, OW, sh, sw, ph, pw, KH, KW, dh, dw, cg, mg, R};
  float acc[S::NP][S::NQ][4];
  const bool wide = ((VEC & 1) == 0 || ((size_t)Wt & 15) == 0) && ((VEC & 2) == 0 || ((size_t)X & 15) == 0);
  constexpr int WIDE_A = VEC % 2, WIDE_B = VEC / 2 % 2, WINDOW = VEC / 4 % 2;
  if ((VEC & 3) != 0 && wide)
    tc_conv_block<BM, BN, PREC, WIDE_A, WIDE_B, WINDOW>(acc, as, bs, a_lane, b_lane, X, Wt, tab, q, g, m0, p0, split);
  else
    tc_conv_block<BM, BN, PREC, 0, 0, WINDOW>(acc, as, bs, a_lane, b_lane, X, Wt, tab, q, g, m0, p0, split);
  const bool part = splits > 1;
  const TcConvOut out{part ? P + (size_t)s * M * N * OH * OW : Y, Bias, Z, M, OH * OW, N * OH * OW, mg, m0, p0, g,
                      bias, res, relu, part};
  tc_store(acc, lane, wm, wn, out);
  if (SPLIT == 0 || !part) return;
  const int OHW = OH * OW, PP = N * OHW;
  // the tile's last block adds the splits, then bias, residual (once, after the sum) and Relu
  int* arrival = arrivals + ((size_t)g * gridDim.y + blockIdx.y) * gridDim.x + blockIdx.x;
  if (!tc_split_last(reinterpret_cast<int*>(As), arrival, splits)) return;
  const size_t total = (size_t)M * PP;
  for (int e = threadIdx.x; e < BM * BN; e += S::THREADS) {
    const int m = m0 + e / BN, p = p0 + e % BN;
    if (m >= mg || p >= PP) continue;
    const int mo = g * mg + m, n = p / OHW;
    const size_t at_p = (size_t)mo * PP + p, at = ((size_t)n * M + mo) * OHW + (p - n * OHW);
    float v = __ldcg(P + at_p);
    for (int t = 1; t < splits; ++t) v += __ldcg(P + t * total + at_p);
    Y[at] = tc_conv_epilogue(v, Bias, mo, bias, Z, at, res, relu);
  }
  if (threadIdx.x == 0) *arrival = 0;
}
