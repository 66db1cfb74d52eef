// emu_wmma.h — CUDA's warp matrix API (<mma.h>, nvcuda::wmma) on the emulator's fibers.
// Part of cuda_emu.h; include that instead.
//
// Shapes and types, as CUDA offers them on sm_80+:
//   __half, __nv_bfloat16:  m16n16k16, m32n8k16, m8n32k16, with float (or __half) accumulators;
//   precision::tf32:        m16n16k8, storage element float, float accumulators.
// Memory layouts follow the CUDA documentation: matrix_a (M x K) row_major reads A(i,k) at p[i*ldm + k],
// col_major at p[k*ldm + i]; matrix_b (K x N) row_major B(k,j) at p[k*ldm + j], col_major at p[j*ldm + k];
// accumulators (M x N) use mem_row_major p[i*ldm + j] or mem_col_major p[j*ldm + i].
//
// Which lane holds which fragment element is unspecified in CUDA, so this emulation chooses one that needs no
// data exchange between lanes: every lane's fragment `x[]` holds the whole tile (element (r, c) at r*cols + c,
// num_elements = rows*cols), and each lane *owns* the accumulator elements e with e % 32 == its lane: mma_sync
// computes, and store_matrix_sync writes, only those. Element-wise code over x[0..num_elements) — the
// documented use (e.g. `x[t] = __float_to_tf32(x[t])`) — therefore gives the hardware's answer; code that assumes
// the hardware's per-lane element count does not.
//
// Arithmetic (fixed so tests can reproduce it bit for bit): D(i,j) = C(i,j), then for k = 0..K-1 in order
// D(i,j) = fmaf(a(i,k), b(k,j), D(i,j)) in float. For tf32 operands a and b are their tf32 truncations (the low 13
// mantissa bits ignored, as the tensor cores do); a product of two tf32, bf16 or half values is exact in float, so
// each step rounds once. __float_to_tf32 is PTX cvt.rna.tf32.f32: round to nearest, ties away from zero, to a
// 10-bit mantissa (what CUDA's mma.h uses).
#pragma once

namespace nvcuda {
namespace wmma {

struct row_major {};
struct col_major {};
struct matrix_a {};
struct matrix_b {};
struct accumulator {};
enum layout_t { mem_row_major, mem_col_major };
namespace precision {
struct tf32 {};
}  // namespace precision

namespace detail {
// rows x cols of one fragment use: A is M x K, B is K x N, accumulators M x N.
template <class Use, int M, int N, int K> struct dims;
template <int M, int N, int K> struct dims<matrix_a, M, N, K> { static constexpr int rows = M, cols = K; };
template <int M, int N, int K> struct dims<matrix_b, M, N, K> { static constexpr int rows = K, cols = N; };
template <int M, int N, int K> struct dims<accumulator, M, N, K> { static constexpr int rows = M, cols = N; };

// The element type a fragment stores: float for precision::tf32, the type itself otherwise.
template <class T> struct storage { using type = T; };
template <> struct storage<precision::tf32> { using type = float; };

template <class T, int M, int N, int K> constexpr bool shape_ok() {
  if constexpr (std::is_same_v<T, precision::tf32>) return M == 16 && N == 16 && K == 8;
  if constexpr (std::is_same_v<T, __half> || std::is_same_v<T, __nv_bfloat16>)
    return K == 16 && ((M == 16 && N == 16) || (M == 32 && N == 8) || (M == 8 && N == 32));
  if constexpr (std::is_same_v<T, float>) return true;  // accumulators of any supported shape
  return false;
}

// The lane of the calling fiber (0 outside a launch).
inline unsigned lane() { return emu::g.cur ? (emu::g.cur->lin & 31u) : 0u; }

// The value a tensor core takes from a stored operand element.
inline float operand(float v) { return emu::bits_f32(emu::f32_bits(v) & 0xffffe000u); }  // tf32: truncate
inline float operand(__half v) { return (float)v; }
inline float operand(__nv_bfloat16 v) { return (float)v; }
}  // namespace detail

template <class Use, int M, int N, int K, class T, class Layout = void>
class fragment {
  static_assert(detail::shape_ok<T, M, N, K>(), "wmma: unsupported fragment shape for this element type");

 public:
  using element_type = T;
  using storage_element_type = typename detail::storage<T>::type;
  static constexpr int rows = detail::dims<Use, M, N, K>::rows, cols = detail::dims<Use, M, N, K>::cols;
  enum { num_elements = rows * cols };
  storage_element_type x[num_elements];
};

template <class Use, int M, int N, int K, class T, class L>
inline void fill_fragment(fragment<Use, M, N, K, T, L>& f, const typename fragment<Use, M, N, K, T, L>::storage_element_type& v) {
  for (int e = 0; e < f.num_elements; ++e) f.x[e] = v;
}

namespace detail {
// Element (r, c) of an operand tile at p with leading dimension ldm, stored row- or column-major.
template <class F, class S>
inline void load_tile(F& f, const S* p, unsigned ldm, bool row) {
  for (int r = 0; r < F::rows; ++r)
    for (int c = 0; c < F::cols; ++c) f.x[r * F::cols + c] = row ? p[(size_t)r * ldm + c] : p[(size_t)c * ldm + r];
}
}  // namespace detail

// Operands: the layout is part of the fragment type (row_major / col_major).
template <class Use, int M, int N, int K, class T, class L, class S>
inline std::enable_if_t<!std::is_same_v<Use, accumulator>> load_matrix_sync(fragment<Use, M, N, K, T, L>& f,
                                                                             const S* p, unsigned ldm) {
  static_assert(std::is_same_v<L, row_major> || std::is_same_v<L, col_major>,
                "wmma: matrix_a / matrix_b fragments need a row_major or col_major layout");
  detail::load_tile(f, p, ldm, std::is_same_v<L, row_major>);
}
// Accumulators: the layout is an argument.
template <int M, int N, int K, class T, class S>
inline void load_matrix_sync(fragment<accumulator, M, N, K, T>& f, const S* p, unsigned ldm, layout_t layout) {
  detail::load_tile(f, p, ldm, layout == mem_row_major);
}
template <int M, int N, int K, class T, class S>
inline void store_matrix_sync(S* p, const fragment<accumulator, M, N, K, T>& f, unsigned ldm, layout_t layout) {
  const bool row = layout == mem_row_major;
  for (int e = (int)detail::lane(); e < f.num_elements; e += 32) {
    const int r = e / N, c = e % N;
    p[row ? (size_t)r * ldm + c : (size_t)c * ldm + r] = f.x[e];
  }
}

// D = A x B + C over this lane's accumulator elements (the rest of D is C's); D may be C.
template <int M, int N, int K, class TA, class LA, class TB, class LB, class TC, class TD>
inline void mma_sync(fragment<accumulator, M, N, K, TD>& d, const fragment<matrix_a, M, N, K, TA, LA>& a,
                     const fragment<matrix_b, M, N, K, TB, LB>& b, const fragment<accumulator, M, N, K, TC>& c,
                     bool satf = false) {
  static_assert(std::is_same_v<TA, TB>, "wmma: matrix_a and matrix_b need the same element type");
  for (int e = 0; e < d.num_elements; ++e) {
    if ((unsigned)e % 32u != detail::lane()) {
      if ((const void*)&d != (const void*)&c) d.x[e] = c.x[e];
      continue;
    }
    const int i = e / N, j = e % N;
    float acc = (float)c.x[e];
    for (int k = 0; k < K; ++k) acc = fmaf(detail::operand(a.x[i * K + k]), detail::operand(b.x[k * N + j]), acc);
    if (satf) acc = isnan(acc) ? 0.0f : fminf(fmaxf(acc, -FLT_MAX), FLT_MAX);
    d.x[e] = acc;
  }
}

// cvt.rna.tf32.f32: round to nearest, ties away from zero, keeping 10 mantissa bits (NaN and Inf unchanged).
inline float __float_to_tf32(float in) {
  unsigned u = emu::f32_bits(in);
  if ((u & 0x7f800000u) == 0x7f800000u) return in;
  u += 0x1000u;  // half of the dropped 13 bits: adding it and truncating rounds magnitudes half-way up
  return emu::bits_f32(u & 0xffffe000u);
}

}  // namespace wmma
}  // namespace nvcuda
// The PTX instructions (mma.sync, ldmatrix, cp.async, cvt) that kernels issue through inline asm, modelled for the
// emulator with the same arithmetic:
#include "emu_mma.h"
