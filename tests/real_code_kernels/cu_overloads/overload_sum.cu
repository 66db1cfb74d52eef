// Two block_reduce templates of the .cu file (no header): the generic one calls the other through its T, a call
// clang leaves dependent. out[2r] = 2 * the sum of row r, out[2r + 1] = the sum; one block per row.
template <int R>
__device__ float block_reduce(float v, bool) {
  __shared__ float scratch[32];
  int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  v = lane < warps ? scratch[lane] : 0.0f;
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  __syncthreads();  // scratch is free for the next call
  return v * R;
}

template <class T>
__device__ T block_reduce(T v) {
  return block_reduce<2>(v, false);
}

__global__ void overload_sum(const float *in, float *out, int n) {
  const float *row = in + blockIdx.x * n;
  float acc = 0.0f;
  for (int i = threadIdx.x; i < n; i += blockDim.x) acc += row[i];
  float twice = block_reduce(acc);
  float once = block_reduce<1>(acc, true);
  if (threadIdx.x == 0) {
    out[2 * blockIdx.x] = twice;
    out[2 * blockIdx.x + 1] = once;
  }
}
