// out[r] = the sum of row r of in (n columns): one block per row, striding over it.
#include "common.h"

__global__ void row_sum(const float *in, float *out, int n) {
  const float *row = in + blockIdx.x * n;
  float acc = 0.0f;
  for (int i = threadIdx.x; i < n; i += blockDim.x) acc += row[i];
  float total = block_reduce(acc, Sum(), 0.0f);
  if (threadIdx.x == 0) out[blockIdx.x] = total;
}

int main() { return ceil_div(3, 2) == 2 ? 0 : 1; }
