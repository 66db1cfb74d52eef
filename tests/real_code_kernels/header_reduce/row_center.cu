// out = in minus the maximum of its row (n columns): one block per row; each warp's maximum first, then the block's.
#include "common.h"

__global__ void row_center(const float *in, float *out, int n) {
  const float *row = in + blockIdx.x * n;
  float m = -3.0e38f;
  for (int i = threadIdx.x; i < n; i += blockDim.x) m = fmaxf(m, row[i]);
  float warp_max = warp_reduce(m, Max());
  float row_max = block_reduce(warp_max, Max(), -3.0e38f);
  for (int i = threadIdx.x; i < n; i += blockDim.x) out[blockIdx.x * n + i] = row[i] - row_max;
}

int main() { return ceil_div(4, 2) == 2 ? 0 : 1; }
