// Hand-written rKernels in the converter's output form (docs/ARCHITECTURE.md §1) that use a vEU's resident region
// (§7), for tests/test_resident.py.
#include "rtask_runtime.cuh"

// rTask r copies floats [r*n, (r+1)*n) of src into its vEU's resident region (nothing without one).
__device__ void fill__rtask(rt::Task& __rt, const float* src, int n) {
  float* dst = reinterpret_cast<float*>(__rt.resident);
  if (dst == nullptr) return;
  for (int i = __rt.tid; i < n; i += __rt.nthreads) dst[i] = src[(size_t)__rt.id * n + i];
}
__global__ void fill(const float* src, int n) { RT_RUN_AS_KERNEL(nullptr, (fill__rtask(__rt, src, n))); }

// y[r*n + i] = scale * slice r of src: from the resident region when the rTask has one, else from global memory.
__device__ void use__rtask(rt::Task& __rt, float* y, const float* src, int n, float scale) {
  const float* w = __rt.resident ? reinterpret_cast<const float*>(__rt.resident) : src + (size_t)__rt.id * n;
  for (int i = __rt.tid; i < n; i += __rt.nthreads) y[(size_t)__rt.id * n + i] = w[i] * scale;
}
__global__ void use(float* y, const float* src, int n, float scale) {
  RT_RUN_AS_KERNEL(nullptr, (use__rtask(__rt, y, src, n, scale)));
}

// Fills its whole per-rTask area (a B-float layout struct below the resident region) with -7 and writes that into
// slice r of dst: after it, a reader of global memory sees -7, a reader of an intact region the original values.
template <int B>
struct scribble__rt_shared {
  float junk[B];
};
template <int B>
__device__ void scribble__rtask(rt::Task& __rt, float* dst, int n) {
  auto& __rt_sh = *reinterpret_cast<scribble__rt_shared<B>*>(__rt.smem);
  for (int i = __rt.tid; i < B; i += __rt.nthreads) __rt_sh.junk[i] = -7.0f;
  rt::sync(__rt);
  for (int i = __rt.tid; i < n; i += __rt.nthreads) dst[(size_t)__rt.id * n + i] = __rt_sh.junk[i % B];
}
template <int B>
__global__ void scribble(float* dst, int n) {
  __shared__ scribble__rt_shared<B> __rt_sh;
  RT_RUN_AS_KERNEL(&__rt_sh, (scribble__rtask<B>(__rt, dst, n)));
}
