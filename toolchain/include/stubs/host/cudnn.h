// <cudnn.h>: a vendor library header kernels do not need (toolchain/include/stubs/README.md). The parser (RT_PARSE)
// and the CPU emulator (RT_CPU_EMULATOR) get the types, enumerators and macros host code around kernels names,
// so that a file (or a local header) using the library parses and its device code builds; NVRTC gets nothing;
// any other compiler gets the real header.
#pragma once
#if defined(RT_PARSE) || defined(RT_CPU_EMULATOR)
#include "cuda_runtime.h"
typedef enum { CUDNN_STATUS_SUCCESS = 0, CUDNN_STATUS_NOT_INITIALIZED = 1, CUDNN_STATUS_BAD_PARAM = 3,
               CUDNN_STATUS_NOT_SUPPORTED = 9 } cudnnStatus_t;
typedef struct cudnnContext* cudnnHandle_t;
typedef struct cudnnTensorStruct* cudnnTensorDescriptor_t;
typedef struct cudnnFilterStruct* cudnnFilterDescriptor_t;
typedef struct cudnnConvolutionStruct* cudnnConvolutionDescriptor_t;
typedef void* cudnnBackendDescriptor_t;
typedef enum { CUDNN_DATA_FLOAT = 0, CUDNN_DATA_DOUBLE = 1, CUDNN_DATA_HALF = 2, CUDNN_DATA_BFLOAT16 = 9 } cudnnDataType_t;
typedef enum { CUDNN_TENSOR_NCHW = 0, CUDNN_TENSOR_NHWC = 1 } cudnnTensorFormat_t;
#define CUDNN_MAJOR 9
#define CUDNN_MINOR 0
#elif !defined(__CUDACC_RTC__)
#include_next <cudnn.h>
#endif
