// Average pooling with ceil-mode output size: edge windows are clipped and divided by their valid count.
#include <cuda_runtime.h>

__global__ void avgpool2d_ceil(const float* __restrict__ in, float* __restrict__ out, int planes, int H, int W,
                               int OH, int OW, int K, int S) {
  const int idx = blockIdx.x * blockDim.x + threadIdx.x;
  if (idx >= planes * OH * OW) return;
  const int ow = idx % OW, oh = (idx / OW) % OH, plane = idx / (OW * OH);
  const int h0 = oh * S, w0 = ow * S;
  const int h1 = h0 + K < H ? h0 + K : H;
  const int w1 = w0 + K < W ? w0 + K : W;
  float sum = 0.f;
  for (int h = h0; h < h1; ++h)
    for (int w = w0; w < w1; ++w) sum += in[(plane * H + h) * W + w];
  out[idx] = sum / (float)((h1 - h0) * (w1 - w0));
}
