// 48-thread blocks: the second warp is partial, so shuffles use a mask of the lanes that exist.
__global__ void warp_sums_48(float* warp_sums, float* centred, const float* x, int n) {
  const int t = threadIdx.x, lane = t & 31, warp = t >> 5;
  const int i = blockIdx.x * blockDim.x + t;
  const int lanes = min(32, (int)blockDim.x - warp * 32);
  const unsigned mask = lanes == 32 ? 0xffffffffu : (1u << lanes) - 1u;
  float v = i < n ? x[i] : 0.f;
  for (int o = 16; o > 0; o >>= 1) {
    const float other = __shfl_down_sync(mask, v, o);
    if (lane + o < lanes) v += other;
  }
  const float total = __shfl_sync(mask, v, 0);  // lane 0 holds the warp's sum
  if (lane == 0) warp_sums[blockIdx.x * 2 + warp] = total;
  if (i < n) centred[i] = x[i] - total;
}
