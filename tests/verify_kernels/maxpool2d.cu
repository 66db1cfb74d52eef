// Max pooling (NCHW) with argmax indices; 2-D thread blocks over the output plane, one grid z-slice per plane.
#include <cuda_runtime.h>
#include <float.h>

__global__ void maxpool2d_nchw(const float* __restrict__ in, float* __restrict__ out, int* __restrict__ argmax,
                               int H, int W, int OH, int OW, int K, int S, int P) {
  const int ow = blockIdx.x * blockDim.x + threadIdx.x;
  const int oh = blockIdx.y * blockDim.y + threadIdx.y;
  const int plane = blockIdx.z;
  if (ow >= OW || oh >= OH) return;
  const float* src = in + plane * H * W;
  float best = -FLT_MAX;
  int best_i = -1;
  for (int kh = 0; kh < K; ++kh) {
    const int ih = oh * S - P + kh;
    for (int kw = 0; kw < K; ++kw) {
      const int iw = ow * S - P + kw;
      if (ih >= 0 && ih < H && iw >= 0 && iw < W && src[ih * W + iw] > best) {
        best = src[ih * W + iw];
        best_i = ih * W + iw;
      }
    }
  }
  out[(plane * OH + oh) * OW + ow] = best;
  argmax[(plane * OH + oh) * OW + ow] = best_i;
}
