// <stdint.h>: a compiler header (clang's resource dir), which the libclang wheel does not ship; parser only.
// As clang's in a hosted environment: the C library's.
#if __has_include_next(<stdint.h>)
#include_next <stdint.h>
#endif
