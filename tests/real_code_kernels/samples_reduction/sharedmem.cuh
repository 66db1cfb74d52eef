// Dynamically sized shared memory for templated kernels, in the CUDA samples' style: a templated kernel cannot
// declare `extern __shared__ T s[]` for several T (the declarations would conflict), so each type gets an
// accessor whose conversion operator hands out the block's dynamic shared memory with that type.
#pragma once

template <class T>
struct SharedMemory {
  __device__ inline operator T *() {
    extern __shared__ int __smem[];
    return (T *)__smem;
  }
  __device__ inline operator const T *() const {
    extern __shared__ int __smem[];
    return (T *)__smem;
  }
};

// double needs 8-byte alignment: its own array
template <>
struct SharedMemory<double> {
  __device__ inline operator double *() {
    extern __shared__ double __smem_d[];
    return __smem_d;
  }
};
