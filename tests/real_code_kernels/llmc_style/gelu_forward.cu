// A kernel file in llm.c's dev/cuda style: everything host-side comes from common.h.
#include "common.h"

__global__ void gelu_forward(float *out, const float *inp, int N) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < N) out[i] = gelu_tanh(inp[i]);
}

int main() {
  setup_main();
  int N = 1000;
  float *x = make_random_float(N);
  float *d_x;
  cudaCheck(cudaMalloc(&d_x, N * sizeof(float)));
  gelu_forward<<<ceil_div(N, 128), 128>>>(d_x, d_x, N);
  free(x);
  return 0;
}
