// tinyblas: a small single-precision BLAS for CUDA (an example kernel library in the style of a third-party
// repository: a header of helper macros, device helpers and the host API, kernels with templated tile sizes).
#pragma once

#include <cstdio>
#include <cuda_runtime.h>

#define TB_CEIL_DIV(a, b) (((a) + (b) - 1) / (b))
#define TB_CHECK(call)                                                                   \
  do {                                                                                   \
    cudaError_t tb_err_ = (call);                                                        \
    if (tb_err_ != cudaSuccess) {                                                        \
      fprintf(stderr, "tinyblas: %s at %s:%d\n", cudaGetErrorString(tb_err_), __FILE__, \
              __LINE__);                                                                 \
    }                                                                                    \
  } while (0)
// element (r, c) of a row-major R x C matrix, 0 outside it (tiles at the edges)
#define TB_AT(P, r, c, R, C) (((r) < (R) && (c) < (C)) ? (P)[(size_t)(r) * (C) + (c)] : 0.0f)

namespace tinyblas {

enum class Epilogue { None = 0, Relu = 1 };

__device__ __forceinline__ float apply(float v, bool relu) { return relu && v < 0.0f ? 0.0f : v; }

// host API (tinyblas_sgemm.cu)
cudaError_t sgemm(int M, int N, int K, float alpha, const float* A, const float* B, const float* bias, float* C,
                  Epilogue epilogue, cudaStream_t stream);
cudaError_t bias_act(int rows, int cols, const float* bias, float* C, Epilogue epilogue, cudaStream_t stream);

}  // namespace tinyblas
