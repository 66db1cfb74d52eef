// Direct 3x3 convolution (NCHW, pad 1, stride 1): each 8x8 block stages an input tile with halo in shared
// memory, one input channel at a time; blockIdx.z enumerates (image, output channel).
#include <cuda_runtime.h>

#define TILE 8
#define KS 3
#define R (KS / 2)

__global__ void conv2d_tiled(const float* __restrict__ in, const float* __restrict__ w, const float* __restrict__ bias,
                             float* __restrict__ out, int IC, int OC, int H, int W) {
  __shared__ float tile[TILE + KS - 1][TILE + KS - 1];
  const int ox = blockIdx.x * TILE + threadIdx.x;
  const int oy = blockIdx.y * TILE + threadIdx.y;
  const int n = blockIdx.z / OC, oc = blockIdx.z % OC;
  const int tid = threadIdx.y * TILE + threadIdx.x;
  float acc = bias[oc];
  for (int ic = 0; ic < IC; ++ic) {
    const float* src = in + ((size_t)n * IC + ic) * H * W;
    for (int i = tid; i < (TILE + KS - 1) * (TILE + KS - 1); i += TILE * TILE) {
      const int ly = i / (TILE + KS - 1), lx = i % (TILE + KS - 1);
      const int gy = blockIdx.y * TILE + ly - R, gx = blockIdx.x * TILE + lx - R;
      tile[ly][lx] = (gy >= 0 && gy < H && gx >= 0 && gx < W) ? src[gy * W + gx] : 0.f;
    }
    __syncthreads();
    const float* wk = w + ((size_t)oc * IC + ic) * KS * KS;
    for (int ky = 0; ky < KS; ++ky)
      for (int kx = 0; kx < KS; ++kx) acc += tile[threadIdx.y + ky][threadIdx.x + kx] * wk[ky * KS + kx];
    __syncthreads();
  }
  if (ox < W && oy < H) out[(((size_t)n * OC + oc) * H + oy) * W + ox] = acc;
}
