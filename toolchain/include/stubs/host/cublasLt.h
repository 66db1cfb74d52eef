// <cublasLt.h>: a vendor library header kernels do not need (toolchain/include/stubs/README.md). The parser (RT_PARSE)
// and the CPU emulator (RT_CPU_EMULATOR) get the types, enumerators and macros host code around kernels names,
// so that a file (or a local header) using the library parses and its device code builds; NVRTC gets nothing;
// any other compiler gets the real header.
#pragma once
#if defined(RT_PARSE) || defined(RT_CPU_EMULATOR)
#include "cublas_api.h"
typedef struct cublasLtContext* cublasLtHandle_t;
typedef struct cublasLtMatmulDescOpaque_st* cublasLtMatmulDesc_t;
typedef struct cublasLtMatrixLayoutOpaque_st* cublasLtMatrixLayout_t;
typedef struct cublasLtMatmulPreferenceOpaque_st* cublasLtMatmulPreference_t;
typedef struct { unsigned long long data[8]; } cublasLtMatmulAlgo_t;
typedef struct { cublasLtMatmulAlgo_t algo; size_t workspaceSize; cublasStatus_t state; float wavesCount;
                 int reserved[4]; } cublasLtMatmulHeuristicResult_t;
typedef enum { CUBLASLT_MATMUL_DESC_TRANSA = 3, CUBLASLT_MATMUL_DESC_TRANSB = 4, CUBLASLT_MATMUL_DESC_EPILOGUE = 7,
               CUBLASLT_MATMUL_DESC_BIAS_POINTER = 8, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER = 12,
               CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD = 13 } cublasLtMatmulDescAttributes_t;
typedef enum { CUBLASLT_EPILOGUE_DEFAULT = 1, CUBLASLT_EPILOGUE_RELU = 2, CUBLASLT_EPILOGUE_BIAS = 4,
               CUBLASLT_EPILOGUE_RELU_BIAS = 6, CUBLASLT_EPILOGUE_GELU = 32, CUBLASLT_EPILOGUE_GELU_BIAS = 36,
               CUBLASLT_EPILOGUE_GELU_AUX = 160, CUBLASLT_EPILOGUE_GELU_AUX_BIAS = 164,
               CUBLASLT_EPILOGUE_BGRADB = 512 } cublasLtEpilogue_t;
typedef enum { CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES = 1 } cublasLtMatmulPreferenceAttributes_t;
typedef enum { CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT = 5,
               CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET = 6 } cublasLtMatrixLayoutAttribute_t;
#elif !defined(__CUDACC_RTC__)
#include_next <cublasLt.h>
#endif
