#include <unistd.h>
#include <cuda_runtime.h>

__global__ void square(float *x, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) x[i] = x[i] * x[i];
}

int main() { return (int)getpid() < 0; }
