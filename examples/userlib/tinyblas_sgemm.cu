// tinyblas SGEMM: C = epilogue(alpha * A @ B + bias), row-major, A [M, K], B [K, N], bias [N] (optional).
// Block tiling: a BM x BN tile of C per thread block, BK-deep slabs of A and B staged in shared memory, each
// thread accumulating TM rows of one column in registers.
#include "tinyblas.cuh"

namespace {

template <int BM, int BN, int BK, int TM, bool BIAS, bool RELU>
__global__ void __launch_bounds__((BM * BN) / TM)
    tb_sgemm_nn(int M, int N, int K, float alpha, const float* __restrict__ A, const float* __restrict__ B,
                const float* __restrict__ bias, float* __restrict__ C) {
  __shared__ float As[BM * BK];
  __shared__ float Bs[BK * BN];
  const int row0 = blockIdx.y * BM;
  const int col0 = blockIdx.x * BN;
  const int tcol = threadIdx.x % BN;
  const int trow = (threadIdx.x / BN) * TM;
  float acc[TM];
#pragma unroll
  for (int i = 0; i < TM; ++i) acc[i] = 0.0f;

  for (int k0 = 0; k0 < K; k0 += BK) {
    for (int i = threadIdx.x; i < BM * BK; i += blockDim.x) As[i] = TB_AT(A, row0 + i / BK, k0 + i % BK, M, K);
    for (int i = threadIdx.x; i < BK * BN; i += blockDim.x) Bs[i] = TB_AT(B, k0 + i / BN, col0 + i % BN, K, N);
    __syncthreads();
#pragma unroll
    for (int k = 0; k < BK; ++k) {
      const float b = Bs[k * BN + tcol];
#pragma unroll
      for (int i = 0; i < TM; ++i) acc[i] += As[(trow + i) * BK + k] * b;
    }
    __syncthreads();
  }

  const int c = col0 + tcol;
  if (c >= N) return;  // whole columns of threads leave early; nothing below needs a barrier
#pragma unroll
  for (int i = 0; i < TM; ++i) {
    const int r = row0 + trow + i;
    if (r < M) {
      float v = alpha * acc[i];
      if (BIAS) v += bias[c];
      C[(size_t)r * N + c] = tinyblas::apply(v, RELU);
    }
  }
}

// a separate epilogue for callers that computed X elsewhere: Y[r, c] = act(X[r, c] + bias[c]), grid-stride
// (X == Y works in place)
template <int THREADS, bool RELU>
__global__ void __launch_bounds__(THREADS) tb_bias_act(int rows, int cols, const float* X, const float* __restrict__ bias,
                                                       float* Y) {
  const long total = (long)rows * cols;
  for (long i = blockIdx.x * (long)THREADS + threadIdx.x; i < total; i += (long)gridDim.x * THREADS) {
    Y[i] = tinyblas::apply(X[i] + bias[i % cols], RELU);
  }
}

template <int BM, int BN, int BK, int TM, bool BIAS, bool RELU>
cudaError_t launch_sgemm(int M, int N, int K, float alpha, const float* A, const float* B, const float* bias,
                         float* C, cudaStream_t stream) {
  dim3 grid(TB_CEIL_DIV(N, BN), TB_CEIL_DIV(M, BM));
  dim3 block((BM * BN) / TM);
  tb_sgemm_nn<BM, BN, BK, TM, BIAS, RELU><<<grid, block, 0, stream>>>(M, N, K, alpha, A, B, bias, C);
  return cudaGetLastError();
}

}  // namespace

namespace tinyblas {

cudaError_t sgemm(int M, int N, int K, float alpha, const float* A, const float* B, const float* bias, float* C,
                  Epilogue epilogue, cudaStream_t stream) {
  const bool relu = epilogue == Epilogue::Relu;
  if (M >= 64 && N >= 64) {  // big problems: 64 x 64 tiles
    if (bias) return relu ? launch_sgemm<64, 64, 8, 8, true, true>(M, N, K, alpha, A, B, bias, C, stream)
                          : launch_sgemm<64, 64, 8, 8, true, false>(M, N, K, alpha, A, B, bias, C, stream);
    return relu ? launch_sgemm<64, 64, 8, 8, false, true>(M, N, K, alpha, A, B, bias, C, stream)
                : launch_sgemm<64, 64, 8, 8, false, false>(M, N, K, alpha, A, B, bias, C, stream);
  }
  if (bias) return relu ? launch_sgemm<32, 32, 8, 4, true, true>(M, N, K, alpha, A, B, bias, C, stream)
                        : launch_sgemm<32, 32, 8, 4, true, false>(M, N, K, alpha, A, B, bias, C, stream);
  return relu ? launch_sgemm<32, 32, 8, 4, false, true>(M, N, K, alpha, A, B, bias, C, stream)
              : launch_sgemm<32, 32, 8, 4, false, false>(M, N, K, alpha, A, B, bias, C, stream);
}

cudaError_t bias_act(int rows, int cols, const float* bias, float* C, Epilogue epilogue, cudaStream_t stream) {
  const int blocks = TB_CEIL_DIV(rows * cols, 256) < 1024 ? TB_CEIL_DIV(rows * cols, 256) : 1024;
  if (epilogue == Epilogue::Relu) tb_bias_act<256, true><<<blocks, 256, 0, stream>>>(rows, cols, C, bias, C);
  else tb_bias_act<256, false><<<blocks, 256, 0, stream>>>(rows, cols, C, bias, C);
  TB_CHECK(cudaGetLastError());
  return cudaGetLastError();
}

}  // namespace tinyblas
