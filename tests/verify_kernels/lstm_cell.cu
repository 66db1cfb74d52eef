// LSTM cell pointwise stage: gates [batch, 4 * hidden] in i, f, o, g order -> new c and h.
#include <cuda_runtime.h>

__device__ __forceinline__ float sigmoidf_(float x) { return 1.f / (1.f + expf(-x)); }

__global__ void lstm_cell_pointwise(const float* __restrict__ gates, const float* __restrict__ c_prev,
                                    float* __restrict__ h, float* __restrict__ c, int batch, int hidden) {
  const int j = blockIdx.x * blockDim.x + threadIdx.x;
  const int b = blockIdx.y;
  if (j >= hidden || b >= batch) return;
  const float* g = gates + (size_t)b * 4 * hidden;
  const float i = sigmoidf_(g[j]);
  const float f = sigmoidf_(g[hidden + j]);
  const float o = sigmoidf_(g[2 * hidden + j]);
  const float gg = tanhf(g[3 * hidden + j]);
  const float cn = f * c_prev[b * hidden + j] + i * gg;
  c[b * hidden + j] = cn;
  h[b * hidden + j] = o * tanhf(cn);
}
