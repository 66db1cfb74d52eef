// A project's common header (llm.c dev/cuda style): vendor libraries, host helpers, and one device helper.
#pragma once
#include <stdlib.h>
#include <stdio.h>
#include <math.h>
#include <cuda_runtime.h>
#include <cublas_v2.h>
#include <cublasLt.h>
#include <nvtx3/nvToolsExt.h>

static cublasComputeType_t cublas_compute = CUBLAS_COMPUTE_32F;
static cublasHandle_t cublas_handle;
static cublasLtHandle_t cublaslt_handle;
static size_t workspace_bytes = 32 * 1024 * 1024;

template <class T> T ceil_div(T a, T b) { return (a + b - 1) / b; }

void cuda_check(cudaError_t err, const char *file, int line) {
  if (err != cudaSuccess) { printf("[CUDA ERROR] at %s:%d: %s\n", file, line, cudaGetErrorString(err)); exit(1); }
}
#define cudaCheck(err) (cuda_check(err, __FILE__, __LINE__))

void cublas_check(cublasStatus_t status, const char *file, int line) {
  if (status != CUBLAS_STATUS_SUCCESS) { printf("[cuBLAS ERROR] %d at %s:%d\n", status, file, line); exit(1); }
}
#define cublasCheck(status) (cublas_check((status), __FILE__, __LINE__))

void setup_main() {
  nvtxRangePush("setup");
  cublasCheck(cublasCreate(&cublas_handle));
  cublasCheck(cublasLtCreate(&cublaslt_handle));
  cublasCheck(cublasSetMathMode(cublas_handle, CUBLAS_TF32_TENSOR_OP_MATH));
  nvtxRangePop();
}

float *make_random_float(size_t n) {
  float *x = (float *)malloc(n * sizeof(float));
  for (size_t i = 0; i < n; i++) x[i] = ((float)rand() / RAND_MAX) * 2.0f - 1.0f;
  return x;
}

__device__ inline float gelu_tanh(float x) {
  const float c = 0.7978845608f;
  return 0.5f * x * (1.0f + tanhf(c * (x + 0.044715f * x * x * x)));
}
