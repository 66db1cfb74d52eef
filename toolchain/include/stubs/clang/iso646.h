// <iso646.h>: a compiler header (clang's resource dir), which the libclang wheel does not ship; parser only.
#pragma once
