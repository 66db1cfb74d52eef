// Hand-written rKernel in the converter's output form: each rTask reads elements written by many rTasks of
// its producer, so the vDevice must order the whole producer before it.
#include "rtask_runtime.cuh"

// Same name as the helper in elementwise.cu, different body: the sources must stay apart.
__device__ __forceinline__ float combine(float acc, float v) { return acc + v; }

// y[i] = x[i] + sum_{k < taps} x[(i * 7 + k * stride) % n], the sum reduced in k order.
template <int B, int TAPS>
struct gather__rt_shared {
  float part[B];
  int idx_base;
};
template <int B, int TAPS>
__device__ void gather__rtask(rt::Task& __rt, float* y, const float* x, int n, int stride) {
  RT_LEGACY_INDICES(__rt);
  auto& __rt_sh = *reinterpret_cast<gather__rt_shared<B, TAPS>*>(__rt.smem);
  auto& part = __rt_sh.part;
  auto& idx_base = __rt_sh.idx_base;
  if (threadIdx.x == 0) idx_base = blockIdx.x * blockDim.x;
  rt::sync(__rt);
  int i = idx_base + threadIdx.x;
  float acc = 0.0f;
  for (int k = 0; k < TAPS; ++k) acc = combine(acc, x[(static_cast<long long>(i) * 7 + k * stride) % n]);
  part[threadIdx.x] = acc;
  rt::sync(__rt);
  if (i < n) y[i] = x[i] + part[threadIdx.x];
}
template <int B, int TAPS>
__global__ void gather(float* y, const float* x, int n, int stride) {
  __shared__ gather__rt_shared<B, TAPS> __rt_sh;
  RT_RUN_AS_KERNEL(&__rt_sh, (gather__rtask<B, TAPS>(__rt, y, x, n, stride)));
}
