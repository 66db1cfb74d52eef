// A converted-style rKernel (what `rtransform convert` emits, see docs/ARCHITECTURE.md §1), its plain
// wrapper, and a tiny hand-made vEU executor that runs several rTasks per persistent block.
#include "rtask_runtime.cuh"

// Legacy kernel it stands for: each block sums its slice of x (B threads, B a multiple of 32), threads past
// n return early, and thread 0 also counts the threads still alive with __syncthreads_count.
template <int B>
struct seg_sum__rt_shared {
  float warp_sums[B / 32];
};
template <int B>
__device__ void seg_sum__rtask(rt::Task& __rt, float* out, int* live_out, const float* x, int n) {
  RT_LEGACY_INDICES(__rt);
  auto& __rt_sh = *reinterpret_cast<seg_sum__rt_shared<B>*>(__rt.smem);
  auto& warp_sums = __rt_sh.warp_sums;                    // was: __shared__ float warp_sums[B / 32];
  float* scratch = reinterpret_cast<float*>(__rt.dyn_smem);  // was: extern __shared__ float scratch[];
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  float v = i < n ? x[i] : 0.0f;
  auto tile = rt::tiled_partition<32>(rt::this_task(__rt));   // was: cg::tiled_partition<32>(block)
  float s = rt::reduce(tile, v, [](float a, float b) { return a + b; });
  if (tile.thread_rank() == 0) warp_sums[tile.meta_group_rank()] = s;
  scratch[threadIdx.x] = v * 2.0f;
  rt::sync(__rt);                                          // was: __syncthreads();
  if (i >= n) return;                                      // early exit before two more barriers
  int live = rt::sync_count(__rt, 1);                      // was: __syncthreads_count(1)
  float doubled = scratch[(threadIdx.x + 1) % live];
  rt::sync(__rt);
  if (threadIdx.x == 0) {
    float t = 0;
    for (int w = 0; w < B / 32; ++w) t += warp_sums[w];
    out[blockIdx.x] = t;
    live_out[blockIdx.x] = live;
  }
  scratch[threadIdx.x] = doubled;                          // rotated copy, read back by the test
  rt::sync(__rt);
  out[gridDim.x + i] = scratch[threadIdx.x];
}

// Plain wrapper: one block per rTask (the legacy launch).
template <int B>
__global__ void seg_sum(float* out, int* live_out, const float* x, int n) {
  __shared__ seg_sum__rt_shared<B> __rt_sh;
  RT_RUN_AS_KERNEL(&__rt_sh, (seg_sum__rtask<B>(__rt, out, live_out, x, n)));
}

// Hand-made vEU executor: blockDim.x >= B threads per vEU, rTasks id = blockIdx.x, += gridDim.x, following
// the protocol at the top of rtask_runtime.cuh. The vEU buffer: TaskSlot, the rKernel's static part, then
// its dynamic part.
template <int B>
__global__ void seg_sum_veu(float* out, int* live_out, const float* x, int n, dim3 legacy_grid) {
  extern __shared__ __align__(16) char veu_smem[];
  rt::TaskSlot* slot = reinterpret_cast<rt::TaskSlot*>(veu_smem);
  char* smem = veu_smem + sizeof(rt::TaskSlot);
  char* dyn = smem + ((sizeof(seg_sum__rt_shared<B>) + 15) / 16 * 16);
  unsigned ntasks = legacy_grid.x * legacy_grid.y * legacy_grid.z;
  for (unsigned id = blockIdx.x; id < ntasks; id += gridDim.x) {
    rt::Task t = rt::make_task(slot, id, legacy_grid, dim3(B), smem, dyn);
    rt::begin_task(t);
    if (t.tid < t.nthreads) {
      seg_sum__rtask<B>(t, out, live_out, x, n);
      rt::end_task(t);
    }
    __syncthreads();
  }
}

// rt::reduce over a tile that the rTask fills only partly (e.g. 52 threads: the second warp has 20 lanes).
__device__ void partial_reduce__rtask(rt::Task& __rt, float* out, const float* x) {
  RT_LEGACY_INDICES(__rt);
  auto tile = rt::tiled_partition<32>(rt::this_task(__rt));
  float s = rt::reduce(tile, x[threadIdx.x], [](float a, float b) { return a + b; });
  out[threadIdx.x] = s;
}
__global__ void partial_reduce(float* out, const float* x) {
  RT_RUN_AS_KERNEL(nullptr, (partial_reduce__rtask(__rt, out, x)));
}
