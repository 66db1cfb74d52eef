// barrier_probe.cu — GPU check of the rTask barrier (mbarrier with arrive_drop) under surplus threads,
// early exits and data-dependent barrier counts, and its cost against __syncthreads. Standalone:
//   nvcc -arch=sm_90 -std=c++17 -I vdevice/include tests/gpu/barrier_probe.cu -o probe && ./probe
#include <cstdio>
#include <cstdlib>
#include <vector>
#include "rtask_runtime.cuh"

// One rTask: threads add their id into a shared accumulator over `rounds` barrier phases; threads with
// (tid % exit_mod == 1) leave after round (tid % 3). The result per rTask is checked on the host.
__device__ void probe_rtask(rt::Task& __rt, int* out, int rounds, int exit_mod) {
  RT_LEGACY_INDICES(__rt);
  extern __shared__ int acc[];  // dynamic part: one int
  unsigned t = threadIdx.x + blockDim.x * threadIdx.y;
  if (t == 0) acc[0] = 0;
  rt::sync(__rt);
  for (int r = 0; r < rounds; ++r) {
    if (exit_mod && t % exit_mod == 1 && r == (int)(t % 3)) return;
    atomicAdd(&acc[0], 1);
    rt::sync(__rt);
    int seen = acc[0];
    rt::sync(__rt);
    if (t == 0) out[blockIdx.x * rounds + r] = seen;
  }
}

__global__ void executor(int* out, int ntasks, dim3 block, int rounds, int exit_mod) {
  __shared__ rt::TaskSlot slot;
  for (int id = blockIdx.x; id < ntasks; id += gridDim.x) {
    rt::Task t = rt::make_task(&slot, id, dim3(ntasks), block, rt::dynamic_smem() + 16, rt::dynamic_smem());
    rt::begin_task(t);
    if (t.tid < t.nthreads) { probe_rtask(t, out, rounds, exit_mod); rt::end_task(t); }
    __syncthreads();
  }
}

__global__ void cost_rt(long long* cyc, int n, unsigned nthreads) {
  __shared__ rt::TaskSlot slot;
  rt::Task t = rt::make_task(&slot, 0, dim3(1), dim3(nthreads), nullptr, nullptr);
  rt::begin_task(t);
  long long c0 = clock64();
  if (t.tid < t.nthreads) { for (int i = 0; i < n; ++i) rt::sync(t); rt::end_task(t); }
  __syncthreads();
  if (threadIdx.x == 0) cyc[0] = clock64() - c0;
}
__global__ void cost_sync(long long* cyc, int n) {
  long long c0 = clock64();
  for (int i = 0; i < n; ++i) __syncthreads();
  if (threadIdx.x == 0) cyc[0] = clock64() - c0;
}

int main() {
  srand(1);
  int fails = 0, cases = 0;
  for (int c = 0; c < 200; ++c) {
    int bx = 1 + rand() % 96, by = 1 + rand() % 4;
    if (bx * by > 512) by = 1;
    int nthr = bx * by;
    int veu = ((nthr + 31) / 32) * 32 + 32 * (rand() % 3) + (rand() % 2 ? 0 : 7);
    if (veu > 1024) veu = 1024;
    int ntasks = 1 + rand() % 40, nveu = 1 + rand() % 8, rounds = 1 + rand() % 6, exit_mod = rand() % 4;
    int* d; cudaMalloc(&d, sizeof(int) * ntasks * rounds);
    cudaMemset(d, 0xff, sizeof(int) * ntasks * rounds);
    executor<<<nveu, veu, 64>>>(d, ntasks, dim3(bx, by), rounds, exit_mod);
    cudaError_t e = cudaDeviceSynchronize();
    std::vector<int> h(ntasks * rounds);
    cudaMemcpy(h.data(), d, sizeof(int) * h.size(), cudaMemcpyDeviceToHost);
    cudaFree(d);
    ++cases;
    if (e != cudaSuccess) { printf("case %d: CUDA error %s\n", c, cudaGetErrorString(e)); ++fails; break; }
    for (int b = 0; b < ntasks; ++b) {
      int total = 0;
      for (int r = 0; r < rounds; ++r) {
        int live = 0;
        for (int t = 0; t < nthr; ++t) {
          bool gone = exit_mod && t % exit_mod == 1 && (int)(t % 3) <= r;
          live += !gone;
        }
        total += live;
        if (h[b * rounds + r] != total) {
          if (fails < 5) printf("case %d block(%d,%d) veu %d task %d round %d: got %d want %d\n", c, bx, by, veu, b, r, h[b * rounds + r], total);
          ++fails; break;
        }
      }
    }
  }
  printf("barrier semantics: %d cases, %d failures\n", cases, fails);
  long long* cyc; cudaMalloc(&cyc, 8);
  int n = 100000;
  for (int threads : {64, 256, 1024}) {
    long long a, b;
    cost_rt<<<1, threads>>>(cyc, n, threads); cudaDeviceSynchronize(); cudaMemcpy(&a, cyc, 8, cudaMemcpyDeviceToHost);
    cost_sync<<<1, threads>>>(cyc, n); cudaDeviceSynchronize(); cudaMemcpy(&b, cyc, 8, cudaMemcpyDeviceToHost);
    cost_rt<<<1, threads + 32>>>(cyc, n, threads); cudaDeviceSynchronize(); long long s; cudaMemcpy(&s, cyc, 8, cudaMemcpyDeviceToHost);
    printf("threads %4d: rt::sync %.1f cycles, __syncthreads %.1f cycles, rt::sync with 32 surplus threads %.1f cycles\n",
           threads, (double)a / n, (double)b / n, (double)s / n);
  }
  return fails ? 1 : 0;
}
