// <stdalign.h>: a compiler header (clang's resource dir), which the libclang wheel does not ship; parser only.
#pragma once
#ifndef __cplusplus
#define alignas _Alignas
#define alignof _Alignof
#endif
#define __alignas_is_defined 1
#define __alignof_is_defined 1
