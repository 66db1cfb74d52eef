// cuda_parse_prelude.h — just enough of CUDA for libclang to parse device code without a CUDA toolkit.
// It declares; it never defines behaviour (the emulator and the real toolkit do that).
#pragma once
// size_t, NULL. The C/C++ library headers nvcc's cuda_runtime.h also brings are left to the source's own
// #includes (parsing <cmath> in every file would cost ten times the conversion): the device declarations below
// are separate overloads from the host ones those headers declare, so both orders parse.
#include <stddef.h>
#include <stdint.h>
// <limits.h> is macros only, and nvcc's implicit cuda_runtime.h brings it: kernels name UINT_MAX, INT_MAX with no
// #include of their own (`nvcc -E` of a file that includes nothing shows it).
#include <limits.h>
#define __global__ __attribute__((global))
#define __device__ __attribute__((device))
#define __host__ __attribute__((host))
#define __shared__ __attribute__((shared))
#define __constant__ __attribute__((constant))
#define __managed__ __attribute__((managed))
#define __launch_bounds__(...) __attribute__((launch_bounds(__VA_ARGS__)))
#define __forceinline__ inline __attribute__((always_inline))
// __noinline__: a keyword of clang in CUDA mode (a macro would break libstdc++'s __attribute__((__noinline__)))
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
struct uint3 { unsigned int x, y, z; };  // uint3 first: dim3 converts from it (make_uint3 below)
struct dim3 {
  unsigned int x, y, z;
  __host__ __device__ dim3(unsigned int x = 1, unsigned int y = 1, unsigned int z = 1) : x(x), y(y), z(z) {}
  __host__ __device__ dim3(uint3 v) : x(v.x), y(v.y), z(v.z) {}
};
// CUDA's vector types (vector_types.h), each with its make_ function: the 2- and 4-vectors aligned as CUDA aligns
// them (char2 2 bytes ... float4 16; at most 16), the 1- and 3-vectors as their element
#define RT_VEC1(T, N) struct N##1 { T x; }; __host__ __device__ N##1 make_##N##1(T);
#define RT_VEC2(T, N, A) struct __attribute__((aligned(A))) N##2 { T x, y; }; __host__ __device__ N##2 make_##N##2(T, T);
#define RT_VEC3(T, N) struct N##3 { T x, y, z; }; __host__ __device__ N##3 make_##N##3(T, T, T);
#define RT_VEC4(T, N, A) struct __attribute__((aligned(A))) N##4 { T x, y, z, w; }; \
  __host__ __device__ N##4 make_##N##4(T, T, T, T);
#define RT_VECS(T, N, A2, A4) RT_VEC1(T, N) RT_VEC2(T, N, A2) RT_VEC4(T, N, A4)
RT_VECS(signed char, char, 2, 4) RT_VECS(unsigned char, uchar, 2, 4) RT_VECS(short, short, 4, 8)
RT_VECS(unsigned short, ushort, 4, 8) RT_VECS(int, int, 8, 16) RT_VECS(unsigned int, uint, 8, 16)
RT_VECS(long, long, 16, 16) RT_VECS(unsigned long, ulong, 16, 16) RT_VECS(long long, longlong, 16, 16)
RT_VECS(unsigned long long, ulonglong, 16, 16) RT_VECS(float, float, 8, 16) RT_VECS(double, double, 16, 16)
RT_VEC3(signed char, char) RT_VEC3(unsigned char, uchar) RT_VEC3(short, short) RT_VEC3(unsigned short, ushort)
RT_VEC3(int, int) RT_VEC3(long, long) RT_VEC3(unsigned long, ulong) RT_VEC3(long long, longlong)
RT_VEC3(unsigned long long, ulonglong) RT_VEC3(float, float) RT_VEC3(double, double)
__host__ __device__ uint3 make_uint3(unsigned, unsigned, unsigned);
extern const __device__ uint3 threadIdx;
extern const __device__ uint3 blockIdx;
extern const __device__ dim3 blockDim;
extern const __device__ dim3 gridDim;
extern const __device__ int warpSize;
// 16-bit floats convert to and from float implicitly, as cuda_fp16.h / cuda_bf16.h declare them
#define RT_F16(T) struct T { unsigned short __x; T() = default; __host__ __device__ T(float); __host__ __device__ T(double); \
  __host__ __device__ T(int); __host__ __device__ T(unsigned); __host__ __device__ operator float() const; };
RT_F16(__half) RT_F16(__nv_bfloat16)
#undef RT_F16
struct __half2 { __half x, y; };
struct __nv_bfloat162 { __nv_bfloat16 x, y; };
typedef __half2 half2;
typedef __half half;
typedef __nv_bfloat16 nv_bfloat16;
typedef __nv_bfloat162 nv_bfloat162;
// <math.h>'s constants (glibc under _DEFAULT_SOURCE, which g++ and nvcc's host pass set): device code uses them
// through cuda_runtime.h's include of math.h
#define M_PI 3.14159265358979323846
#define M_SQRT2 1.41421356237309504880
#define M_E 2.7182818284590452354
#define M_LN2 0.69314718055994530942
#define M_LOG2E 1.4426950408889634074
#define M_LOG10E 0.43429448190325182765
#define M_LN10 2.30258509299404568402
#define M_PI_2 1.57079632679489661923
#define M_PI_4 0.78539816339744830962
#define M_1_PI 0.31830988618379067154
#define M_2_PI 0.63661977236758134308
#define M_2_SQRTPI 1.12837916709551257390
#define M_SQRT1_2 0.70710678118654752440
__device__ void __syncthreads();
__device__ int __syncthreads_count(int);
__device__ int __syncthreads_and(int);
__device__ int __syncthreads_or(int);
__device__ void __syncwarp(unsigned mask = 0xffffffffu);
__device__ void __threadfence();
__device__ void __threadfence_block();
__device__ void __threadfence_system();
__device__ void __nanosleep(unsigned);
__device__ void __trap(); __device__ void __brkpt();
__device__ unsigned __activemask();
__device__ unsigned __ballot_sync(unsigned, int);
__device__ int __all_sync(unsigned, int);
__device__ int __any_sync(unsigned, int);
__device__ int __uni_sync(unsigned, int);
__device__ unsigned __match_any_sync(unsigned, int);
__device__ unsigned __reduce_add_sync(unsigned, unsigned);
__device__ unsigned __reduce_max_sync(unsigned, unsigned);
__device__ unsigned __reduce_min_sync(unsigned, unsigned);
template <class T> __device__ T __shfl_sync(unsigned, T v, int, int = 32) { return v; }
template <class T> __device__ T __shfl_up_sync(unsigned, T v, unsigned, int = 32) { return v; }
template <class T> __device__ T __shfl_down_sync(unsigned, T v, unsigned, int = 32) { return v; }
template <class T> __device__ T __shfl_xor_sync(unsigned, T v, int, int = 32) { return v; }
template <class T> __device__ T __ldg(const T*);
// cache-hinted loads and stores (defined trivially: a local vector type has no linkage)
template <class T> __device__ T __ldcg(const T* p) { return *p; }
template <class T> __device__ T __ldca(const T* p) { return *p; }
template <class T> __device__ T __ldcs(const T* p) { return *p; }
template <class T> __device__ T __ldlu(const T* p) { return *p; }
template <class T> __device__ T __ldcv(const T* p) { return *p; }
template <class T> __device__ void __stwb(T* p, T v) { *p = v; }
template <class T> __device__ void __stcg(T* p, T v) { *p = v; }
template <class T> __device__ void __stcs(T* p, T v) { *p = v; }
template <class T> __device__ void __stwt(T* p, T v) { *p = v; }
// address-space conversions (cuda's sm_20_intrinsics.h): a generic pointer's shared/global address for inline PTX
__device__ size_t __cvta_generic_to_shared(const void*); __device__ size_t __cvta_generic_to_global(const void*);
__device__ void* __cvta_shared_to_generic(size_t); __device__ void* __cvta_global_to_generic(size_t);
__device__ unsigned __isShared(const void*); __device__ unsigned __isGlobal(const void*);
// Atomics: CUDA's overload sets (a literal argument converts to the pointee type: atomicAdd(unsigned*, 1)),
// with the _block and _system scopes.
#define RT_AT(R, n, ...) __device__ R n(__VA_ARGS__); __device__ R n##_block(__VA_ARGS__); __device__ R n##_system(__VA_ARGS__);
#define RT_AT_INT(n) RT_AT(int, n, int*, int) RT_AT(unsigned, n, unsigned*, unsigned) \
  RT_AT(unsigned long long, n, unsigned long long*, unsigned long long)
RT_AT_INT(atomicAdd) RT_AT(float, atomicAdd, float*, float) RT_AT(double, atomicAdd, double*, double)
RT_AT(__half, atomicAdd, __half*, __half) RT_AT(__half2, atomicAdd, __half2*, __half2)
RT_AT(__nv_bfloat16, atomicAdd, __nv_bfloat16*, __nv_bfloat16)
RT_AT(int, atomicSub, int*, int) RT_AT(unsigned, atomicSub, unsigned*, unsigned)
RT_AT_INT(atomicExch) RT_AT(float, atomicExch, float*, float)
RT_AT_INT(atomicMin) RT_AT(long long, atomicMin, long long*, long long)
RT_AT_INT(atomicMax) RT_AT(long long, atomicMax, long long*, long long)
RT_AT_INT(atomicAnd) RT_AT_INT(atomicOr) RT_AT_INT(atomicXor)
RT_AT(int, atomicCAS, int*, int, int) RT_AT(unsigned, atomicCAS, unsigned*, unsigned, unsigned)
RT_AT(unsigned long long, atomicCAS, unsigned long long*, unsigned long long, unsigned long long)
RT_AT(unsigned short, atomicCAS, unsigned short*, unsigned short, unsigned short)
RT_AT(unsigned, atomicInc, unsigned*, unsigned) RT_AT(unsigned, atomicDec, unsigned*, unsigned)
#undef RT_AT_INT
#undef RT_AT
__device__ long long clock64();
typedef long clock_t;     // <time.h>'s (long on Linux): device code names it without the header (sliced away)
__device__ clock_t clock();  // an overload beside the host one of <time.h>
#define CUDART_CB        // stream-callback calling convention: nothing on Linux
__device__ int __popc(unsigned); __device__ int __popcll(unsigned long long); __device__ int __clz(int);
__device__ int __ffs(int); __device__ unsigned __brev(unsigned); __device__ int __mul24(int, int);
__device__ unsigned __umulhi(unsigned, unsigned);
__device__ int __float_as_int(float); __device__ float __int_as_float(int);
__device__ unsigned __float_as_uint(float); __device__ float __uint_as_float(unsigned);
__device__ long long __double_as_longlong(double); __device__ double __longlong_as_double(long long);
// Math: device-only declarations, so that the host ones of the C/C++ library (included above, as nvcc's
// force-included cuda_runtime.h does) stay separate overloads (clang's CUDA overloading by target). C names
// carry their C signature only (sqrtf(float): `sqrtf(n)` with an int n is no ambiguity); the C++ float/double
// overloads are separate declarations; integer arguments to the C++ names go through libstdc++'s templates.
#define RT_C1(n) extern "C" __device__ float n##f(float) noexcept; extern "C" __device__ double n(double) noexcept; \
  __device__ float n(float);
#define RT_C2(n) extern "C" __device__ float n##f(float, float) noexcept; \
  extern "C" __device__ double n(double, double) noexcept; __device__ float n(float, float);
RT_C1(exp) RT_C1(exp2) RT_C1(exp10) RT_C1(expm1) RT_C1(log) RT_C1(log2) RT_C1(log10) RT_C1(log1p) RT_C1(logb)
RT_C1(sqrt) RT_C1(rsqrt) RT_C1(cbrt) RT_C1(rcbrt) RT_C1(sin) RT_C1(cos) RT_C1(tan) RT_C1(asin) RT_C1(acos)
RT_C1(atan) RT_C1(sinh) RT_C1(cosh) RT_C1(tanh) RT_C1(asinh) RT_C1(acosh) RT_C1(atanh) RT_C1(sinpi) RT_C1(cospi)
RT_C1(fabs) RT_C1(floor) RT_C1(ceil) RT_C1(trunc) RT_C1(round) RT_C1(rint) RT_C1(nearbyint) RT_C1(erf) RT_C1(erfc)
RT_C1(erfinv) RT_C1(erfcinv) RT_C1(lgamma) RT_C1(tgamma) RT_C1(normcdf) RT_C1(normcdfinv) RT_C1(j0) RT_C1(j1)
RT_C1(y0) RT_C1(y1)
RT_C2(pow) RT_C2(fmax) RT_C2(fmin) RT_C2(fmod) RT_C2(remainder) RT_C2(copysign) RT_C2(atan2) RT_C2(hypot)
RT_C2(fdim) RT_C2(nextafter)
#undef RT_C1
#undef RT_C2
extern "C" __device__ float fmaf(float, float, float) noexcept; extern "C" __device__ double fma(double, double, double) noexcept;
__device__ float fma(float, float, float);
extern "C" __device__ float ldexpf(float, int) noexcept; extern "C" __device__ double ldexp(double, int) noexcept;
extern "C" __device__ float frexpf(float, int*) noexcept; extern "C" __device__ double frexp(double, int*) noexcept;
extern "C" __device__ float modff(float, float*) noexcept; extern "C" __device__ double modf(double, double*) noexcept;
extern "C" __device__ float powif(float, int) noexcept; extern "C" __device__ double powi(double, int) noexcept;
extern "C" __device__ float scalbnf(float, int) noexcept; extern "C" __device__ int ilogbf(float) noexcept;
extern "C" __device__ void sincosf(float, float*, float*) noexcept; extern "C" __device__ void sincos(double, double*, double*) noexcept;
extern "C" __device__ void sincospif(float, float*, float*) noexcept;
extern "C" __device__ long lrintf(float) noexcept; extern "C" __device__ long lroundf(float) noexcept;
extern "C" __device__ long long llrintf(float) noexcept; extern "C" __device__ long long llroundf(float) noexcept;
extern "C" __device__ float fdividef(float, float) noexcept;
extern "C" __device__ int abs(int) noexcept; extern "C" __device__ long labs(long) noexcept;
extern "C" __device__ long long llabs(long long) noexcept;
__device__ float abs(float); __device__ double abs(double); __device__ long abs(long); __device__ long long abs(long long);
__device__ bool isnan(float); __device__ bool isnan(double); __device__ bool isinf(float); __device__ bool isinf(double);
__device__ bool isfinite(float); __device__ bool isfinite(double); __device__ bool signbit(float); __device__ bool signbit(double);
extern "C" __device__ int __isnanf(float) noexcept; extern "C" __device__ int __isinff(float) noexcept;
extern "C" __device__ int __finitef(float) noexcept; extern "C" __device__ int __signbitf(float) noexcept;
// fast-math and rounding intrinsics (CUDA's __xxx names)
#define RT_I1(n) __device__ float n(float);
#define RT_I2(n) __device__ float n(float, float);
RT_I1(__expf) RT_I1(__exp10f) RT_I1(__logf) RT_I1(__log2f) RT_I1(__log10f) RT_I1(__sinf) RT_I1(__cosf) RT_I1(__tanf)
RT_I1(__tanhf) RT_I1(__saturatef) RT_I1(__frcp_rn) RT_I1(__frcp_rz) RT_I1(__frcp_rd) RT_I1(__frcp_ru) RT_I1(__fsqrt_rn)
RT_I1(__fsqrt_rz) RT_I1(__fsqrt_rd) RT_I1(__fsqrt_ru) RT_I1(__frsqrt_rn)
RT_I2(__powf) RT_I2(__fdividef) RT_I2(__fadd_rn) RT_I2(__fadd_rz) RT_I2(__fadd_rd) RT_I2(__fadd_ru) RT_I2(__fsub_rn)
RT_I2(__fsub_rz) RT_I2(__fsub_rd) RT_I2(__fsub_ru) RT_I2(__fmul_rn) RT_I2(__fmul_rz) RT_I2(__fmul_rd) RT_I2(__fmul_ru)
RT_I2(__fdiv_rn) RT_I2(__fdiv_rz) RT_I2(__fdiv_rd) RT_I2(__fdiv_ru)
#undef RT_I1
#undef RT_I2
__device__ void __sincosf(float, float*, float*);
__device__ float __fmaf_rn(float, float, float); __device__ float __fmaf_rz(float, float, float);
__device__ double __dadd_rn(double, double); __device__ double __dsub_rn(double, double);
__device__ double __dmul_rn(double, double); __device__ double __ddiv_rn(double, double);
__device__ double __drcp_rn(double); __device__ double __dsqrt_rn(double); __device__ double __fma_rn(double, double, double);
__device__ int __float2int_rn(float); __device__ int __float2int_rz(float); __device__ int __float2int_rd(float);
__device__ int __float2int_ru(float); __device__ unsigned __float2uint_rn(float); __device__ unsigned __float2uint_rz(float);
__device__ float __int2float_rn(int); __device__ float __uint2float_rn(unsigned); __device__ long long __float2ll_rn(float);
__device__ float __ll2float_rn(long long); __device__ int __double2int_rn(double); __device__ float __double2float_rn(double);
__device__ double __int2double_rn(int); __device__ int __double2hiint(double); __device__ int __double2loint(double);
__device__ double __hiloint2double(int, int);
// integer intrinsics
__device__ int __popc(unsigned); __device__ int __popcll(unsigned long long); __device__ int __clz(int);
__device__ int __clzll(long long); __device__ int __ffs(int); __device__ int __ffsll(long long);
__device__ unsigned __brev(unsigned); __device__ unsigned long long __brevll(unsigned long long);
__device__ int __mul24(int, int); __device__ unsigned __umul24(unsigned, unsigned);
__device__ int __mulhi(int, int); __device__ unsigned __umulhi(unsigned, unsigned);
__device__ long long __mul64hi(long long, long long); __device__ unsigned long long __umul64hi(unsigned long long, unsigned long long);
__device__ unsigned __byte_perm(unsigned, unsigned, unsigned); __device__ unsigned __funnelshift_l(unsigned, unsigned, unsigned);
__device__ unsigned __funnelshift_r(unsigned, unsigned, unsigned); __device__ int __hadd(int, int); __device__ int __rhadd(int, int);
__device__ unsigned __uhadd(unsigned, unsigned); __device__ unsigned __urhadd(unsigned, unsigned);
__device__ unsigned __sad(int, int, unsigned); __device__ unsigned __usad(unsigned, unsigned, unsigned);
__device__ int __dp4a(int, int, int); __device__ unsigned __dp4a(unsigned, unsigned, unsigned);
__device__ int __float_as_int(float); __device__ float __int_as_float(int);
__device__ unsigned __float_as_uint(float); __device__ float __uint_as_float(unsigned);
__device__ long long __double_as_longlong(double); __device__ double __longlong_as_double(long long);
// min / max: CUDA's overload set (every pair of arithmetic types, so mixed calls are never ambiguous)
#define RT_MM(A, B) __device__ decltype((A)0 + (B)0) min(A, B); __device__ decltype((A)0 + (B)0) max(A, B);
#define RT_MM_ROW(A) RT_MM(A, int) RT_MM(A, unsigned) RT_MM(A, long) RT_MM(A, unsigned long) RT_MM(A, long long) \
  RT_MM(A, unsigned long long) RT_MM(A, float) RT_MM(A, double)
RT_MM_ROW(int) RT_MM_ROW(unsigned) RT_MM_ROW(long) RT_MM_ROW(unsigned long) RT_MM_ROW(long long)
RT_MM_ROW(unsigned long long) RT_MM_ROW(float) RT_MM_ROW(double)
#undef RT_MM_ROW
#undef RT_MM
__device__ unsigned umin(unsigned, unsigned); __device__ unsigned umax(unsigned, unsigned);
__device__ long long llmin(long long, long long); __device__ long long llmax(long long, long long);
__device__ unsigned long long ullmin(unsigned long long, unsigned long long);
__device__ unsigned long long ullmax(unsigned long long, unsigned long long);
// cuda_fp16.h / cuda_bf16.h conversions and intrinsics (the emulator's emu_types.h implements the same names)
#define RT_HD __host__ __device__
RT_HD __half __float2half(float); RT_HD __half __float2half_rn(float); RT_HD __half __double2half(double);
RT_HD float __half2float(__half); RT_HD __half __int2half_rn(int); RT_HD int __half2int_rn(__half);
RT_HD int __half2int_rz(__half); RT_HD unsigned short __half_as_ushort(__half); RT_HD short __half_as_short(__half);
RT_HD __half __ushort_as_half(unsigned short); RT_HD __half __short_as_half(short);
RT_HD __half2 __floats2half2_rn(float, float); RT_HD __half2 __float2half2_rn(float); RT_HD __half2 __float22half2_rn(float2);
RT_HD float2 __half22float2(__half2); RT_HD __half2 __halves2half2(__half, __half); RT_HD __half2 __half2half2(__half);
RT_HD __half2 make_half2(__half, __half); RT_HD __half __low2half(__half2); RT_HD __half __high2half(__half2);
RT_HD float __low2float(__half2); RT_HD float __high2float(__half2); RT_HD __half2 __lows2half2(__half2, __half2);
RT_HD __half2 __highs2half2(__half2, __half2);
RT_HD __nv_bfloat16 __float2bfloat16(float); RT_HD __nv_bfloat16 __float2bfloat16_rn(float);
RT_HD float __bfloat162float(__nv_bfloat16); RT_HD unsigned short __bfloat16_as_ushort(__nv_bfloat16);
RT_HD __nv_bfloat16 __ushort_as_bfloat16(unsigned short); RT_HD __nv_bfloat162 __floats2bfloat162_rn(float, float);
RT_HD __nv_bfloat162 __float2bfloat162_rn(float); RT_HD float2 __bfloat1622float2(__nv_bfloat162);
RT_HD __nv_bfloat162 __halves2bfloat162(__nv_bfloat16, __nv_bfloat16);
RT_HD __nv_bfloat162 make_bfloat162(__nv_bfloat16, __nv_bfloat16); RT_HD __nv_bfloat16 __low2bfloat16(__nv_bfloat162);
RT_HD __nv_bfloat16 __high2bfloat16(__nv_bfloat162);
#define RT_F16_OPS(T) RT_HD T __hadd(T, T); RT_HD T __hsub(T, T); RT_HD T __hmul(T, T); RT_HD T __hdiv(T, T); \
  RT_HD T __hneg(T); RT_HD T __habs(T); RT_HD T __hfma(T, T, T); RT_HD T __hmax(T, T); RT_HD T __hmin(T, T);      \
  RT_HD bool __heq(T, T); RT_HD bool __hne(T, T); RT_HD bool __hlt(T, T); RT_HD bool __hle(T, T);                 \
  RT_HD bool __hgt(T, T); RT_HD bool __hge(T, T); RT_HD bool __hisnan(T); RT_HD bool __hisinf(T); RT_HD T hexp(T); \
  RT_HD T hlog(T); RT_HD T hsqrt(T); RT_HD T hrsqrt(T); RT_HD T htanh(T); RT_HD T##2 __hadd2(T##2, T##2);          \
  RT_HD T##2 __hsub2(T##2, T##2); RT_HD T##2 __hmul2(T##2, T##2); RT_HD T##2 __h2div(T##2, T##2);                 \
  RT_HD T##2 __hfma2(T##2, T##2, T##2); RT_HD T##2 __hmax2(T##2, T##2); RT_HD T##2 __hmin2(T##2, T##2);
#define RT_F16X2_OPS(T2) RT_HD T2 operator+(const T2&, const T2&); RT_HD T2 operator-(const T2&, const T2&); \
  RT_HD T2 operator*(const T2&, const T2&); RT_HD T2 operator/(const T2&, const T2&); RT_HD T2& operator+=(T2&, const T2&); \
  RT_HD T2& operator-=(T2&, const T2&); RT_HD T2& operator*=(T2&, const T2&); RT_HD T2& operator/=(T2&, const T2&);
// cuda_fp16.hpp / cuda_bf16.hpp's operators on the scalar types: `h1 + h2` is a 16-bit float (not float through
// the conversion), so `c ? h1 + h2 : h3` is no ambiguity; `h + 1.0f` is one, as with nvcc
#define RT_F16_SCALAR_OPS(T) RT_HD T operator+(const T&, const T&); RT_HD T operator-(const T&, const T&);            \
  RT_HD T operator*(const T&, const T&); RT_HD T operator/(const T&, const T&); RT_HD T operator+(const T&);             \
  RT_HD T operator-(const T&); RT_HD T& operator+=(T&, const T&); RT_HD T& operator-=(T&, const T&);                     \
  RT_HD T& operator*=(T&, const T&); RT_HD T& operator/=(T&, const T&); RT_HD bool operator==(const T&, const T&);        \
  RT_HD bool operator!=(const T&, const T&); RT_HD bool operator<(const T&, const T&);                                  \
  RT_HD bool operator>(const T&, const T&); RT_HD bool operator<=(const T&, const T&);                                  \
  RT_HD bool operator>=(const T&, const T&);
RT_F16_OPS(__half) RT_F16_OPS(__nv_bfloat16) RT_F16X2_OPS(__half2) RT_F16X2_OPS(__nv_bfloat162)
RT_F16_SCALAR_OPS(__half) RT_F16_SCALAR_OPS(__nv_bfloat16)
#undef RT_F16_SCALAR_OPS
#undef RT_F16X2_OPS
#undef RT_F16_OPS
#undef RT_HD
// device-side C library (common_functions.h)
extern "C" __device__ int printf(const char*, ...);
extern "C" __device__ void* memcpy(void*, const void*, size_t) noexcept;
extern "C" __device__ void* memset(void*, int, size_t) noexcept;
extern "C" __device__ void* malloc(size_t) noexcept;
extern "C" __device__ void free(void*) noexcept;
extern "C" __device__ void __assertfail(const char*, const char*, unsigned, const char*, size_t);
extern "C" __device__ void __assert_fail(const char*, const char*, unsigned, const char*) noexcept __attribute__((noreturn));  // glibc assert()
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
  // defined (trivially) so that a value of a local type (a struct in the kernel) may be shuffled: a template
  // declared only would be "used but not defined" for a type without linkage
  template <class T> __device__ T shfl(T v, int) const { return v; }
  template <class T> __device__ T shfl_down(T v, unsigned) const { return v; }
  template <class T> __device__ T shfl_up(T v, unsigned) const { return v; }
  template <class T> __device__ T shfl_xor(T v, unsigned) const { return v; }
  __device__ unsigned ballot(int) const; __device__ int any(int) const; __device__ int all(int) const;
  __device__ unsigned meta_group_rank() const; __device__ unsigned meta_group_size() const; __device__ unsigned num_threads() const;
};
struct coalesced_group : thread_group {
  template <class T> __device__ T shfl(T v, int) const { return v; }
  template <class T> __device__ T shfl_down(T v, unsigned) const { return v; }
  template <class T> __device__ T shfl_up(T v, unsigned) const { return v; }
  __device__ unsigned ballot(int) const; __device__ int any(int) const; __device__ int all(int) const;
  __device__ unsigned meta_group_rank() const; __device__ unsigned meta_group_size() const; __device__ unsigned num_threads() const;
};
template <unsigned N> struct block_tile_memory { unsigned char scratch[N > 32 ? 8 * N / 32 : 8]; };
struct thread_group_dynamic : thread_group { __device__ unsigned meta_group_rank() const; __device__ unsigned meta_group_size() const; };
__device__ thread_block this_thread_block();
template <unsigned N> __device__ thread_block this_thread_block(block_tile_memory<N>&);
__device__ grid_group this_grid();
__device__ coalesced_group coalesced_threads();
template <unsigned N, class P> __device__ thread_block_tile<N> tiled_partition(const P&);
__device__ thread_group_dynamic tiled_partition(const thread_block&, unsigned);
__device__ thread_group_dynamic tiled_partition(const thread_group&, unsigned);
template <class G> __device__ void sync(const G&);
template <class T = void> struct plus { __device__ T operator()(T, T) const; };
template <class T = void> struct greater { __device__ T operator()(T, T) const; };
template <class T = void> struct less { __device__ T operator()(T, T) const; };
template <class T = void> struct bit_and { __device__ T operator()(T, T) const; };
template <class T = void> struct bit_or { __device__ T operator()(T, T) const; };
template <class T = void> struct bit_xor { __device__ T operator()(T, T) const; };
// defined (as stand-ins), so a local struct or a lambda as T or Op is no "used but not defined" error
template <class G, class T, class Op> __device__ T reduce(const G&, T v, Op) { return v; }
template <class G, class T, class Op> __device__ T inclusive_scan(const G&, T v, Op) { return v; }
template <class G, class T> __device__ T inclusive_scan(const G&, T v) { return v; }
template <class G, class T, class Op> __device__ T exclusive_scan(const G&, T v, Op) { return v; }
template <class G, class T> __device__ T exclusive_scan(const G&, T v) { return v; }
template <class G, class T> __device__ void memcpy_async(const G&, T*, const T*, size_t);
template <class G> __device__ void wait(const G&);
template <unsigned N, class G> __device__ void wait_prior(const G&);
}  // namespace cooperative_groups
// <cuda/barrier>, <cuda/pipeline> (libcu++): the block-scope barrier and pipeline device code uses.
namespace cuda {
enum thread_scope { thread_scope_system = 0, thread_scope_device = 1, thread_scope_block = 2, thread_scope_thread = 3 };
template <thread_scope S = thread_scope_system> struct barrier {
  using arrival_token = unsigned long long;
  __device__ barrier() = default;
  __device__ arrival_token arrive(long = 1); __device__ void wait(arrival_token&&) const;
  __device__ void wait(const arrival_token&) const; __device__ void arrive_and_wait(); __device__ void arrive_and_drop();
  template <thread_scope T> __device__ friend void init(barrier<T>*, long);
};
template <thread_scope S> __device__ void init(barrier<S>*, long);
template <thread_scope S = thread_scope_system> struct pipeline {
  __device__ void producer_acquire(); __device__ void producer_commit(); __device__ void consumer_wait();
  __device__ void consumer_release();
};
template <thread_scope S> __device__ pipeline<S> make_pipeline();
template <class G, thread_scope S> __device__ void memcpy_async(const G&, void*, const void*, size_t, barrier<S>&);
template <thread_scope S> __device__ void memcpy_async(void*, const void*, size_t, barrier<S>&);
template <class G, thread_scope S> __device__ void memcpy_async(const G&, void*, const void*, size_t, pipeline<S>&);
template <size_t N> struct aligned_size_t {
  size_t value; __device__ __host__ constexpr explicit aligned_size_t(size_t v) : value(v) {}
  __device__ __host__ constexpr operator size_t() const { return value; }
};
namespace std { using size_t = ::size_t; }
}  // namespace cuda
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
struct cudaDeviceProp {
  char name[256]; size_t totalGlobalMem, sharedMemPerBlock, sharedMemPerBlockOptin, sharedMemPerMultiprocessor;
  size_t totalConstMem, l2CacheSize, memPitch; int regsPerBlock, regsPerMultiprocessor, warpSize, maxThreadsPerBlock;
  int maxThreadsDim[3], maxGridSize[3], clockRate, major, minor, multiProcessorCount, maxThreadsPerMultiProcessor;
  int maxBlocksPerMultiProcessor, memoryClockRate, memoryBusWidth, concurrentKernels, cooperativeLaunch;
};
struct cudaFuncAttributes { size_t sharedSizeBytes, constSizeBytes, localSizeBytes; int maxThreadsPerBlock, numRegs,
                            ptxVersion, binaryVersion, maxDynamicSharedSizeBytes; };
enum cudaFuncAttribute { cudaFuncAttributeMaxDynamicSharedMemorySize = 8,
                         cudaFuncAttributePreferredSharedMemoryCarveout = 9 };
enum cudaFuncCache { cudaFuncCachePreferNone, cudaFuncCachePreferShared, cudaFuncCachePreferL1, cudaFuncCachePreferEqual };
typedef struct CUgraph_st* cudaGraph_t;
typedef struct CUgraphExec_st* cudaGraphExec_t;
cudaError_t cudaGetDeviceProperties(cudaDeviceProp*, int);
cudaError_t cudaGetDevice(int*);
cudaError_t cudaSetDevice(int);
cudaError_t cudaGetDeviceCount(int*);
cudaError_t cudaMallocHost(void**, size_t);
cudaError_t cudaFreeHost(void*);
cudaError_t cudaDeviceReset();
cudaError_t cudaEventDestroy(cudaEvent_t);
cudaError_t cudaStreamDestroy(cudaStream_t);
template <class T> cudaError_t cudaMemcpyToSymbol(const T&, const void*, size_t, size_t = 0,
                                                  cudaMemcpyKind = cudaMemcpyHostToDevice);
template <class T> cudaError_t cudaFuncSetAttribute(T*, cudaFuncAttribute, int);
template <class T> cudaError_t cudaFuncGetAttributes(cudaFuncAttributes*, T*);
template <class T> cudaError_t cudaOccupancyMaxActiveBlocksPerMultiprocessor(int*, T, int, size_t);
cudaError_t cudaStreamSynchronize(cudaStream_t);
// More of the host API that host code around kernels commonly calls (pinned and pitched memory, symbols, device
// attributes, flags, version queries); declarations only, like the rest.
enum cudaDeviceAttr { cudaDevAttrMaxThreadsPerBlock = 1, cudaDevAttrMaxBlockDimX = 2, cudaDevAttrMaxBlockDimY = 3,
  cudaDevAttrMaxBlockDimZ = 4, cudaDevAttrMaxGridDimX = 5, cudaDevAttrMaxGridDimY = 6, cudaDevAttrMaxGridDimZ = 7,
  cudaDevAttrMaxSharedMemoryPerBlock = 8, cudaDevAttrTotalConstantMemory = 9, cudaDevAttrWarpSize = 10,
  cudaDevAttrMaxPitch = 11, cudaDevAttrMaxRegistersPerBlock = 12, cudaDevAttrClockRate = 13,
  cudaDevAttrMultiProcessorCount = 16, cudaDevAttrComputeCapabilityMajor = 75, cudaDevAttrComputeCapabilityMinor = 76,
  cudaDevAttrMaxSharedMemoryPerMultiprocessor = 81, cudaDevAttrMaxRegistersPerMultiprocessor = 82,
  cudaDevAttrMaxThreadsPerMultiProcessor = 39, cudaDevAttrL2CacheSize = 38, cudaDevAttrMemoryClockRate = 36,
  cudaDevAttrGlobalMemoryBusWidth = 37, cudaDevAttrCooperativeLaunch = 95, cudaDevAttrMaxSharedMemoryPerBlockOptin = 97 };
enum cudaLimit { cudaLimitStackSize = 0, cudaLimitPrintfFifoSize = 1, cudaLimitMallocHeapSize = 2 };
enum cudaSharedMemConfig { cudaSharedMemBankSizeDefault, cudaSharedMemBankSizeFourByte, cudaSharedMemBankSizeEightByte };
#define cudaHostAllocDefault 0x00
#define cudaHostAllocPortable 0x01
#define cudaHostAllocMapped 0x02
#define cudaHostAllocWriteCombined 0x04
#define cudaHostRegisterDefault 0x00
#define cudaDeviceScheduleAuto 0x00
#define cudaDeviceScheduleSpin 0x01
#define cudaDeviceScheduleYield 0x02
#define cudaDeviceScheduleBlockingSync 0x04
#define cudaDeviceMapHost 0x08
#define cudaStreamDefault 0x00
#define cudaStreamNonBlocking 0x01
#define cudaEventDefault 0x00
#define cudaEventBlockingSync 0x01
#define cudaEventDisableTiming 0x02
#define cudaMemAttachGlobal 0x01
#define cudaCpuDeviceId (-1)
struct cudaPitchedPtr { void* ptr; size_t pitch, xsize, ysize; };
struct cudaExtent { size_t width, height, depth; };
cudaError_t cudaHostAlloc(void**, size_t, unsigned);
template <class T> cudaError_t cudaHostAlloc(T**, size_t, unsigned);
template <class T> cudaError_t cudaMallocHost(T**, size_t, unsigned = 0);
cudaError_t cudaHostRegister(void*, size_t, unsigned);
cudaError_t cudaHostUnregister(void*);
template <class T> cudaError_t cudaHostGetDevicePointer(T**, void*, unsigned);
template <class T> cudaError_t cudaMallocPitch(T**, size_t*, size_t, size_t);
cudaError_t cudaMalloc3D(cudaPitchedPtr*, cudaExtent);
cudaError_t cudaMemcpy2D(void*, size_t, const void*, size_t, size_t, size_t, cudaMemcpyKind);
cudaError_t cudaMemcpy2DAsync(void*, size_t, const void*, size_t, size_t, size_t, cudaMemcpyKind, cudaStream_t = 0);
cudaError_t cudaMemset2D(void*, size_t, int, size_t, size_t);
cudaError_t cudaMemsetAsync(void*, int, size_t, cudaStream_t = 0);
cudaError_t cudaMemcpyPeer(void*, int, const void*, int, size_t);
template <class T> cudaError_t cudaMemcpyFromSymbol(void*, const T&, size_t, size_t = 0,
                                                    cudaMemcpyKind = cudaMemcpyDeviceToHost);
template <class T> cudaError_t cudaMemcpyToSymbolAsync(const T&, const void*, size_t, size_t = 0,
                                                       cudaMemcpyKind = cudaMemcpyHostToDevice, cudaStream_t = 0);
template <class T> cudaError_t cudaMemcpyFromSymbolAsync(void*, const T&, size_t, size_t = 0,
                                                         cudaMemcpyKind = cudaMemcpyDeviceToHost, cudaStream_t = 0);
template <class T> cudaError_t cudaGetSymbolAddress(void**, const T&);
template <class T> cudaError_t cudaMallocAsync(T**, size_t, cudaStream_t);
cudaError_t cudaFreeAsync(void*, cudaStream_t);
cudaError_t cudaMemPrefetchAsync(const void*, size_t, int, cudaStream_t = 0);
cudaError_t cudaMemGetInfo(size_t*, size_t*);
cudaError_t cudaDeviceGetAttribute(int*, cudaDeviceAttr, int);
cudaError_t cudaDeviceSetLimit(cudaLimit, size_t);
cudaError_t cudaDeviceGetLimit(size_t*, cudaLimit);
cudaError_t cudaDeviceSetCacheConfig(cudaFuncCache);
cudaError_t cudaDeviceSetSharedMemConfig(cudaSharedMemConfig);
template <class T> cudaError_t cudaFuncSetCacheConfig(T*, cudaFuncCache);
template <class T> cudaError_t cudaFuncSetSharedMemConfig(T*, cudaSharedMemConfig);
cudaError_t cudaSetDeviceFlags(unsigned);
cudaError_t cudaDeviceCanAccessPeer(int*, int, int);
cudaError_t cudaDeviceEnablePeerAccess(int, unsigned);
cudaError_t cudaDriverGetVersion(int*);
cudaError_t cudaRuntimeGetVersion(int*);
const char* cudaGetErrorName(cudaError_t);
cudaError_t cudaThreadSynchronize();
cudaError_t cudaStreamCreateWithFlags(cudaStream_t*, unsigned);
cudaError_t cudaStreamCreateWithPriority(cudaStream_t*, unsigned, int);
cudaError_t cudaStreamQuery(cudaStream_t);
cudaError_t cudaStreamWaitEvent(cudaStream_t, cudaEvent_t, unsigned = 0);
cudaError_t cudaEventCreateWithFlags(cudaEvent_t*, unsigned);
cudaError_t cudaEventQuery(cudaEvent_t);
template <class T> cudaError_t cudaOccupancyMaxPotentialBlockSize(int*, int*, T, size_t = 0, int = 0);
template <class T> cudaError_t cudaLaunchKernel(T, dim3, dim3, void**, size_t = 0, cudaStream_t = 0);
template <class T> cudaError_t cudaLaunchCooperativeKernel(T, dim3, dim3, void**, size_t = 0, cudaStream_t = 0);
cudaError_t cudaProfilerStart();
cudaError_t cudaProfilerStop();
