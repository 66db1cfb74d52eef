// A whole program: cuBLAS GEMM then a bias + GELU epilogue kernel, with host code, timing and error checks.
// Only the kernel is verified; the device-code slicer must drop main, the host globals and cublas_v2.h.
#include <cstdio>
#include <cstdlib>
#include <cuda_runtime.h>
#include <cublas_v2.h>

#define CUDA_CHECK(call)                                                              \
  do {                                                                                \
    cudaError_t err_ = (call);                                                        \
    if (err_ != cudaSuccess) {                                                        \
      fprintf(stderr, "CUDA error %s at %s:%d\n", cudaGetErrorString(err_), __FILE__, __LINE__); \
      exit(1);                                                                        \
    }                                                                                 \
  } while (0)

static cublasHandle_t g_handle;
float* d_workspace = nullptr;
const float kSqrt2OverPi = 0.7978845608f;

__device__ __forceinline__ float gelu(float x) {
  return 0.5f * x * (1.f + tanhf(kSqrt2OverPi * (x + 0.044715f * x * x * x)));
}

__global__ void add_bias_gelu(float* out, const float* __restrict__ bias, int rows, int cols) {
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < rows * cols; i += blockDim.x * gridDim.x)
    out[i] = gelu(out[i] + bias[i % cols]);
}

static float time_ms(cudaEvent_t a, cudaEvent_t b) {
  float ms = 0.f;
  cudaEventElapsedTime(&ms, a, b);
  return ms;
}

int main(int argc, char** argv) {
  const int M = 64, N = 96, K = 32;
  float *dA, *dB, *dC, *dBias;
  CUDA_CHECK(cudaMalloc(&dA, M * K * sizeof(float)));
  CUDA_CHECK(cudaMalloc(&dB, K * N * sizeof(float)));
  CUDA_CHECK(cudaMalloc(&dC, M * N * sizeof(float)));
  CUDA_CHECK(cudaMalloc(&dBias, N * sizeof(float)));
  cublasCreate(&g_handle);
  const float alpha = 1.f, beta = 0.f;
  cudaEvent_t start, stop;
  cudaEventCreate(&start);
  cudaEventCreate(&stop);
  cudaEventRecord(start);
  cublasSgemm(g_handle, CUBLAS_OP_N, CUBLAS_OP_N, N, M, K, &alpha, dB, N, dA, K, &beta, dC, N);
  add_bias_gelu<<<(M * N + 255) / 256, 256>>>(dC, dBias, M, N);
  cudaEventRecord(stop);
  cudaEventSynchronize(stop);
  printf("gemm + epilogue: %.3f ms\n", time_ms(start, stop));
  cublasDestroy(g_handle);
  cudaFree(dA);
  cudaFree(dB);
  cudaFree(dC);
  cudaFree(dBias);
  return 0;
}
