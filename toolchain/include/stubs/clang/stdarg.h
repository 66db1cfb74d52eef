// <stdarg.h>: a compiler header (clang's resource dir), which the libclang wheel does not ship; parser only.
#ifndef RT_CLANG_GNUC_VA_LIST
#define RT_CLANG_GNUC_VA_LIST
typedef __builtin_va_list __gnuc_va_list;
#endif
#ifdef __need___va_list
#undef __need___va_list
#else
#ifndef RT_CLANG_STDARG_H
#define RT_CLANG_STDARG_H
typedef __builtin_va_list va_list;
#define va_start(ap, param) __builtin_va_start(ap, param)
#define va_end(ap) __builtin_va_end(ap)
#define va_arg(ap, type) __builtin_va_arg(ap, type)
#define va_copy(dest, src) __builtin_va_copy(dest, src)
#define __va_copy(d, s) __builtin_va_copy(d, s)
#endif
#endif
