// LayerNorm forward (llm.c style): one block per row, shuffle reductions, dynamic shared memory for warps.
#include <cuda_runtime.h>

__global__ void layernorm_forward(float* __restrict__ out, float* __restrict__ mean, float* __restrict__ rstd,
                                  const float* __restrict__ inp, const float* __restrict__ weight,
                                  const float* __restrict__ bias, int N, int C) {
  extern __shared__ float partial[];  // 2 floats per warp
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, nwarps = blockDim.x >> 5;
  const int row = blockIdx.x;
  const float* x = inp + row * C;
  float s = 0.f, ss = 0.f;
  for (int i = tid; i < C; i += blockDim.x) {
    const float v = x[i];
    s += v;
    ss += v * v;
  }
  for (int o = 16; o > 0; o >>= 1) {
    s += __shfl_down_sync(0xffffffff, s, o);
    ss += __shfl_down_sync(0xffffffff, ss, o);
  }
  if (lane == 0) {
    partial[warp] = s;
    partial[nwarps + warp] = ss;
  }
  __syncthreads();
  if (tid == 0) {
    float ts = 0.f, tss = 0.f;
    for (int w = 0; w < nwarps; ++w) {
      ts += partial[w];
      tss += partial[nwarps + w];
    }
    const float m = ts / C;
    const float var = tss / C - m * m;
    const float r = rsqrtf(var + 1e-5f);
    partial[0] = m;
    partial[1] = r;
    mean[row] = m;
    rstd[row] = r;
  }
  __syncthreads();
  const float m = partial[0], r = partial[1];
  for (int i = tid; i < C; i += blockDim.x) out[row * C + i] = (x[i] - m) * r * weight[i] + bias[i];
}
