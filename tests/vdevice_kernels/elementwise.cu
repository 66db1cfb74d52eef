// Hand-written rKernels in the converter's output form (docs/ARCHITECTURE.md §1), for the vDevice tests.
#include "rtask_runtime.cuh"

// A pure helper with a name that the other test source also defines (sources must not collide).
__device__ __forceinline__ float combine(float a, float b) { return a * 0.5f + b; }

// y[i] = x[i] * alpha + beta, staged through a shared tile (lifted __shared__ + rt::sync).
template <int B>
struct affine__rt_shared {
  float tile[B];
};
template <int B>
__device__ void affine__rtask(rt::Task& __rt, float* __restrict__ y, const float* x, float alpha, float beta,
                              int n) {
  RT_LEGACY_INDICES(__rt);
  auto& __rt_sh = *reinterpret_cast<affine__rt_shared<B>*>(__rt.smem);
  auto& tile = __rt_sh.tile;
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  tile[threadIdx.x] = i < n ? x[i] : 0.0f;
  rt::sync(__rt);
  // read the neighbour's slot after the barrier, then put the own value back: the tile really is shared
  float mine = tile[(threadIdx.x + 1) % B];
  rt::sync(__rt);
  tile[(threadIdx.x + 1) % B] = mine;
  rt::sync(__rt);
  if (i >= n) return;
  y[i] = tile[threadIdx.x] * alpha + beta;
}
template <int B>
__global__ void affine(float* __restrict__ y, const float* x, float alpha, float beta, int n) {
  __shared__ affine__rt_shared<B> __rt_sh;
  RT_RUN_AS_KERNEL(&__rt_sh, (affine__rtask<B>(__rt, y, x, alpha, beta, n)));
}

// z[i] = combine(a[i], b[i]) staged through dynamic shared memory; 2-D blocks (blockDim.x * blockDim.y).
__device__ void add2__rtask(rt::Task& __rt, float* z, const float* a, const float* b, int n) {
  RT_LEGACY_INDICES(__rt);
  extern __shared__ float stage[];  // unchanged by conversion: aliases the start of the vEU's dynamic buffer
  unsigned t = threadIdx.y * blockDim.x + threadIdx.x;
  int i = blockIdx.x * (blockDim.x * blockDim.y) + t;
  if (i >= n) return;  // early return before a barrier: the rTask barrier must drop this thread
  stage[t] = combine(a[i], b[i]);
  rt::sync(__rt);
  z[i] = stage[t];
}
__global__ void add2(float* z, const float* a, const float* b, int n) {
  RT_RUN_AS_KERNEL(nullptr, (add2__rtask(__rt, z, a, b, n)));
}

// y[i] = x[i] after `rounds` barrier rounds: a producer that stays busy across many scheduler turns. Thread 0
// writes its element and returns at once (the rTask barrier drops it), so an executor that published the rTask
// as finished when thread 0 finished, instead of after the vEU barrier, would let consumers in too early.
template <int B>
struct slow_copy__rt_shared {
  float acc[B];
};
template <int B>
__device__ void slow_copy__rtask(rt::Task& __rt, float* y, const float* x, int n, int rounds) {
  RT_LEGACY_INDICES(__rt);
  auto& __rt_sh = *reinterpret_cast<slow_copy__rt_shared<B>*>(__rt.smem);
  auto& acc = __rt_sh.acc;
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  acc[threadIdx.x] = 0.0f;
  if (threadIdx.x == 0) {
    if (i < n) y[i] = x[i];
    return;
  }
  for (int r = 0; r < rounds; ++r) {
    rt::sync(__rt);
    acc[threadIdx.x] += 0.0f * static_cast<float>(r);
  }
  rt::sync(__rt);
  if (i < n) y[i] = x[i] + acc[threadIdx.x];
}
template <int B>
__global__ void slow_copy(float* y, const float* x, int n, int rounds) {
  __shared__ slow_copy__rt_shared<B> __rt_sh;
  RT_RUN_AS_KERNEL(&__rt_sh, (slow_copy__rtask<B>(__rt, y, x, n, rounds)));
}

// y[i] = x[i] + 1, whole warps, no barrier and no early return: the smallest rTask the interpreter runs on its
// fast path (named barrier, no TaskSlot setup), for measuring dispatch overhead and bandwidth per vEU count.
__device__ void bump__rtask(rt::Task& __rt, float* __restrict__ y, const float* __restrict__ x, int n) {
  RT_LEGACY_INDICES(__rt);
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = x[i] + 1.0f;
}
__global__ void bump(float* __restrict__ y, const float* __restrict__ x, int n) {
  RT_RUN_AS_KERNEL(nullptr, (bump__rtask(__rt, y, x, n)));
}
