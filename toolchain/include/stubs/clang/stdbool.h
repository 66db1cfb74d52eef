// <stdbool.h>: a compiler header (clang's resource dir), which the libclang wheel does not ship; parser only.
#pragma once
#ifndef __cplusplus
#define bool _Bool
#define true 1
#define false 0
#endif
#define __bool_true_false_are_defined 1
