// Test kernels for the CPU emulator: atomics, dynamic / static / namespace-scope shared memory, 16-bit floats.
#include <cuda_fp16.h>
#include <cuda_runtime.h>

// Shared-memory histogram with int and float atomics, then merged into global memory with atomics.
__global__ void histogram(int* hist, float* weight_sum, const int* bins, const float* w, int n, int nbins) {
  __shared__ int h[64];
  __shared__ float ws[64];
  for (int b = threadIdx.x; b < nbins; b += blockDim.x) { h[b] = 0; ws[b] = 0.0f; }
  __syncthreads();
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x) {
    atomicAdd(&h[bins[i]], 1);
    atomicAdd(&ws[bins[i]], w[i]);
  }
  __syncthreads();
  for (int b = threadIdx.x; b < nbins; b += blockDim.x) {
    atomicAdd(&hist[b], h[b]);
    atomicAdd(&weight_sum[b], ws[b]);
  }
}

// Global atomics of every flavour over the same data.
__global__ void global_atomics(int* ires, unsigned* ures, unsigned long long* ull, double* dsum, const int* x, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  int v = x[i];
  atomicAdd(&ires[0], v);
  atomicSub(&ires[1], v);
  atomicMax(&ires[2], v);
  atomicMin(&ires[3], v);
  atomicOr(&ures[0], 1u << (v & 31));
  atomicAnd(&ures[1], ~(1u << (v & 31)));
  atomicXor(&ures[2], (unsigned)v);
  atomicInc(&ures[3], 7u);              // wraps to 0 after 7
  atomicAdd(&ull[0], (unsigned long long)v * 1000000007ull);
  atomicAdd(dsum, (double)v * 0.25);
  // a CAS loop (float max through its bit pattern, positive values)
  int old = ires[4], assumed;
  do {
    assumed = old;
    old = atomicCAS(&ires[4], assumed, max(assumed, v * 3));
  } while (old != assumed);
}

// A spin lock on atomicCAS / atomicExch between the threads of one block: the failed CAS yields.
__global__ void spin_lock(int* lock, int* counter, int rounds) {
  for (int r = 0; r < rounds; ++r) {
    while (atomicCAS(lock, 0, 1) != 0) {
    }
    int c = *counter;   // critical section: a non-atomic read-modify-write
    __nanosleep(10);    // let the others try the lock meanwhile
    *counter = c + 1;
    atomicExch(lock, 0);
  }
}

// Dynamic shared memory: two extern arrays alias one buffer (as in CUDA); a float view and an int view.
extern __shared__ float dyn_ns[];  // namespace scope
__global__ void dyn_alias(float* out_f, int* out_i, const float* x, int n) {
  extern __shared__ __align__(16) int dyn_i[];
  int t = threadIdx.x, i = blockIdx.x * blockDim.x + t;
  dyn_ns[t] = i < n ? x[i] : 0.0f;
  __syncthreads();
  out_f[i] = dyn_ns[blockDim.x - 1 - t];  // reversed within the block
  out_i[i] = dyn_i[t];                    // the same bytes seen as int
}

// The classic SharedMemory<T> helper: extern __shared__ in a struct's conversion operator.
template <class T>
struct SharedMemory {
  __device__ operator T*() {
    extern __shared__ int __smem[];
    return (T*)__smem;
  }
};
template <class T>
__global__ void dyn_scan(T* out, const T* x, int n) {  // inclusive scan of one block (Hillis-Steele)
  T* s = SharedMemory<T>();
  int t = threadIdx.x;
  s[t] = t < n ? x[t] : T(0);
  __syncthreads();
  for (int o = 1; o < (int)blockDim.x; o <<= 1) {
    T v = t >= o ? s[t - o] : T(0);
    __syncthreads();
    s[t] += v;
    __syncthreads();
  }
  if (t < n) out[t] = s[t];
}

// Several declarators in one __shared__ declaration, an aligned struct, a namespace-scope variable.
struct alignas(16) Pair { float a; int b; };
__shared__ int ns_counter;
__global__ void decl_forms(float* out, int* out_i) {
  __shared__ float a[32], b[32];
  __shared__ __align__(16) Pair p;
  int t = threadIdx.x;
  if (t == 0) { p.a = 0.5f * blockIdx.x; p.b = 0; ns_counter = 0; }
  a[t] = (float)t;
  b[t] = (float)(2 * t);
  __syncthreads();
  atomicAdd(&p.b, t);
  atomicAdd(&ns_counter, 1);
  __syncthreads();
  out[blockIdx.x * 32 + t] = a[31 - t] + b[t] + p.a;
  if (t == 0) { out_i[2 * blockIdx.x] = p.b; out_i[2 * blockIdx.x + 1] = ns_counter; }
}

// __half and __half2 storage with float arithmetic.
__global__ void half_ops(__half* y, float* yf, const __half* a, const __half* b, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  __half s = __hadd(a[i], b[i]);
  __half2 p = __floats2half2_rn(__half2float(a[i]), __half2float(b[i]));
  __half2 q = __hmul2(p, p);
  y[i] = __hfma(a[i], b[i], s);
  yf[i] = __low2float(q) + __high2float(q);
}
__global__ void to_half(unsigned short* h, const float* x, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) h[i] = __half_as_ushort(__float2half(x[i]));
}
__global__ void to_bf16(unsigned short* h, const float* x, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) h[i] = __bfloat16_as_ushort(__float2bfloat16(x[i]));
}

// Scalar parameters of several types, converted by the launcher from what Python passed.
__global__ void half_scale(__half* y, float* z, const __half* x, __half s, float f, int n, bool neg) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  __half v = x[i] * s;
  y[i] = neg ? -v : v;
  z[i] = __half2float(x[i]) * f;
}
