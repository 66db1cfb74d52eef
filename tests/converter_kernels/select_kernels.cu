// Two kernels in one file, to select one with --kernel; the other must stay exactly as written.
__global__ void fill_iota(int* out, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = i;
}

__global__ void negate_odd(float* out, const float* in, int n) {
  __shared__ float staged[32];
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  staged[threadIdx.x] = i < n ? in[i] : 0.f;
  __syncthreads();
  if (i < n) out[i] = (i & 1) ? -staged[threadIdx.x] : staged[threadIdx.x];
}
