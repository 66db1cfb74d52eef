// emu_types.h — CUDA's built-in value types on the CPU: vector types, dim3, __half, __nv_bfloat16.
// Part of cuda_emu.h; include that instead.
#pragma once

// ---- vector types (layout and alignment as in CUDA's vector_types.h) -------------------------------------
#define EMU_VEC1(N, T, A)                                            \
  struct alignas(A) N { T x; };                                      \
  inline N make_##N(T x) { return N{x}; }
#define EMU_VEC2(N, T, A)                                            \
  struct alignas(A) N { T x, y; };                                   \
  inline N make_##N(T x, T y) { return N{x, y}; }
#define EMU_VEC3(N, T)                                               \
  struct N { T x, y, z; };                                           \
  inline N make_##N(T x, T y, T z) { return N{x, y, z}; }
#define EMU_VEC4(N, T, A)                                            \
  struct alignas(A) N { T x, y, z, w; };                             \
  inline N make_##N(T x, T y, T z, T w) { return N{x, y, z, w}; }
#define EMU_VEC_ALL(P, T, A1, A2, A4) \
  EMU_VEC1(P##1, T, A1) EMU_VEC2(P##2, T, A2) EMU_VEC3(P##3, T) EMU_VEC4(P##4, T, A4)

EMU_VEC_ALL(char, signed char, 1, 2, 4)
EMU_VEC_ALL(uchar, unsigned char, 1, 2, 4)
EMU_VEC_ALL(short, short, 2, 4, 8)
EMU_VEC_ALL(ushort, unsigned short, 2, 4, 8)
EMU_VEC_ALL(int, int, 4, 8, 16)
EMU_VEC_ALL(uint, unsigned int, 4, 8, 16)
EMU_VEC_ALL(long, long, 8, 16, 16)
EMU_VEC_ALL(ulong, unsigned long, 8, 16, 16)
EMU_VEC_ALL(longlong, long long, 8, 16, 16)
EMU_VEC_ALL(ulonglong, unsigned long long, 8, 16, 16)
EMU_VEC_ALL(float, float, 4, 8, 16)
EMU_VEC_ALL(double, double, 8, 16, 16)
#undef EMU_VEC_ALL
#undef EMU_VEC1
#undef EMU_VEC2
#undef EMU_VEC3
#undef EMU_VEC4

struct dim3 {
  unsigned int x, y, z;
  constexpr dim3(unsigned int vx = 1, unsigned int vy = 1, unsigned int vz = 1) : x(vx), y(vy), z(vz) {}
  constexpr dim3(uint3 v) : x(v.x), y(v.y), z(v.z) {}
  constexpr operator uint3() const { return uint3{x, y, z}; }
};

// ---- 16-bit floats: storage types, float arithmetic (as CUDA without native half units) ----------------
namespace emu {
inline unsigned f32_bits(float f) { unsigned u; memcpy(&u, &f, 4); return u; }
inline float bits_f32(unsigned u) { float f; memcpy(&f, &u, 4); return f; }

// IEEE binary16 <-> binary32, round to nearest even (exact inverse of the widening).
inline unsigned short f32_to_f16(float f) {
  unsigned u = f32_bits(f), sign = (u >> 16) & 0x8000u, exp = (u >> 23) & 0xffu, man = u & 0x7fffffu;
  if (exp == 0xffu) return (unsigned short)(sign | 0x7c00u | (man ? 0x200u | (man >> 13) : 0u));
  int e = (int)exp - 127 + 15;
  if (e >= 31) return (unsigned short)(sign | 0x7c00u);
  if (e <= 0) {  // subnormal half (or zero): shift the full significand into place, then round
    if (e < -10) return (unsigned short)sign;
    unsigned m = man | 0x800000u, shift = (unsigned)(14 - e);
    unsigned h = m >> shift, rest = m & ((1u << shift) - 1u), half = 1u << (shift - 1);
    if (rest > half || (rest == half && (h & 1u))) h++;
    return (unsigned short)(sign | h);
  }
  unsigned h = ((unsigned)e << 10) | (man >> 13), rest = man & 0x1fffu;
  if (rest > 0x1000u || (rest == 0x1000u && (h & 1u))) h++;  // may carry into the exponent: still right
  return (unsigned short)(sign | h);
}
inline float f16_to_f32(unsigned short h) {
  unsigned sign = (unsigned)(h & 0x8000u) << 16, exp = (h >> 10) & 0x1fu, man = h & 0x3ffu;
  if (exp == 0x1fu) return bits_f32(sign | 0x7f800000u | (man << 13));
  if (exp == 0) {
    float v = (float)man * 5.9604644775390625e-08f;  // man * 2^-24
    return sign ? -v : v;
  }
  return bits_f32(sign | ((exp + 112u) << 23) | (man << 13));
}
// bfloat16: the top half of a binary32, round to nearest even, NaN kept quiet.
inline unsigned short f32_to_bf16(float f) {
  unsigned u = f32_bits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (unsigned short)((u >> 16) | 0x40u);
  u += 0x7fffu + ((u >> 16) & 1u);
  return (unsigned short)(u >> 16);
}
inline float bf16_to_f32(unsigned short b) { return bits_f32((unsigned)b << 16); }
}  // namespace emu

struct __half_raw { unsigned short x; };
struct __nv_bfloat16_raw { unsigned short x; };

// One definition for both 16-bit types: storage + conversions + float arithmetic.
#define EMU_F16_TYPE(T, RAW, TO, FROM)                                                              \
  struct T {                                                                                        \
    unsigned short __x;                                                                             \
    T() = default;                                                                                  \
    T(float f) : __x(emu::TO(f)) {}                                                                 \
    T(double f) : __x(emu::TO((float)f)) {}                                                         \
    T(int v) : __x(emu::TO((float)v)) {}                                                            \
    T(unsigned v) : __x(emu::TO((float)v)) {}                                                       \
    T(long long v) : __x(emu::TO((float)v)) {}                                                      \
    T(unsigned long long v) : __x(emu::TO((float)v)) {}                                             \
    T(RAW r) : __x(r.x) {}                                                                          \
    operator float() const { return emu::FROM(__x); }                                               \
    operator RAW() const { return RAW{__x}; }                                                       \
    T& operator=(float f) { __x = emu::TO(f); return *this; }                                       \
    T& operator+=(T o) { return *this = (float)*this + (float)o; }                                  \
    T& operator-=(T o) { return *this = (float)*this - (float)o; }                                  \
    T& operator*=(T o) { return *this = (float)*this * (float)o; }                                  \
    T& operator/=(T o) { return *this = (float)*this / (float)o; }                                  \
  };                                                                                                \
  inline T operator+(T a, T b) { return T((float)a + (float)b); }                                   \
  inline T operator-(T a, T b) { return T((float)a - (float)b); }                                   \
  inline T operator*(T a, T b) { return T((float)a * (float)b); }                                   \
  inline T operator/(T a, T b) { return T((float)a / (float)b); }                                   \
  inline T operator-(T a) { T r; r.__x = (unsigned short)(a.__x ^ 0x8000u); return r; }             \
  inline bool operator==(T a, T b) { return (float)a == (float)b; }                                 \
  inline bool operator!=(T a, T b) { return (float)a != (float)b; }                                 \
  inline bool operator<(T a, T b) { return (float)a < (float)b; }                                   \
  inline bool operator>(T a, T b) { return (float)a > (float)b; }                                   \
  inline bool operator<=(T a, T b) { return (float)a <= (float)b; }                                 \
  inline bool operator>=(T a, T b) { return (float)a >= (float)b; }                                 \
  struct T##2 {                                                                                     \
    T x, y;                                                                                         \
  };                                                                                                \
  inline T##2 operator+(T##2 a, T##2 b) { return T##2{a.x + b.x, a.y + b.y}; }                      \
  inline T##2 operator-(T##2 a, T##2 b) { return T##2{a.x - b.x, a.y - b.y}; }                      \
  inline T##2 operator*(T##2 a, T##2 b) { return T##2{a.x * b.x, a.y * b.y}; }                      \
  inline T##2 operator/(T##2 a, T##2 b) { return T##2{a.x / b.x, a.y / b.y}; }

EMU_F16_TYPE(__half, __half_raw, f32_to_f16, f16_to_f32)
EMU_F16_TYPE(__nv_bfloat16, __nv_bfloat16_raw, f32_to_bf16, bf16_to_f32)
#undef EMU_F16_TYPE
static_assert(sizeof(__half) == 2 && sizeof(__half2) == 4, "CUDA layout of __half / __half2");
typedef __half half;
typedef __half2 half2;
typedef __nv_bfloat16 nv_bfloat16;
typedef __nv_bfloat162 nv_bfloat162;

// ---- conversions and arithmetic intrinsics (cuda_fp16.h / cuda_bf16.h names) ----------------------------
inline __half __float2half(float f) { return __half(f); }
inline __half __float2half_rn(float f) { return __half(f); }
inline __half __double2half(double f) { return __half((float)f); }
inline float __half2float(__half h) { return (float)h; }
inline __half __int2half_rn(int v) { return __half((float)v); }
inline int __half2int_rn(__half h) { return (int)nearbyintf((float)h); }
inline int __half2int_rz(__half h) { return (int)(float)h; }
inline unsigned short __half_as_ushort(__half h) { return h.__x; }
inline short __half_as_short(__half h) { return (short)h.__x; }
inline __half __ushort_as_half(unsigned short u) { __half h; h.__x = u; return h; }
inline __half __short_as_half(short u) { __half h; h.__x = (unsigned short)u; return h; }
inline __half2 __floats2half2_rn(float a, float b) { return __half2{__half(a), __half(b)}; }
inline __half2 __float2half2_rn(float a) { return __half2{__half(a), __half(a)}; }
inline __half2 __float22half2_rn(float2 f) { return __half2{__half(f.x), __half(f.y)}; }
inline float2 __half22float2(__half2 h) { return float2{(float)h.x, (float)h.y}; }
inline __half2 __halves2half2(__half a, __half b) { return __half2{a, b}; }
inline __half2 __half2half2(__half a) { return __half2{a, a}; }
inline __half2 make_half2(__half a, __half b) { return __half2{a, b}; }
inline __half __low2half(__half2 h) { return h.x; }
inline __half __high2half(__half2 h) { return h.y; }
inline float __low2float(__half2 h) { return (float)h.x; }
inline float __high2float(__half2 h) { return (float)h.y; }
inline __half2 __lows2half2(__half2 a, __half2 b) { return __half2{a.x, b.x}; }
inline __half2 __highs2half2(__half2 a, __half2 b) { return __half2{a.y, b.y}; }

inline __nv_bfloat16 __float2bfloat16(float f) { return __nv_bfloat16(f); }
inline __nv_bfloat16 __float2bfloat16_rn(float f) { return __nv_bfloat16(f); }
inline float __bfloat162float(__nv_bfloat16 h) { return (float)h; }
inline unsigned short __bfloat16_as_ushort(__nv_bfloat16 h) { return h.__x; }
inline __nv_bfloat16 __ushort_as_bfloat16(unsigned short u) { __nv_bfloat16 h; h.__x = u; return h; }
inline __nv_bfloat162 __floats2bfloat162_rn(float a, float b) { return __nv_bfloat162{__nv_bfloat16(a), __nv_bfloat16(b)}; }
inline __nv_bfloat162 __float2bfloat162_rn(float a) { return __nv_bfloat162{__nv_bfloat16(a), __nv_bfloat16(a)}; }
inline float2 __bfloat1622float2(__nv_bfloat162 h) { return float2{(float)h.x, (float)h.y}; }
inline __nv_bfloat162 __halves2bfloat162(__nv_bfloat16 a, __nv_bfloat16 b) { return __nv_bfloat162{a, b}; }
inline __nv_bfloat162 make_bfloat162(__nv_bfloat16 a, __nv_bfloat16 b) { return __nv_bfloat162{a, b}; }
inline __nv_bfloat16 __low2bfloat16(__nv_bfloat162 h) { return h.x; }
inline __nv_bfloat16 __high2bfloat16(__nv_bfloat162 h) { return h.y; }

// Element-wise intrinsics shared by both 16-bit types (overloaded on the type, as in CUDA).
#define EMU_F16_OPS(T)                                                                               \
  inline T __hadd(T a, T b) { return a + b; }                                                        \
  inline T __hsub(T a, T b) { return a - b; }                                                        \
  inline T __hmul(T a, T b) { return a * b; }                                                        \
  inline T __hdiv(T a, T b) { return a / b; }                                                        \
  inline T __hneg(T a) { return -a; }                                                                \
  inline T __habs(T a) { T r = a; r.__x = (unsigned short)(a.__x & 0x7fffu); return r; }            \
  inline T __hfma(T a, T b, T c) { return T(fmaf((float)a, (float)b, (float)c)); }                 \
  inline T __hmax(T a, T b) { return T(fmaxf((float)a, (float)b)); }                                 \
  inline T __hmin(T a, T b) { return T(fminf((float)a, (float)b)); }                                 \
  inline bool __heq(T a, T b) { return a == b; }                                                     \
  inline bool __hne(T a, T b) { return a != b; }                                                     \
  inline bool __hlt(T a, T b) { return a < b; }                                                      \
  inline bool __hle(T a, T b) { return a <= b; }                                                     \
  inline bool __hgt(T a, T b) { return a > b; }                                                      \
  inline bool __hge(T a, T b) { return a >= b; }                                                     \
  inline bool __hisnan(T a) { return isnan((float)a); }                                              \
  inline bool __hisinf(T a) { return isinf((float)a); }                                              \
  inline T hexp(T a) { return T(expf((float)a)); }                                                   \
  inline T hlog(T a) { return T(logf((float)a)); }                                                   \
  inline T hsqrt(T a) { return T(sqrtf((float)a)); }                                                 \
  inline T hrsqrt(T a) { return T(1.0f / sqrtf((float)a)); }                                         \
  inline T htanh(T a) { return T(tanhf((float)a)); }                                                 \
  inline T##2 __hadd2(T##2 a, T##2 b) { return a + b; }                                              \
  inline T##2 __hsub2(T##2 a, T##2 b) { return a - b; }                                              \
  inline T##2 __hmul2(T##2 a, T##2 b) { return a * b; }                                              \
  inline T##2 __h2div(T##2 a, T##2 b) { return a / b; }                                              \
  inline T##2 __hfma2(T##2 a, T##2 b, T##2 c) { return T##2{__hfma(a.x, b.x, c.x), __hfma(a.y, b.y, c.y)}; } \
  inline T##2 __hmax2(T##2 a, T##2 b) { return T##2{__hmax(a.x, b.x), __hmax(a.y, b.y)}; }          \
  inline T##2 __hmin2(T##2 a, T##2 b) { return T##2{__hmin(a.x, b.x), __hmin(a.y, b.y)}; }

EMU_F16_OPS(__half)
EMU_F16_OPS(__nv_bfloat16)
#undef EMU_F16_OPS
