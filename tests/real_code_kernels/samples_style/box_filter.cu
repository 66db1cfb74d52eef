#include <cooperative_groups.h>
namespace cg = cooperative_groups;
#include "Common.h"

// Each block of BLOCK_SIZE * BLOCK_SIZE threads averages each row of its tile.
__global__ void box_rows(float *out, const float *in) {
  cg::thread_block cta = cg::this_thread_block();
  __shared__ float tile[BLOCK_SIZE * BLOCK_SIZE];
  const int base = blockIdx.x * BLOCK_SIZE * BLOCK_SIZE;
  const int t = threadIdx.y * BLOCK_SIZE + threadIdx.x;
  tile[t] = in[base + t];
  cg::sync(cta);
  float acc = 0.0f;
  for (int i = 0; i < BLOCK_SIZE; i++) acc += tile[threadIdx.y * BLOCK_SIZE + i];
  out[base + t] = acc / BLOCK_SIZE;
}

int main(int argc, char **argv) {
  int dev = findCudaDevice(argc, (const char **)argv);
  StopWatchInterface *timer = nullptr;
  sdkCreateTimer(&timer);
  float *d = nullptr;
  checkCudaErrors(cudaMalloc(&d, 1024));
  box_rows<<<4, dim3(BLOCK_SIZE, BLOCK_SIZE)>>>(d, d);
  getLastCudaError("box_rows failed");
  return dev;
}
