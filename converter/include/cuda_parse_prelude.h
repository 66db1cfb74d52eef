// cuda_parse_prelude.h — just enough of CUDA for libclang to parse device code without a CUDA toolkit.
// It declares; it never defines behaviour (the emulator and the real toolkit do that).
#pragma once
#define __global__ __attribute__((global))
#define __device__ __attribute__((device))
#define __host__ __attribute__((host))
#define __shared__ __attribute__((shared))
#define __constant__ __attribute__((constant))
#define __managed__ __attribute__((managed))
#define __launch_bounds__(...) __attribute__((launch_bounds(__VA_ARGS__)))
#define __forceinline__ inline __attribute__((always_inline))
#define __noinline__ __attribute__((noinline))
#define __align__(n) __attribute__((aligned(n)))
#define __restrict__ __restrict
#define __device_builtin__
#define __CUDACC__ 1
#define CUDART_INF_F __builtin_huge_valf()
#ifndef INFINITY
#define INFINITY __builtin_huge_valf()
#endif
#ifndef NAN
#define NAN __builtin_nanf("")
#endif
#ifndef FLT_MAX
#define FLT_MAX 3.402823466e+38F
#endif
typedef __SIZE_TYPE__ size_t;
struct uint3 { unsigned int x, y, z; };
struct dim3 {
  unsigned int x, y, z;
  __host__ __device__ dim3(unsigned int x = 1, unsigned int y = 1, unsigned int z = 1) : x(x), y(y), z(z) {}
  __host__ __device__ dim3(uint3 v) : x(v.x), y(v.y), z(v.z) {}
};
#define RT_VEC2(T, N) struct N##2 { T x, y; }; __host__ __device__ N##2 make_##N##2(T, T);
#define RT_VEC3(T, N) struct N##3 { T x, y, z; }; __host__ __device__ N##3 make_##N##3(T, T, T);
#define RT_VEC4(T, N) struct __attribute__((aligned(16))) N##4 { T x, y, z, w; }; __host__ __device__ N##4 make_##N##4(T, T, T, T);
RT_VEC2(float, float) RT_VEC3(float, float) RT_VEC4(float, float)
RT_VEC2(int, int) RT_VEC3(int, int) RT_VEC4(int, int)
RT_VEC2(unsigned int, uint) RT_VEC4(unsigned int, uint)
RT_VEC2(double, double) RT_VEC2(short, short) RT_VEC4(char, char) RT_VEC4(unsigned char, uchar)
RT_VEC2(long long, longlong) RT_VEC2(unsigned long long, ulonglong)
__host__ __device__ uint3 make_uint3(unsigned, unsigned, unsigned);
extern const __device__ uint3 threadIdx;
extern const __device__ uint3 blockIdx;
extern const __device__ dim3 blockDim;
extern const __device__ dim3 gridDim;
extern const __device__ int warpSize;
struct __half { unsigned short x; };
struct __half2 { __half x, y; };
struct __nv_bfloat16 { unsigned short x; };
typedef __half half;
__device__ void __syncthreads();
__device__ int __syncthreads_count(int);
__device__ int __syncthreads_and(int);
__device__ int __syncthreads_or(int);
__device__ void __syncwarp(unsigned mask = 0xffffffffu);
__device__ void __threadfence();
__device__ void __threadfence_block();
__device__ void __threadfence_system();
__device__ void __nanosleep(unsigned);
__device__ unsigned __activemask();
__device__ unsigned __ballot_sync(unsigned, int);
__device__ int __all_sync(unsigned, int);
__device__ int __any_sync(unsigned, int);
__device__ int __uni_sync(unsigned, int);
__device__ unsigned __match_any_sync(unsigned, int);
__device__ unsigned __reduce_add_sync(unsigned, unsigned);
__device__ unsigned __reduce_max_sync(unsigned, unsigned);
__device__ unsigned __reduce_min_sync(unsigned, unsigned);
template <class T> __device__ T __shfl_sync(unsigned, T, int, int = 32);
template <class T> __device__ T __shfl_up_sync(unsigned, T, unsigned, int = 32);
template <class T> __device__ T __shfl_down_sync(unsigned, T, unsigned, int = 32);
template <class T> __device__ T __shfl_xor_sync(unsigned, T, int, int = 32);
template <class T> __device__ T __ldg(const T*);
template <class T> __device__ T atomicAdd(T*, T);
template <class T> __device__ T atomicSub(T*, T);
template <class T> __device__ T atomicMax(T*, T);
template <class T> __device__ T atomicMin(T*, T);
template <class T> __device__ T atomicExch(T*, T);
template <class T> __device__ T atomicCAS(T*, T, T);
template <class T> __device__ T atomicAnd(T*, T);
template <class T> __device__ T atomicOr(T*, T);
template <class T> __device__ T atomicXor(T*, T);
__device__ unsigned atomicInc(unsigned*, unsigned);
__device__ unsigned atomicDec(unsigned*, unsigned);
__device__ long long clock64();
__device__ int __popc(unsigned); __device__ int __popcll(unsigned long long); __device__ int __clz(int);
__device__ int __ffs(int); __device__ unsigned __brev(unsigned); __device__ int __mul24(int, int);
__device__ unsigned __umulhi(unsigned, unsigned);
__device__ int __float_as_int(float); __device__ float __int_as_float(int);
__device__ unsigned __float_as_uint(float); __device__ float __uint_as_float(unsigned);
__device__ long long __double_as_longlong(double); __device__ double __longlong_as_double(long long);
#define RT_F1(n) __host__ __device__ float n(float); __host__ __device__ double n(double);
#define RT_F2(n) __host__ __device__ float n(float, float); __host__ __device__ double n(double, double);
RT_F1(expf) RT_F1(exp) RT_F1(__expf) RT_F1(exp2f) RT_F1(logf) RT_F1(log) RT_F1(__logf) RT_F1(log2f) RT_F1(log1pf)
RT_F1(sqrtf) RT_F1(sqrt) RT_F1(rsqrtf) RT_F1(tanhf) RT_F1(tanh) RT_F1(sinf) RT_F1(cosf) RT_F1(__sinf) RT_F1(__cosf)
RT_F1(fabsf) RT_F1(fabs) RT_F1(floorf) RT_F1(ceilf) RT_F1(truncf) RT_F1(roundf) RT_F1(erff) RT_F1(erf) RT_F1(erfcf)
RT_F1(__saturatef) RT_F1(__frcp_rn) RT_F1(abs)
RT_F2(fmaxf) RT_F2(fminf) RT_F2(fmax) RT_F2(fmin) RT_F2(powf) RT_F2(pow) RT_F2(__powf) RT_F2(__fdividef)
RT_F2(copysignf) RT_F2(fmodf) RT_F2(__fmul_rn) RT_F2(__fadd_rn) RT_F2(__fsub_rn) RT_F2(__fdiv_rn) RT_F2(atan2f)
__host__ __device__ float fmaf(float, float, float); __host__ __device__ double fma(double, double, double);
__host__ __device__ bool isnan(float); __host__ __device__ bool isinf(float); __host__ __device__ bool isfinite(float);
template <class T> __host__ __device__ T max(T, T);
template <class T> __host__ __device__ T min(T, T);
__host__ __device__ __half __float2half(float); __host__ __device__ float __half2float(__half);
__host__ __device__ __half __float2half_rn(float);
__host__ __device__ __half __hadd(__half, __half); __host__ __device__ __half __hmul(__half, __half);
__host__ __device__ __half2 __floats2half2_rn(float, float); __host__ __device__ float2 __half22float2(__half2);
__host__ __device__ float __bfloat162float(__nv_bfloat16); __host__ __device__ __nv_bfloat16 __float2bfloat16(float);
extern "C" __host__ __device__ int printf(const char*, ...);
extern "C" void* memcpy(void*, const void*, size_t);
extern "C" void* memset(void*, int, size_t);
#define assert(x) ((void)0)
// Texture / surface references (removed in CUDA 12; declared only so that the converter can refuse them).
// As in CUDA's own headers they are device_builtin types, so device code may name a file-scope texture variable
// without a clang error of its own: the converter's refusal at the texture read is the one report.
enum cudaTextureReadMode { cudaReadModeElementType = 0, cudaReadModeNormalizedFloat = 1 };
enum cudaTextureAddressMode { cudaAddressModeWrap = 0, cudaAddressModeClamp = 1, cudaAddressModeMirror = 2,
                              cudaAddressModeBorder = 3 };
enum cudaTextureFilterMode { cudaFilterModePoint = 0, cudaFilterModeLinear = 1 };
#define cudaTextureType1D 0x01
#define cudaTextureType2D 0x02
#define cudaTextureType3D 0x03
#define cudaTextureTypeCubemap 0x0C
#define cudaTextureType1DLayered 0xF1
#define cudaTextureType2DLayered 0xF2
#define cudaTextureTypeCubemapLayered 0xFC
template <class T, int dim = cudaTextureType1D, enum cudaTextureReadMode mode = cudaReadModeElementType>
struct __attribute__((device_builtin_texture_type)) texture { int normalized; cudaTextureFilterMode filterMode; cudaTextureAddressMode addressMode[3]; };
template <class T, enum cudaTextureReadMode m> __device__ T tex1Dfetch(texture<T, 1, m>, int);
template <class T, int d, enum cudaTextureReadMode m> __device__ T tex1D(texture<T, d, m>, float);
template <class T, int d, enum cudaTextureReadMode m> __device__ T tex2D(texture<T, d, m>, float, float);
template <class T, int d, enum cudaTextureReadMode m> __device__ T tex3D(texture<T, d, m>, float, float, float);
template <class T, int d = 1> struct __attribute__((device_builtin_surface_type)) surface { int dummy; };
typedef unsigned long long cudaTextureObject_t;
namespace cooperative_groups {
struct thread_group { __device__ void sync() const; __device__ unsigned thread_rank() const; __device__ unsigned size() const; };
struct thread_block : thread_group {
  __device__ uint3 group_index() const; __device__ uint3 thread_index() const; __device__ dim3 group_dim() const;
  __device__ dim3 dim_threads() const; __device__ unsigned num_threads() const;
};
struct grid_group : thread_group { __device__ bool is_valid() const; __device__ unsigned long long num_threads() const; };
template <unsigned N, class P = void> struct thread_block_tile : thread_group {
  template <class T> __device__ T shfl(T, int) const; template <class T> __device__ T shfl_down(T, unsigned) const;
  template <class T> __device__ T shfl_up(T, unsigned) const; template <class T> __device__ T shfl_xor(T, unsigned) const;
  __device__ unsigned ballot(int) const; __device__ int any(int) const; __device__ int all(int) const;
  __device__ unsigned meta_group_rank() const; __device__ unsigned meta_group_size() const; __device__ unsigned num_threads() const;
};
__device__ thread_block this_thread_block();
__device__ grid_group this_grid();
template <unsigned N, class P> __device__ thread_block_tile<N> tiled_partition(const P&);
template <class G> __device__ void sync(const G&);
template <class T> struct plus { __device__ T operator()(T, T) const; };
template <class T> struct greater { __device__ T operator()(T, T) const; };
template <class T> struct less { __device__ T operator()(T, T) const; };
template <class G, class T, class Op> __device__ T reduce(const G&, T, Op);
}  // namespace cooperative_groups
// Host API, declared so that host code in kernel files parses (rtransform never runs it).
typedef int cudaError_t;
typedef struct CUstream_st* cudaStream_t;
typedef struct CUevent_st* cudaEvent_t;
enum cudaMemcpyKind { cudaMemcpyHostToHost, cudaMemcpyHostToDevice, cudaMemcpyDeviceToHost, cudaMemcpyDeviceToDevice, cudaMemcpyDefault };
enum { cudaSuccess = 0 };
extern "C" int cudaConfigureCall(dim3, dim3, size_t = 0, cudaStream_t = 0);
template <class T> cudaError_t cudaMalloc(T**, size_t);
template <class T> cudaError_t cudaMallocManaged(T**, size_t, unsigned = 1);
cudaError_t cudaFree(void*);
cudaError_t cudaMemcpy(void*, const void*, size_t, cudaMemcpyKind);
cudaError_t cudaMemcpyAsync(void*, const void*, size_t, cudaMemcpyKind, cudaStream_t = 0);
cudaError_t cudaMemset(void*, int, size_t);
cudaError_t cudaDeviceSynchronize();
cudaError_t cudaGetLastError();
cudaError_t cudaPeekAtLastError();
const char* cudaGetErrorString(cudaError_t);
cudaError_t cudaEventCreate(cudaEvent_t*);
cudaError_t cudaEventRecord(cudaEvent_t, cudaStream_t = 0);
cudaError_t cudaEventSynchronize(cudaEvent_t);
cudaError_t cudaEventElapsedTime(float*, cudaEvent_t, cudaEvent_t);
cudaError_t cudaStreamCreate(cudaStream_t*);
cudaError_t cudaStreamSynchronize(cudaStream_t);
