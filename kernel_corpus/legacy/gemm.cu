// gemm.cu — legacy GEMM / GEMV kernels for ONNX MatMul and Gemm (float32).
//
// Every operand is addressed through element strides, so one kernel serves transA/transB, a broadcast bias
// and batched MatMul:
//   A(m,k) = A[z*batch_a + m*sam + k*sak]      B(k,n) = B[z*batch_b + k*sbk + n*sbn]
//   C(m,n) = C[m*scm + n*scn]                  (a stride of 0 broadcasts that dimension)
//   Y(z,m,n) = alpha * sum_k A(m,k) * B(k,n) + beta * C(m,n)        Y(z,m,n) = Y[z*ysz + m*ysm + n], z = blockIdx.z
// (gemm_tiled, gemm_regblock and the split-K fixup; ysz = M*N, ysm = N for a row-major [batch, M, N] Y, other
// strides write a strided view, e.g. the heads of an attention straight into their [S, heads, D] layout; the GEMVs
// write row-major Y).
// With BIAS == false, C is never read (any valid pointer may be passed) and beta is ignored. ACT applies a
// following activation inside the kernel: 0 none, 1 Relu, 2 Gelu (erf form), 3 Gelu (tanh approximation).
// Split-K (gemm_tiled, gemm_regblock with splits > 1): blockIdx.z = z * splits + s; the block sums the k of its split
// (SplitRange) and writes the raw sum to P[s][z][m][n]; gemm_splitk_reduce then adds the splits in order s = 0, 1,
// ... and applies the epilogue, so the result does not depend on the order blocks run in.

// alpha * acc (+ beta * C(m,n)), then the activation: the epilogue shared by every kernel of this file.
template <bool BIAS, int ACT>
__device__ __forceinline__ float gemm_epilogue(float acc, const float* C, size_t c_index, float alpha, float beta) {
  float v = alpha * acc;
  if (BIAS) v += beta * C[c_index];
  if (ACT == 1) return v < 0.0f ? 0.0f : v;  // not fmaxf: Relu keeps NaN, as ONNX does
  if (ACT == 2) return 0.5f * v * (1.0f + erff(v * 0.70710678118654752f));
  if (ACT == 3) return 0.5f * v * (1.0f + tanhf(0.79788456080286536f * (v + 0.044715f * v * v * v)));
  return v;
}

// The k range [begin, end) of split s of `splits`: the ceil(K / step) steps of a kernel's k loop shared out as evenly
// as whole steps allow (split s starts at step floor(s * steps / splits)); splits 1 is the whole of K.
struct SplitRange {
  int begin, end;
  __device__ SplitRange(int s, int splits, int K, int step) {
    const int steps = (K + step - 1) / step;
    begin = s * steps / splits * step;
    const int last = (s + 1) * steps / splits * step;
    end = last < K ? last : K;
  }
};

// Y(z,m,n) (splits == 1, with the epilogue) or P[s][z][m][n] (split-K: the raw sum) of one output.
template <bool BIAS, int ACT>
__device__ __forceinline__ void gemm_store(float acc, float* Y, float* P, const float* C, int M, int N, int m, int n,
                                           int scm, int scn, float alpha, float beta, int splits, int ysz, int ysm) {
  const int z = blockIdx.z / splits, s = blockIdx.z % splits, batch = gridDim.z / splits;
  if (splits > 1)
    P[(((size_t)s * batch + z) * M + m) * N + n] = acc;
  else
    Y[(size_t)z * ysz + (size_t)m * ysm + n] =
        gemm_epilogue<BIAS, ACT>(acc, C, (size_t)m * scm + (size_t)n * scn, alpha, beta);
}

// Shared-memory tiled GEMM: TILE x TILE outputs per block, one per thread; block (TILE, TILE).
// grid (ceil(N/TILE), ceil(M/TILE), batch * splits); P [splits][batch][M][N] (written when splits > 1).
template <int TILE, bool BIAS, int ACT>
__global__ void gemm_tiled(const float* __restrict__ A, const float* __restrict__ B, const float* __restrict__ C,
                           float* __restrict__ Y, int M, int N, int K, int sam, int sak, int sbk, int sbn,
                           int scm, int scn, int batch_a, int batch_b, float alpha, float beta,
                           float* __restrict__ P, int splits, int ysz, int ysm) {
  __shared__ float As[TILE][TILE];
  __shared__ float Bs[TILE][TILE + 1];
  const int tx = threadIdx.x, ty = threadIdx.y;
  const int row = blockIdx.y * TILE + ty;
  const int col = blockIdx.x * TILE + tx;
  const int z = blockIdx.z / splits;
  const SplitRange ks(blockIdx.z % splits, splits, K, TILE);
  const float* a = A + (size_t)z * batch_a;
  const float* b = B + (size_t)z * batch_b;
  float acc = 0.0f;
  for (int k0 = ks.begin; k0 < ks.end; k0 += TILE) {
    const int ka = k0 + tx, kb = k0 + ty;
    As[ty][tx] = (row < M && ka < ks.end) ? a[(size_t)row * sam + (size_t)ka * sak] : 0.0f;
    Bs[ty][tx] = (kb < ks.end && col < N) ? b[(size_t)kb * sbk + (size_t)col * sbn] : 0.0f;
    __syncthreads();
#pragma unroll
    for (int k = 0; k < TILE; ++k) acc += As[ty][k] * Bs[k][tx];
    __syncthreads();
  }
  if (row < M && col < N) gemm_store<BIAS, ACT>(acc, Y, P, C, M, N, row, col, scm, scn, alpha, beta, splits, ysz,
                                                         ysm);
}

// Register-blocked GEMM: a BM x BN output tile per block, each thread owning a TM x TN sub-block kept in
// registers; K advances BK at a time through shared memory. 1-D block of (BM/TM)*(BN/TN) threads.
// grid (ceil(N/BN), ceil(M/BM), batch * splits); P [splits][batch][M][N] (written when splits > 1).
template <int BM, int BN, int BK, int TM, int TN, bool BIAS, int ACT>
__global__ void __launch_bounds__((BM / TM) * (BN / TN))
gemm_regblock(const float* __restrict__ A, const float* __restrict__ B, const float* __restrict__ C,
              float* __restrict__ Y, int M, int N, int K, int sam, int sak, int sbk, int sbn, int scm, int scn,
              int batch_a, int batch_b, float alpha, float beta, float* __restrict__ P, int splits, int ysz,
              int ysm) {
  constexpr int TX = BN / TN;
  constexpr int NT = (BM / TM) * TX;
  __shared__ float As[BK][BM];  // k-major: a thread reads TM consecutive rows of one k
  __shared__ float Bs[BK][BN];
  const int tid = threadIdx.x;
  const int trow = tid / TX, tcol = tid % TX;
  const int m0 = blockIdx.y * BM, n0 = blockIdx.x * BN;
  const int z = blockIdx.z / splits;
  const SplitRange ks(blockIdx.z % splits, splits, K, BK);
  const float* a = A + (size_t)z * batch_a;
  const float* b = B + (size_t)z * batch_b;

  float acc[TM][TN];
#pragma unroll
  for (int i = 0; i < TM; ++i)
#pragma unroll
    for (int j = 0; j < TN; ++j) acc[i][j] = 0.0f;

  for (int k0 = ks.begin; k0 < ks.end; k0 += BK) {
    for (int e = tid; e < BM * BK; e += NT) {
      const int mm = e / BK, kk = e % BK;
      const int m = m0 + mm, k = k0 + kk;
      As[kk][mm] = (m < M && k < ks.end) ? a[(size_t)m * sam + (size_t)k * sak] : 0.0f;
    }
    for (int e = tid; e < BK * BN; e += NT) {
      const int kk = e / BN, nn = e % BN;
      const int k = k0 + kk, n = n0 + nn;
      Bs[kk][nn] = (k < ks.end && n < N) ? b[(size_t)k * sbk + (size_t)n * sbn] : 0.0f;
    }
    __syncthreads();
#pragma unroll
    for (int kk = 0; kk < BK; ++kk) {
      float ra[TM], rb[TN];
#pragma unroll
      for (int i = 0; i < TM; ++i) ra[i] = As[kk][trow * TM + i];
#pragma unroll
      for (int j = 0; j < TN; ++j) rb[j] = Bs[kk][tcol * TN + j];
#pragma unroll
      for (int i = 0; i < TM; ++i)
#pragma unroll
        for (int j = 0; j < TN; ++j) acc[i][j] += ra[i] * rb[j];
    }
    __syncthreads();
  }

#pragma unroll
  for (int i = 0; i < TM; ++i) {
    const int m = m0 + trow * TM + i;
    if (m >= M) break;
#pragma unroll
    for (int j = 0; j < TN; ++j) {
      const int n = n0 + tcol * TN + j;
      if (n < N) gemm_store<BIAS, ACT>(acc[i][j], Y, P, C, M, N, m, n, scm, scn, alpha, beta, splits, ysz, ysm);
    }
  }
}

// Split-K fixup of gemm_tiled / gemm_regblock: Y(z,m,n) = epilogue(P[0][z][m][n] + P[1][z][m][n] + ...), added in
// split order. block (BLOCK), grid ceil(batch*M*N / BLOCK).
template <int BLOCK, bool BIAS, int ACT>
__global__ void gemm_splitk_reduce(const float* __restrict__ P, const float* __restrict__ C, float* __restrict__ Y,
                                   int total, int M, int N, int splits, int scm, int scn, float alpha, float beta,
                                   int ysz, int ysm) {
  const int e = blockIdx.x * BLOCK + threadIdx.x;
  if (e >= total) return;
  float v = P[e];
  for (int s = 1; s < splits; ++s) v += P[(size_t)s * total + e];
  const int n = e % N, m = (e / N) % M, z = e / N / M;
  Y[(size_t)z * ysz + (size_t)m * ysm + n] = gemm_epilogue<BIAS, ACT>(v, C, (size_t)m * scm + (size_t)n * scn, alpha,
                                                                      beta);
}

// GEMV (M == 1) for a weight whose rows are contiguous in k (Gemm transB=1, i.e. W stored [N, K]):
// one warp per output, float4 loads when x and the row are 16-byte aligned and K % 4 == 0.
// block (32*WARPS), grid ceil(N/WARPS). x(k) = x[k*sx], W(k,n) = W[n*sw + k].
template <int WARPS, bool BIAS, int ACT>
__global__ void gemv_warp(const float* __restrict__ x, const float* __restrict__ W, const float* __restrict__ C,
                          float* __restrict__ y, int N, int K, int sx, int sw, int scn, float alpha, float beta) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int n = blockIdx.x * WARPS + warp;
  if (n >= N) return;  // the whole warp leaves together
  const float* w = W + (size_t)n * sw;
  float acc = 0.0f;
  const bool vec = sx == 1 && K % 4 == 0 && (((size_t)x | (size_t)w) & 15) == 0;
  if (vec) {
    const float4* x4 = reinterpret_cast<const float4*>(x);
    const float4* w4 = reinterpret_cast<const float4*>(w);
    for (int i = lane; i < K / 4; i += 32) {
      const float4 p = x4[i], q = w4[i];
      acc += p.x * q.x + p.y * q.y + p.z * q.z + p.w * q.w;
    }
  } else {
    for (int k = lane; k < K; k += 32) acc += x[(size_t)k * sx] * w[k];
  }
  for (int offset = 16; offset > 0; offset >>= 1) acc += __shfl_down_sync(0xffffffffu, acc, offset);
  if (lane == 0) y[n] = gemm_epilogue<BIAS, ACT>(acc, C, (size_t)n * scn, alpha, beta);
}

// Partial dot products of COLS consecutive outputs over k in [k_begin, k_end): thread (tx, ty) sums every KROWS-th
// k, then the KROWS partials of a column are added through part[KROWS][COLS] in the caller's shared memory.
// The result is valid in threads with ty == 0.
template <int COLS, int KROWS>
__device__ float column_dot(float (*part)[COLS], const float* x, const float* W, int n, int N, int k_begin,
                            int k_end, int sx, int sbk, int sbn) {
  const int tx = threadIdx.x, ty = threadIdx.y;
  float acc = 0.0f;
  if (n < N)
    for (int k = k_begin + ty; k < k_end; k += KROWS) acc += x[(size_t)k * sx] * W[(size_t)k * sbk + (size_t)n * sbn];
  part[ty][tx] = acc;
  __syncthreads();
  if (ty == 0)
    for (int r = 1; r < KROWS; ++r) acc += part[r][tx];
  return acc;
}

// GEMV (M == 1) for a weight whose rows are contiguous in n (MatMul B [K, N]): a thread per output column, KROWS
// threads per column. block (COLS, KROWS), grid ceil(N/COLS).
template <int COLS, int KROWS, bool BIAS, int ACT>
__global__ void gemv_col(const float* __restrict__ x, const float* __restrict__ W, const float* __restrict__ C,
                         float* __restrict__ y, int N, int K, int sx, int sbk, int sbn, int scn, float alpha,
                         float beta) {
  __shared__ float part[KROWS][COLS];
  const int n = blockIdx.x * COLS + threadIdx.x;
  const float acc = column_dot<COLS, KROWS>(part, x, W, n, N, 0, K, sx, sbk, sbn);
  if (threadIdx.y == 0 && n < N) y[n] = gemm_epilogue<BIAS, ACT>(acc, C, (size_t)n * scn, alpha, beta);
}

// Split-K GEMV, first launch: block (bx, s) writes the partial sums of its COLS outputs over k in
// [s*kchunk, min(K, (s+1)*kchunk)) to partial[s*N + n]. grid (ceil(N/COLS), splits), block (COLS, KROWS).
template <int COLS, int KROWS>
__global__ void gemv_splitk_partial(const float* __restrict__ x, const float* __restrict__ W,
                                    float* __restrict__ partial, int N, int K, int kchunk, int sx, int sbk,
                                    int sbn) {
  __shared__ float part[KROWS][COLS];
  const int n = blockIdx.x * COLS + threadIdx.x;
  const int k_begin = blockIdx.y * kchunk;
  const int k_end = k_begin + kchunk < K ? k_begin + kchunk : K;
  const float acc = column_dot<COLS, KROWS>(part, x, W, n, N, k_begin, k_end, sx, sbk, sbn);
  if (threadIdx.y == 0 && n < N) partial[(size_t)blockIdx.y * N + n] = acc;
}

// Split-K GEMV, second launch: y[n] = alpha * sum_s partial[s*N + n] (+ beta*C), summed in a fixed order so the
// result is deterministic. block (BLOCK), grid ceil(N/BLOCK).
template <int BLOCK, bool BIAS, int ACT>
__global__ void gemv_splitk_reduce(const float* __restrict__ partial, const float* __restrict__ C,
                                   float* __restrict__ y, int N, int splits, int scn, float alpha, float beta) {
  const int n = blockIdx.x * BLOCK + threadIdx.x;
  if (n >= N) return;
  float acc = 0.0f;
  for (int s = 0; s < splits; ++s) acc += partial[(size_t)s * N + n];
  y[n] = gemm_epilogue<BIAS, ACT>(acc, C, (size_t)n * scn, alpha, beta);
}

// Batch-1 GEMV for a weight whose rows are contiguous in n (MatMul B [K, N]) with float4 loads: thread (tx, ty) owns
// the 4 columns n0 + 4*tx .. +3 and sums every KSPLIT-th k from ty, UNROLL rows at a time (UNROLL 16-byte loads in
// flight); the KSPLIT partial float4s of a column group meet in shared memory in a tree (KSPLIT a power of two).
// Needs sbn == 1, N % 4 == 0, sbk % 4 == 0 and a 16-byte-aligned W (else the scalar path runs, same order).
// block (COLS4, KSPLIT), grid ceil(N / (4*COLS4)).
template <int COLS4, int KSPLIT, int UNROLL, bool BIAS, int ACT>
__global__ void __launch_bounds__(COLS4 * KSPLIT)
gemv_vec4(const float* __restrict__ x, const float* __restrict__ W, const float* __restrict__ C,
          float* __restrict__ y, int N, int K, int sx, int sbk, int scn, float alpha, float beta) {
  __shared__ float4 part[KSPLIT][COLS4];
  const int tx = threadIdx.x, ty = threadIdx.y;
  const int n = (blockIdx.x * COLS4 + tx) * 4;
  float4 acc = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
  if (n < N) {
    const bool vec = ((size_t)W & 15) == 0;
    int k = ty;
    if (vec) {
      for (; k + (UNROLL - 1) * KSPLIT < K; k += UNROLL * KSPLIT) {
        float4 w[UNROLL];
        float xv[UNROLL];
#pragma unroll
        for (int u = 0; u < UNROLL; ++u) {  // every load first: UNROLL rows in flight
          w[u] = *reinterpret_cast<const float4*>(W + (size_t)(k + u * KSPLIT) * sbk + n);
          xv[u] = x[(size_t)(k + u * KSPLIT) * sx];
        }
#pragma unroll
        for (int u = 0; u < UNROLL; ++u) {
          acc.x += xv[u] * w[u].x;
          acc.y += xv[u] * w[u].y;
          acc.z += xv[u] * w[u].z;
          acc.w += xv[u] * w[u].w;
        }
      }
    }
    for (; k < K; k += KSPLIT) {
      const float xk = x[(size_t)k * sx];
      const float* w = W + (size_t)k * sbk + n;
      acc.x += xk * w[0];
      acc.y += xk * w[1];
      acc.z += xk * w[2];
      acc.w += xk * w[3];
    }
  }
  part[ty][tx] = acc;
  __syncthreads();
#pragma unroll
  for (int half = KSPLIT / 2; half > 0; half /= 2) {
    if (ty < half) {
      const float4 o = part[ty + half][tx];
      float4& p = part[ty][tx];
      p.x += o.x;
      p.y += o.y;
      p.z += o.z;
      p.w += o.w;
    }
    __syncthreads();
  }
  if (ty == 0 && n < N) {
    const float4 s = part[0][tx];
    const float v[4] = {s.x, s.y, s.z, s.w};
#pragma unroll
    for (int i = 0; i < 4; ++i)
      y[n + i] = gemm_epilogue<BIAS, ACT>(v[i], C, (size_t)(n + i) * scn, alpha, beta);
  }
}
