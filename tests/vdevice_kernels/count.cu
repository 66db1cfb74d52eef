// Hand-written rKernel in the converter's output form: whole warps, no early return, block reductions
// (__syncthreads_count / __syncthreads_and). On the interpreter it takes the named barrier and still needs its
// reduction slots reset before it runs (VD_NAMED | VD_PREPARE).
#include "rtask_runtime.cuh"

// y[i] = x[i] + 0.125 * (positive x in the block) + (1 if every |x| in the block is below 3, else 0); elements
// past n count as 0.
template <int B>
__device__ void count_pos__rtask(rt::Task& __rt, float* y, const float* x, int n) {
  RT_LEGACY_INDICES(__rt);
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  float v = i < n ? x[i] : 0.0f;
  int positives = rt::sync_count(__rt, v > 0.0f);
  int small = rt::sync_and(__rt, fabsf(v) < 3.0f);
  if (i < n) y[i] = v + static_cast<float>(positives) * 0.125f + (small ? 1.0f : 0.0f);
}
template <int B>
__global__ void count_pos(float* y, const float* x, int n) {
  RT_RUN_AS_KERNEL(nullptr, (count_pos__rtask<B>(__rt, y, x, n)));
}
