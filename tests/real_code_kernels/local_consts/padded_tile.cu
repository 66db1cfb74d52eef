// A shared tile whose size names function-local constants (SGEMM_CUDA kernel 8 style: `const int extraCols`),
// one defined through another (llm.c's matmul_backward_bias_kernel8: `bdy = 32 / bdx`).
template <int BK, int BN> __global__ void padded_tile(const float *in, float *out) {
  constexpr const int pad = 4;
  const int extraCols = pad + 1;
  constexpr int rows = BK;
  __shared__ float Bs[rows * (BN + extraCols)];
  const int r = threadIdx.x / BN, c = threadIdx.x % BN;
  Bs[r * (BN + extraCols) + c] = in[blockIdx.x * BK * BN + threadIdx.x];
  __syncthreads();
  out[blockIdx.x * BK * BN + threadIdx.x] = Bs[((r + 1) % rows) * (BN + extraCols) + c];
}

template __global__ void padded_tile<4, 16>(const float *, float *);
