// <stdnoreturn.h>: a compiler header (clang's resource dir), which the libclang wheel does not ship; parser only.
#pragma once
#ifndef __cplusplus
#define noreturn _Noreturn
#endif
