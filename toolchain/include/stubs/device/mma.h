// <mma.h> (nvcuda::wmma, the warp matrix API): one stub for the two consumers of CUDA sources without the CUDA
// toolkit's host side (toolchain/include/stubs/README.md): the CPU emulator (RT_CPU_EMULATOR) gets its emulation
// (cuda_emu/include/emu_wmma.h, through cuda_emu.h); the parser (RT_PARSE) gets the declarations below, which
// declare and never define. NVRTC and nvcc bring their own (this folder is never on their path).
#pragma once
// RT_CPU_EMULATOR: nothing here; cuda_emu.h, included first (it defines the macro), declares it all
#if defined(RT_PARSE) && !defined(RT_CPU_EMULATOR)
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
template <class T> struct __rt_storage { typedef T type; };
template <> struct __rt_storage<precision::tf32> { typedef float type; };
template <class Use, int M, int N, int K, class T, class Layout = void>
class fragment {
 public:
  typedef T element_type;
  typedef typename __rt_storage<T>::type storage_element_type;
  enum { num_elements = 8 };  // the parser needs a size only
  storage_element_type x[num_elements];
};
template <class Use, int M, int N, int K, class T, class L, class V>
__device__ void fill_fragment(fragment<Use, M, N, K, T, L>&, const V&);
template <class Use, int M, int N, int K, class T, class L, class S>
__device__ void load_matrix_sync(fragment<Use, M, N, K, T, L>&, const S*, unsigned);
template <class Use, int M, int N, int K, class T, class L, class S>
__device__ void load_matrix_sync(fragment<Use, M, N, K, T, L>&, const S*, unsigned, layout_t);
template <int M, int N, int K, class T, class S>
__device__ void store_matrix_sync(S*, const fragment<accumulator, M, N, K, T>&, unsigned, layout_t);
template <int M, int N, int K, class TA, class LA, class TB, class LB, class TC, class TD>
__device__ void mma_sync(fragment<accumulator, M, N, K, TD>&, const fragment<matrix_a, M, N, K, TA, LA>&,
                         const fragment<matrix_b, M, N, K, TB, LB>&, const fragment<accumulator, M, N, K, TC>&,
                         bool = false);
__device__ float __float_to_tf32(float);
}  // namespace wmma
}  // namespace nvcuda
#endif
