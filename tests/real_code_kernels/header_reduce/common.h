// Team-written reduction helpers in the style of llm.c's common.h: device functions that need the whole block
// (threadIdx, a __shared__ scratch array, __syncthreads, warp shuffles), beside host helpers.
#pragma once

struct Sum {
  __device__ float operator()(float a, float b) const { return a + b; }
};
struct Max {
  __device__ float operator()(float a, float b) const { return fmaxf(a, b); }
};

// op over the 32 lanes of the calling warp, in every lane
template <class Op>
__device__ float warp_reduce(float v, Op op) {
  for (int o = 16; o > 0; o >>= 1) v = op(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

// op over the block, in every thread; blockDim.x a multiple of 32
template <class Op>
__device__ float block_reduce(float v, Op op, float identity) {
  __shared__ float scratch[32];
  int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
  v = warp_reduce(v, op);
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  v = lane < warps ? scratch[lane] : identity;
  v = warp_reduce(v, op);
  __syncthreads();  // scratch is free for the next call
  return v;
}

inline int ceil_div(int a, int b) { return (a + b - 1) / b; }
