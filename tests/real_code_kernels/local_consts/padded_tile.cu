// A shared tile whose size names function-local constants (SGEMM_CUDA kernel 8 style: `const int extraCols`).
template <int BK, int BN> __global__ void padded_tile(const float *in, float *out) {
  const int extraCols = 5;
  constexpr int rows = BK;
  __shared__ float Bs[rows * (BN + extraCols)];
  const int r = threadIdx.x / BN, c = threadIdx.x % BN;
  Bs[r * (BN + extraCols) + c] = in[blockIdx.x * BK * BN + threadIdx.x];
  __syncthreads();
  out[blockIdx.x * BK * BN + threadIdx.x] = Bs[((r + 1) % rows) * (BN + extraCols) + c];
}

template __global__ void padded_tile<4, 16>(const float *, float *);
