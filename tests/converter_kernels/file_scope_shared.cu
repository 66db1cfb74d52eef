// A file-scope __shared__ buffer, written by the kernel and read by a helper: inclusive prefix sums per block.
__shared__ float g_stage[64];

__device__ float stage_sum(int count) {
  float s = 0.f;
  for (int k = 0; k < count; ++k) s += g_stage[k];
  return s;
}

__global__ void block_prefix(float* out, const float* x, int n) {
  const int t = threadIdx.x, i = blockIdx.x * blockDim.x + t;
  g_stage[t] = i < n ? x[i] : 0.f;
  __syncthreads();
  if (i < n) out[i] = stage_sum(t + 1);
}
