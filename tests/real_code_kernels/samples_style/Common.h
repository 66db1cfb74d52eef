// cuda-samples style: helpers from Common/ (not shipped here) and the project's block size.
#pragma once
#include <helper_cuda.h>
#include <helper_functions.h>
#define BLOCK_SIZE 8
