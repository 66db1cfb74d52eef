// One level of a breadth-first search, written the way benchmark suites of the Fermi era wrote it: the kernels need
// atomics on shared memory, which compute capability 1.0 and 1.1 lacked, so the file compiles them only under
// __CUDA_ARCH__ >= 120 and leaves empty stubs for the older architectures (nvcc's device pass defines __CUDA_ARCH__;
// its host pass does not, and sees only the stubs' signatures to launch).
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>

#define DEGREE 4             // neighbours per vertex (a padded adjacency list)
#define UNVISITED 0x7fffffff

#if __CUDA_ARCH__ >= 120

__device__ __forceinline__ int relaxed_cost(const int* cost, const int* nbr, int v) {
  int best = cost[v];
  for (int j = 0; j < DEGREE; ++j) {
    int c = cost[nbr[v * DEGREE + j]];
    if (c != UNVISITED && c + 1 < best) best = c + 1;
  }
  return best;
}

// next[v] = min(cost[v], cost[u] + 1 over v's neighbours u); changed[b] = vertices of block b whose cost dropped.
__global__ void bfs_relax(const int* cost, const int* nbr, int* next, int* changed, int n) {
  __shared__ int block_changed;
  if (threadIdx.x == 0) block_changed = 0;
  __syncthreads();
  int v = blockIdx.x * blockDim.x + threadIdx.x;
  if (v < n) {
    int c = relaxed_cost(cost, nbr, v);
    next[v] = c;
    if (c != cost[v]) atomicAdd(&block_changed, 1);
  }
  __syncthreads();
  if (threadIdx.x == 0) changed[blockIdx.x] = block_changed;
}

#else

__global__ void bfs_relax(const int*, const int*, int*, int*, int) {}  // no shared atomics before sm_12

#endif

#define THREADS 64

int main(int argc, char** argv) {
  int n = argc > 1 ? atoi(argv[1]) : 250;
  int blocks = (n + THREADS - 1) / THREADS;
  int *cost, *nbr, *next, *changed;
  cudaMalloc(&cost, n * sizeof(int));
  cudaMalloc(&nbr, n * DEGREE * sizeof(int));
  cudaMalloc(&next, n * sizeof(int));
  cudaMalloc(&changed, blocks * sizeof(int));
  bfs_relax<<<blocks, THREADS>>>(cost, nbr, next, changed, n);
  cudaDeviceSynchronize();
  printf("done\n");
  return 0;
}
