// Depthwise 2-D convolution (NCHW, one filter per channel) with stride and padding, grid-stride over outputs.
#include <cuda_runtime.h>

__global__ void depthwise_conv2d_nchw(const float* __restrict__ input, const float* __restrict__ weight,
                                      const float* __restrict__ bias, float* __restrict__ output, int N, int C,
                                      int H, int W, int OH, int OW, int KH, int KW, int stride, int pad) {
  const int total = N * C * OH * OW;
  for (int idx = blockIdx.x * blockDim.x + threadIdx.x; idx < total; idx += gridDim.x * blockDim.x) {
    const int ow = idx % OW;
    const int oh = (idx / OW) % OH;
    const int c = (idx / (OW * OH)) % C;
    const int n = idx / (OW * OH * C);
    float acc = bias[c];
    for (int kh = 0; kh < KH; ++kh) {
      const int ih = oh * stride - pad + kh;
      if (ih < 0 || ih >= H) continue;
      for (int kw = 0; kw < KW; ++kw) {
        const int iw = ow * stride - pad + kw;
        if (iw < 0 || iw >= W) continue;
        acc += input[((n * C + c) * H + ih) * W + iw] * weight[(c * KH + kh) * KW + kw];
      }
    }
    output[idx] = acc;
  }
}
