// A whole program: host code, a runtime-API main and a header this machine does not have (cuBLAS).
#include <cstdio>
#include <cuda_runtime.h>
#include <cublas_v2.h>

__global__ void scale_add(float* y, const float* x, float a, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] += a * x[i];
}

static int check(cudaError_t err, const char* what) {
  if (err != cudaSuccess) {
    std::fprintf(stderr, "%s: %s\n", what, cudaGetErrorString(err));
    return 1;
  }
  return 0;
}

int main() {
  const int n = 1000;
  float* x = nullptr;
  float* y = nullptr;
  if (check(cudaMalloc(&x, n * sizeof(float)), "cudaMalloc x")) return 1;
  if (check(cudaMalloc(&y, n * sizeof(float)), "cudaMalloc y")) return 1;
  cudaMemset(x, 0, n * sizeof(float));
  cudaMemset(y, 0, n * sizeof(float));
  scale_add<<<(n + 255) / 256, 256>>>(y, x, 2.0f, n);
  const int bad = check(cudaDeviceSynchronize(), "scale_add");
  cudaFree(x);
  cudaFree(y);
  return bad;
}
