// <stddef.h>: a compiler header (clang's resource dir), which the libclang wheel does not ship. The parser only
// (RT_PARSE) sees this folder; g++, nvcc and NVRTC bring their own. Written for this project: what glibc and
// libstdc++ take from it, whatever __need_* macro they set (everything is declared once).
#ifndef RT_CLANG_STDDEF_H
#define RT_CLANG_STDDEF_H
typedef __SIZE_TYPE__ size_t;
typedef __PTRDIFF_TYPE__ ptrdiff_t;
#ifndef __cplusplus
typedef __WCHAR_TYPE__ wchar_t;
#endif
typedef struct { long long __ll __attribute__((aligned(__alignof__(long long))));
                 long double __ld __attribute__((aligned(__alignof__(long double)))); } max_align_t;
#ifdef __cplusplus
namespace std { typedef decltype(nullptr) nullptr_t; }
using ::std::nullptr_t;
#endif
#undef NULL
#ifdef __cplusplus
#define NULL __null
#else
#define NULL ((void*)0)
#endif
#define offsetof(t, d) __builtin_offsetof(t, d)
#endif
#ifdef __need_wint_t
#ifndef RT_CLANG_WINT_T
#define RT_CLANG_WINT_T
typedef __WINT_TYPE__ wint_t;
#endif
#endif
#undef __need_size_t
#undef __need_ptrdiff_t
#undef __need_wchar_t
#undef __need_NULL
#undef __need_wint_t
#undef __need_offsetof
#undef __need_max_align_t
