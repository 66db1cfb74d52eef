// 1-D SAXPY with C linkage, __launch_bounds__ and __restrict__ pointers; the grid overshoots n.
extern "C" __global__ void __launch_bounds__(128, 2)
saxpy_bounds(float* __restrict__ y, const float* __restrict__ x, float a, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = a * x[i] + y[i];
}
