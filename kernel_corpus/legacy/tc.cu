// tc.cu — legacy tensor-core GEMM and implicit-GEMM convolution kernels (float32 in and out, nvcuda::wmma, sm_80+).
//
// PREC picks the arithmetic of the products (the accumulator is always float):
//   0  3xTF32: each operand x = hi + lo, hi = x with its low 13 mantissa bits cleared (one LOP3; cvt.rna.tf32 is
//      a dozen integer instructions on sm_90), lo = x - hi (exact), which the tensor core reads truncated to tf32;
//      acc += a_lo*b_hi + a_hi*b_lo + a_hi*b_hi (the a_lo*b_lo term, ~2^-20 relative, is dropped): about 2^-19
//      relative error per product, float32 accuracy for the sums, at three tensor-core products per step;
//   1  TF32: one product of the operands rounded with __float_to_tf32 (10-bit mantissas: ~5e-4 relative error);
//   2  BF16: each float stage is rounded to bfloat16 in shared memory (7-bit mantissas: ~4e-3 relative error)
//      and multiplied as m16n16k16 fragments.
// Block: warps of at most 32 x 32 outputs each (TcShape): 32x32 and 64x64 tiles take 4 warps (128 threads) in a
// 2 x 2 arrangement, 128x64 takes 8 (256 threads, 4 x 2), so no warp holds more than 2 x 2 accumulator fragments
// and every tile fits 128 registers per thread (two 256-thread vEUs per SM) without spilling. K advances BK = 16 at
// a time through two shared-memory stages: the next stage is copied with cp.async (zero-filled outside the matrix)
// while the tensor cores work on the current one.
//
// GEMM operands are addressed through element strides exactly as in gemm.cu:
//   A(m,k) = A[z*batch_a + m*sam + k*sak]      B(k,n) = B[z*batch_b + k*sbk + n*sbn]
//   C(m,n) = C[m*scm + n*scn]                  Y[z][m][n] = act(alpha * sum_k A(m,k) B(k,n) + beta * C(m,n))
// (the C term only when bias != 0).
// The convolution is the GEMM Y_g[m][p] = sum_r W_g[m][r] * im2col(X)[r][p] per group g (r = (c, kh, kw),
// p = (n, oh, ow)); the im2col offsets of every r come precomputed from conv_tc_offsets, so the inner loop has no
// integer division.
#include <mma.h>

#define TC_BK 16
#define TC_PAD 4  // floats of padding per shared-memory row: rows stay 16-byte aligned, fragments 32-byte aligned
#define TC_HPAD 8  // bfloat16 padding per row of the BF16 stage (ldm a multiple of 8, fragments 32-byte aligned)

// The warp arrangement of a BM x BN tile: warps of WM x WN outputs (half the tile, at most 32 x 32), FM x FN
// fragments of 16 x 16 each.
template <int BM, int BN>
struct TcShape {
  static constexpr int WM = BM / 2 < 32 ? BM / 2 : 32, WN = BN / 2 < 32 ? BN / 2 : 32;
  static constexpr int WARPS_N = BN / WN, WARPS = (BM / WM) * WARPS_N, THREADS = 32 * WARPS;
  static constexpr int FM = WM / 16, FN = WN / 16;
};

// The accumulator fragment of a precision: k = 8 for tf32 operands, 16 for bf16.
template <int PREC>
struct TcAcc {
  typedef nvcuda::wmma::fragment<nvcuda::wmma::accumulator, 16, 16, PREC == 2 ? 16 : 8, float> type;
};

// ---- cp.async (sm_80+) with a plain-copy fallback (host pass, the CPU emulator, the parser) ---------------------
// dst[0] = valid ? src[0] : 0, asynchronously on the GPU; tc_copy_commit() closes a group of copies,
// tc_copy_wait<N>() waits until at most N groups are still in flight.
__device__ __forceinline__ void tc_copy4(float* dst, const float* src, bool valid) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
#if defined(RT_PARSE)  // the converter's parse declares no __cvta_generic_to_shared; it needs no value here
  const unsigned s = 0;
#else
  const unsigned s = (unsigned)__cvta_generic_to_shared(dst);
#endif
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(s), "l"(src), "r"(valid ? 4 : 0));
#else
  *dst = valid ? *src : 0.0f;
#endif
}
__device__ __forceinline__ void tc_copy_commit() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("cp.async.commit_group;\n" ::);
#endif
}
template <int N>
__device__ __forceinline__ void tc_copy_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
#endif
}

// ---- the warp-level product of one shared-memory stage ------------------------------------------------------------
// Splits a loaded operand fragment for PREC (see above): hi and, for 3xTF32, lo.
template <int PREC, class Frag>
__device__ __forceinline__ void tc_split(Frag& hi, Frag& lo) {
#pragma unroll
  for (int t = 0; t < hi.num_elements; ++t) {
    const float v = hi.x[t];
    if (PREC == 0) {
      hi.x[t] = __uint_as_float(__float_as_uint(v) & 0xffffe000u);
      lo.x[t] = v - hi.x[t];
    } else {
      hi.x[t] = nvcuda::wmma::__float_to_tf32(v);
    }
  }
}

// acc[FM][FN] += As[wm.., 0..BK) x Bs[0..BK), wn..) for this warp's fragments; As is BM x (BK+PAD) row-major (m, k),
// Bs is BK x (BN+PAD) row-major (k, n).
template <int FM, int FN, int PREC, class Acc>
__device__ __forceinline__ void tc_stage_product(Acc (&acc)[FM][FN], const float* As, int lda, const float* Bs,
                                                 int ldb) {
  using namespace nvcuda;
#pragma unroll
  for (int kk = 0; kk < TC_BK; kk += 8) {
    wmma::fragment<wmma::matrix_b, 16, 16, 8, wmma::precision::tf32, wmma::row_major> b_hi[FN], b_lo[FN];
#pragma unroll
    for (int j = 0; j < FN; ++j) {
      wmma::load_matrix_sync(b_hi[j], Bs + kk * ldb + j * 16, ldb);
      tc_split<PREC>(b_hi[j], b_lo[j]);
    }
#pragma unroll
    for (int i = 0; i < FM; ++i) {  // one A fragment (hi, lo) live at a time: fewer registers, same products
      wmma::fragment<wmma::matrix_a, 16, 16, 8, wmma::precision::tf32, wmma::row_major> a_hi, a_lo;
      wmma::load_matrix_sync(a_hi, As + i * 16 * lda + kk, lda);
      tc_split<PREC>(a_hi, a_lo);
#pragma unroll
      for (int j = 0; j < FN; ++j) {
        if (PREC == 0) {  // the small terms first, the large one last
          wmma::mma_sync(acc[i][j], a_lo, b_hi[j], acc[i][j]);
          wmma::mma_sync(acc[i][j], a_hi, b_lo[j], acc[i][j]);
        }
        wmma::mma_sync(acc[i][j], a_hi, b_hi[j], acc[i][j]);
      }
    }
  }
}

// The BF16 product of one stage: all threads round the float stage into Ah (BM x (BK+HPAD)) and Bh (BK x (BN+HPAD)),
// then each warp multiplies its fragments with k = 16. Ends with a barrier.
template <int BM, int BN, int FM, int FN, class Acc>
__device__ __forceinline__ void tc_stage_product_bf16(Acc (&acc)[FM][FN], const float* As, const float* Bs,
                                                      __nv_bfloat16* Ah, __nv_bfloat16* Bh, int wm, int wn) {
  using namespace nvcuda;
  constexpr int LDA = TC_BK + TC_PAD, LDB = BN + TC_PAD, LHA = TC_BK + TC_HPAD, LHB = BN + TC_HPAD;
  constexpr int THREADS = TcShape<BM, BN>::THREADS;
  for (int e = threadIdx.x; e < BM * TC_BK; e += THREADS)
    Ah[e / TC_BK * LHA + e % TC_BK] = __float2bfloat16(As[e / TC_BK * LDA + e % TC_BK]);
  for (int e = threadIdx.x; e < TC_BK * BN; e += THREADS)
    Bh[e / BN * LHB + e % BN] = __float2bfloat16(Bs[e / BN * LDB + e % BN]);
  __syncthreads();
  wmma::fragment<wmma::matrix_a, 16, 16, 16, __nv_bfloat16, wmma::row_major> a[FM];
  wmma::fragment<wmma::matrix_b, 16, 16, 16, __nv_bfloat16, wmma::row_major> b[FN];
#pragma unroll
  for (int i = 0; i < FM; ++i) wmma::load_matrix_sync(a[i], Ah + (wm + i * 16) * LHA, LHA);
#pragma unroll
  for (int j = 0; j < FN; ++j) wmma::load_matrix_sync(b[j], Bh + wn + j * 16, LHB);
#pragma unroll
  for (int i = 0; i < FM; ++i)
#pragma unroll
    for (int j = 0; j < FN; ++j) wmma::mma_sync(acc[i][j], a[i], b[j], acc[i][j]);
  __syncthreads();
}

// The double-buffered main loop: stage t + 1 is copied (load(t + 1, its As, its Bs) issues the copies) while the
// warp multiplies stage t. Ends with every copy complete and a barrier, so the caller may reuse shared memory.
// Ah and Bh are the BF16 stage (PREC 2 only).
template <int BM, int BN, int FM, int FN, int PREC, class Acc, class Loader>
__device__ __forceinline__ void tc_mainloop(Acc (&acc)[FM][FN], float (*As)[BM * (TC_BK + TC_PAD)],
                                            float (*Bs)[TC_BK * (BN + TC_PAD)], __nv_bfloat16* Ah,
                                            __nv_bfloat16* Bh, int tiles, int wm, int wn, const Loader& load) {
  constexpr int LDA = TC_BK + TC_PAD, LDB = BN + TC_PAD;
#pragma unroll
  for (int i = 0; i < FM; ++i)
#pragma unroll
    for (int j = 0; j < FN; ++j) nvcuda::wmma::fill_fragment(acc[i][j], 0.0f);
  if (tiles > 0) load(0, As[0], Bs[0]);
  tc_copy_commit();
  for (int t = 0; t < tiles; ++t) {
    if (t + 1 < tiles) {
      load(t + 1, As[(t + 1) & 1], Bs[(t + 1) & 1]);
      tc_copy_commit();
      tc_copy_wait<1>();
    } else {
      tc_copy_wait<0>();
    }
    __syncthreads();
    if constexpr (PREC == 2)
      tc_stage_product_bf16<BM, BN>(acc, As[t & 1], Bs[t & 1], Ah, Bh, wm, wn);
    else
      tc_stage_product<FM, FN, PREC>(acc, As[t & 1] + wm * LDA, LDA, Bs[t & 1] + wn, LDB);
    __syncthreads();
  }
}

// Hands every output of this warp's fragments to out(row, column) within the block tile: each fragment goes through
// the warp's 16 x 16 staging tile `stage` (16 x 20 floats), then lane l writes rows l/16, l/16 + 2, ... of column
// l % 16.
template <int FM, int FN, class Acc, class Out>
__device__ __forceinline__ void tc_store(const Acc (&acc)[FM][FN], float* stage, int wm, int wn, const Out& out) {
  const int lane = threadIdx.x % 32;
#pragma unroll
  for (int i = 0; i < FM; ++i)
#pragma unroll
    for (int j = 0; j < FN; ++j) {
      nvcuda::wmma::store_matrix_sync(stage, acc[i][j], 20, nvcuda::wmma::mem_row_major);
      __syncwarp();
      out(wm + i * 16, wn + j * 16 + lane % 16, stage + lane % 16, lane / 16);
      __syncwarp();
    }
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

// Copies of one GEMM stage: thread tid copies elements e = tid + i*THREADS of the A tile, row e / BK = tid / BK +
// i*THREADS/BK, column tid % BK, and of the B tile, row tid / BN + i*THREADS/BN, column tid % BN. Only the first
// row's offset and the row stride are kept (registers: the offsets of later rows are one multiply-add each).
template <int BM, int BN>
struct TcGemmLoader {
  static constexpr int THREADS = TcShape<BM, BN>::THREADS;
  static constexpr int A_PER = BM * TC_BK / THREADS, B_PER = TC_BK * BN / THREADS;
  static constexpr int A_ROWS = THREADS / TC_BK, B_ROWS = THREADS / BN;  // rows between a thread's copies
  const float* a;  // A(m0 + tid / BK, tid % BK)
  const float* b;  // B(tid / BN, n0 + tid % BN)
  int K, sak, sbk, a_step, b_step, a_rows, a_col, b_row;  // a_rows: rows of A left from this thread's first
  bool b_ok;

  __device__ TcGemmLoader(int tid, const float* a_, const float* b_, int M, int N, int K_, int sam, int sak_, int sbk_,
                          int sbn, int m0, int n0)
      : K(K_), sak(sak_), sbk(sbk_), a_step(A_ROWS * sam), b_step(B_ROWS * sbk_) {
    a_rows = M - m0 - tid / TC_BK;
    a_col = tid % TC_BK;
    a = a_rows > 0 ? a_ + (size_t)(m0 + tid / TC_BK) * sam + (size_t)a_col * sak : a_;
    b_row = tid / BN;
    b_ok = n0 + tid % BN < N;
    b = b_ok ? b_ + (size_t)b_row * sbk + (size_t)(n0 + tid % BN) * sbn : b_;
  }
  // The destinations: this thread's first element of each tile, then constant steps of A_ROWS / B_ROWS rows (one
  // live address per tile rather than one per copy, which the interpreter would keep across every rTask).
  __device__ void operator()(int t, float* as, float* bs) const {
    const int k0 = t * TC_BK;
    const unsigned tid = threadIdx.x;
    const bool a_k = k0 + a_col < K;
    float* as0 = as + tid / TC_BK * (TC_BK + TC_PAD) + a_col;
    float* bs0 = bs + b_row * (BN + TC_PAD) + tid % BN;
#pragma unroll
    for (int i = 0; i < A_PER; ++i) {
      const bool ok = a_k && i * A_ROWS < a_rows;
      tc_copy4(as0 + i * A_ROWS * (TC_BK + TC_PAD), ok ? a + (i * a_step + (size_t)k0 * sak) : a, ok);
    }
#pragma unroll
    for (int i = 0; i < B_PER; ++i) {
      const bool ok = b_ok && k0 + b_row + i * B_ROWS < K;
      tc_copy4(bs0 + i * B_ROWS * (BN + TC_PAD), ok ? b + (i * b_step + (size_t)k0 * sbk) : b, ok);
    }
  }
};

// The GEMM's outputs: alpha, bias and activation, bounds-checked.
struct TcGemmOut {
  float* y;
  const float* C;
  int M, N, m0, n0, scm, scn;
  float alpha, beta;
  int bias, act;
  // rows first, first + 2, ... of column col of a fragment whose first row is row0; v[r*20] is row r.
  __device__ void operator()(int row0, int col, const float* v, int first) const {
    const int n = n0 + col;
    if (n >= N) return;
    for (int r = first; r < 16; r += 2) {
      const int m = m0 + row0 + r;
      if (m < M) y[(size_t)m * N + n] = tc_gemm_epilogue(v[r * 20], C, (size_t)m * scm + (size_t)n * scn, alpha, beta,
                                                          bias, act);
    }
  }
};

// Tensor-core GEMM: a BM x BN tile of Y per block. block (TcShape<BM, BN>::THREADS), grid (ceil(N/BN), ceil(M/BM), batch).
template <int BM, int BN, int PREC>
__global__ void __launch_bounds__(TcShape<BM, BN>::THREADS)
gemm_tc(const float* __restrict__ A, const float* __restrict__ B, const float* __restrict__ C, float* __restrict__ Y,
        int M, int N, int K, int sam, int sak, int sbk, int sbn, int scm, int scn, int batch_a, int batch_b,
        float alpha, float beta, int bias, int act) {
  typedef TcShape<BM, BN> S;
  constexpr int FM = S::FM, FN = S::FN;
  __shared__ __align__(32) float As[2][BM * (TC_BK + TC_PAD)];
  __shared__ __align__(32) float Bs[2][TC_BK * (BN + TC_PAD)];
  __shared__ __align__(32) float Cs[TcShape<BM, BN>::WARPS][16 * 20];
  __shared__ __align__(32) __nv_bfloat16 Ah[PREC == 2 ? BM * (TC_BK + TC_HPAD) : 16];
  __shared__ __align__(32) __nv_bfloat16 Bh[PREC == 2 ? TC_BK * (BN + TC_HPAD) : 16];
  const int warp = threadIdx.x / 32, wm = (warp / S::WARPS_N) * S::WM, wn = (warp % S::WARPS_N) * S::WN;
  const int m0 = blockIdx.y * BM, n0 = blockIdx.x * BN;
  const TcGemmLoader<BM, BN> load(threadIdx.x, A + (size_t)blockIdx.z * batch_a, B + (size_t)blockIdx.z * batch_b, M, N,
                                  K, sam, sak, sbk, sbn, m0, n0);
  typename TcAcc<PREC>::type acc[FM][FN];
  tc_mainloop<BM, BN, FM, FN, PREC>(acc, As, Bs, Ah, Bh, (K + TC_BK - 1) / TC_BK, wm, wn, load);
  const TcGemmOut out{Y + (size_t)blockIdx.z * M * N, C, M, N, m0, n0, scm, scn, alpha, beta, bias, act};
  tc_store(acc, Cs[warp], wm, wn, out);
}

// ---- implicit-GEMM convolution ---------------------------------------------------------------------------------
// One im2col row r = (c*KH + kh)*KW + kw: where its input element lies relative to the pixel's top-left input
// element X[n, c0, ih0, iw0] (offset = (c*H + kh*dh)*W + kw*dw) and its row and column shifts (for the padding).
struct __align__(16) TcTap {
  int offset, dh, dw, unused;
};

// tab[r] for r < R. block (BLOCK), grid ceil(R / BLOCK).
template <int BLOCK>
__global__ void conv_tc_offsets(TcTap* __restrict__ tab, int R, int H, int W, int KH, int KW, int dh, int dw) {
  const int r = blockIdx.x * BLOCK + threadIdx.x;
  if (r >= R) return;
  const int kw = r % KW, kh = (r / KW) % KH, c = r / (KW * KH);
  tab[r] = TcTap{(c * H + kh * dh) * W + kw * dw, kh * dh, kw * dw, 0};
}

// acc (+ Bias[m] when bias), then Relu when relu, as conv.cu (run-time flags, as the GEMM's).
__device__ __forceinline__ float tc_conv_epilogue(float acc, const float* Bias, int m, int bias, int relu) {
  if (bias) acc += Bias[m];
  return relu && acc < 0.0f ? 0.0f : acc;  // not fmaxf: Relu keeps NaN, as ONNX does
}

// Copies of one convolution stage. A = this group's filters W_g [mg, R] (row-major), copied as the GEMM's A (first
// row's address and the row count left kept); B = im2col(X) [R, P]: thread tid always copies pixel column tid % BN
// (its image, top-left input row and column computed once) at rows tid / BN + i * (THREADS / BN); the row's
// (channel, kh, kw) offsets come from the table.
template <int BM, int BN>
struct TcConvLoader {
  static constexpr int THREADS = TcShape<BM, BN>::THREADS;
  static constexpr int A_PER = BM * TC_BK / THREADS, B_PER = TC_BK * BN / THREADS;
  static constexpr int A_ROWS = THREADS / TC_BK, B_STEP = THREADS / BN;
  const float* w;      // W_g(m0 + tid / BK, tid % BK)
  const float* x;      // X[n, g*cg, 0, 0] of this thread's pixel
  const TcTap* tab;
  int R, H, W, ih0, iw0, a_rows, a_col;
  bool p_ok;

  __device__ TcConvLoader(int tid, const float* X, const float* Wt, const TcTap* tab_, int N, int C, int H_, int W_,
                          int OH, int OW, int sh, int sw, int ph, int pw, int cg, int mg, int R_, int g, int m0, int p0)
      : tab(tab_), R(R_), H(H_), W(W_) {
    const int OHW = OH * OW, p = p0 + tid % BN;
    p_ok = p < N * OHW;
    a_rows = mg - m0 - tid / TC_BK;
    a_col = tid % TC_BK;
    w = Wt + (size_t)g * mg * R + (a_rows > 0 ? (size_t)(m0 + tid / TC_BK) * R + a_col : 0);
    const int n = p / OHW, pix = p % OHW;
    ih0 = (pix / OW) * sh - ph;
    iw0 = (pix % OW) * sw - pw;
    x = X + ((size_t)n * C + (size_t)g * cg) * H * W;
  }
  __device__ void operator()(int t, float* as, float* bs) const {  // destinations as the GEMM loader's
    const int k0 = t * TC_BK;
    const unsigned tid = threadIdx.x;
    const bool a_k = k0 + a_col < R;
    const int r0 = k0 + (int)(tid / BN);
    float* as0 = as + tid / TC_BK * (TC_BK + TC_PAD) + a_col;
    float* bs0 = bs + tid / BN * (BN + TC_PAD) + tid % BN;
#pragma unroll
    for (int i = 0; i < A_PER; ++i) {
      const bool ok = a_k && i * A_ROWS < a_rows;
      tc_copy4(as0 + i * A_ROWS * (TC_BK + TC_PAD), ok ? w + (i * A_ROWS * R + k0) : w, ok);
    }
#pragma unroll
    for (int i = 0; i < B_PER; ++i) {
      const int r = r0 + i * B_STEP;
      const TcTap o = p_ok && r < R ? tab[r] : TcTap{0, 0, -1, 0};
      const int ih = ih0 + o.dh, iw = iw0 + o.dw;
      const bool ok = p_ok && r < R && ih >= 0 && ih < H && iw >= 0 && iw < W;
      tc_copy4(bs0 + i * B_STEP * (BN + TC_PAD), ok ? x + (ih0 * W + iw0 + o.offset) : x, ok);
    }
  }
};

// The convolution's outputs: bias and Relu, bounds-checked; output channel g*mg + m of pixel p = (n, oh, ow).
struct TcConvOut {
  float* y;
  const float* Bias;
  int M, OHW, P, mg, m0, p0, g, bias, relu;
  // rows first, first + 2, ... of column col of a fragment whose first row is row0; v[r*20] is row r.
  __device__ void operator()(int row0, int col, const float* v, int first) const {
    const int p = p0 + col;
    if (p >= P) return;
    const int n = p / OHW;
    float* yp = y + (size_t)n * M * OHW + (p - n * OHW);
    for (int r = first; r < 16; r += 2) {
      const int m = m0 + row0 + r;
      if (m < mg) yp[(size_t)(g * mg + m) * OHW] = tc_conv_epilogue(v[r * 20], Bias, g * mg + m, bias, relu);
    }
  }
};

// X [N, C, H, W], Wt [M, C/group, KH, KW], Bias [M] (read when bias), Y [N, M, OH, OW], then Relu when relu;
// tab (R = C/group*KH*KW entries) from conv_tc_offsets.
// block (TcShape<BM, BN>::THREADS), grid (ceil(N*OH*OW / BN), ceil((M/group) / BM), group).
template <int BM, int BN, int PREC>
__global__ void __launch_bounds__(TcShape<BM, BN>::THREADS)
conv_tc(const float* __restrict__ X, const float* __restrict__ Wt, const float* __restrict__ Bias,
        float* __restrict__ Y, const TcTap* __restrict__ tab, int N, int C, int H, int W, int M, int OH, int OW,
        int sh, int sw, int ph, int pw, int R, int group, int bias, int relu) {
  typedef TcShape<BM, BN> S;
  constexpr int FM = S::FM, FN = S::FN;
  __shared__ __align__(32) float As[2][BM * (TC_BK + TC_PAD)];
  __shared__ __align__(32) float Bs[2][TC_BK * (BN + TC_PAD)];
  __shared__ __align__(32) float Cs[TcShape<BM, BN>::WARPS][16 * 20];
  __shared__ __align__(32) __nv_bfloat16 Ah[PREC == 2 ? BM * (TC_BK + TC_HPAD) : 16];
  __shared__ __align__(32) __nv_bfloat16 Bh[PREC == 2 ? TC_BK * (BN + TC_HPAD) : 16];
  const int warp = threadIdx.x / 32, wm = (warp / S::WARPS_N) * S::WM, wn = (warp % S::WARPS_N) * S::WN;
  const int g = blockIdx.z, cg = C / group, mg = M / group;
  const int m0 = blockIdx.y * BM, p0 = blockIdx.x * BN;
  const TcConvLoader<BM, BN> load(threadIdx.x, X, Wt, tab, N, C, H, W, OH, OW, sh, sw, ph, pw, cg, mg, R, g, m0, p0);
  typename TcAcc<PREC>::type acc[FM][FN];
  tc_mainloop<BM, BN, FM, FN, PREC>(acc, As, Bs, Ah, Bh, (R + TC_BK - 1) / TC_BK, wm, wn, load);
  const TcConvOut out{Y, Bias, M, OH * OW, N * OH * OW, mg, m0, p0, g, bias, relu};
  tc_store(acc, Cs[warp], wm, wn, out);
}
