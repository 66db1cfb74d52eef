// Kernels of an application that keeps its block-wide helpers as classes beside them (written for this project
// in that style): members read the thread indices, shuffle, synchronise and keep __shared__ staging buffers; one
// member is defined outside its class template, one is static, members call members.
#include <cuda_runtime.h>

#define WARP 32

template <int BLOCK>
struct BlockSum {
  static_assert(BLOCK % WARP == 0, "whole warps");
  float *partial;  // BLOCK / WARP floats of shared memory, owned by the kernel

  __device__ int lane() const { return threadIdx.x % WARP; }
  __device__ int warp() const { return threadIdx.x / WARP; }
  __device__ float warp_sum(float v) const {
    for (int o = WARP / 2; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
  }
  __device__ float sum(float v);  // defined below, outside the class
  static __device__ unsigned first_index() { return blockIdx.x * BLOCK; }
};

template <int BLOCK>
__device__ float BlockSum<BLOCK>::sum(float v) {
  v = warp_sum(v);
  if (lane() == 0) partial[warp()] = v;
  __syncthreads();
  float t = 0.0f;
  for (int w = 0; w < BLOCK / WARP; ++w) t += partial[w];
  __syncthreads();
  return t;
}

// Each block of BLOCK values subtracts its mean.
template <int BLOCK>
__global__ void center_rows(const float *in, float *out, int n) {
  __shared__ float partial[BLOCK / WARP];
  BlockSum<BLOCK> bs{partial};
  const unsigned i = BlockSum<BLOCK>::first_index() + threadIdx.x;
  float v = i < n ? in[i] : 0.0f;
  float mean = bs.sum(v) / BLOCK;
  if (i < n) out[i] = v - mean;
}
template __global__ void center_rows<64>(const float *, float *, int);
template __global__ void center_rows<128>(const float *, float *, int);

// A plain class: a member with its own static __shared__ staging buffer, called through another member.
struct Stager {
  const float *src;
  __device__ float neighbour_sum(int i, int n) {
    __shared__ float stage[256];
    stage[threadIdx.x] = i < n ? src[i] : 0.0f;
    __syncthreads();
    float r = stage[threadIdx.x] + stage[(threadIdx.x + 1) % blockDim.x];
    __syncthreads();
    return r;
  }
  __device__ float doubled(int i, int n) { return 2.0f * neighbour_sum(i, n); }
};

__global__ void pair_sums(const float *in, float *out, int n) {
  Stager s{in};
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  float r = s.doubled(i, n);
  if (i < n) out[i] = r;
}

void launch_center(const float *in, float *out, int n, cudaStream_t stream) {
  center_rows<128><<<(n + 127) / 128, 128, 0, stream>>>(in, out, n);
  pair_sums<<<(n + 255) / 256, 256, 0, stream>>>(in, out, n);
}
