// Deliberately broken kernels: each has one defect that one of the emulator's sanitizers must report, with the
// file:line of the marked statement (tests/test_sanitizers.py finds the line by its "@tag" comment).

__global__ void write_past_end(float* out, const float* in, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i <= n) out[i] = 2.0f * (i < n ? in[i] : 0.0f);  // @oob-write: i == n writes one past the end
}

__global__ void read_before_start(float* out, const float* in, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = in[i - 1];  // @oob-read: thread 0 reads in[-1]
}

__global__ void shared_overflow(float* out) {
  __shared__ float tile[32];
  __shared__ float other[32];
  tile[threadIdx.x] = threadIdx.x;  // @shared-write: 48 threads, 32 elements
  other[threadIdx.x % 32] = 1.0f;
  __syncthreads();
  out[threadIdx.x] = other[threadIdx.x % 32];
}

__global__ void shared_read_overflow(float* out) {
  __shared__ float tile[64];
  tile[threadIdx.x] = threadIdx.x;
  __syncthreads();
  out[threadIdx.x] = tile[threadIdx.x + 1];  // @shared-read: thread 63 reads tile[64]
}

__global__ void dynamic_overflow(float* out, int n) {
  extern __shared__ float dyn[];
  dyn[threadIdx.x] = 1.0f;  // @dyn-write: 64 threads, n floats of dynamic shared memory
  __syncthreads();
  out[threadIdx.x] = dyn[threadIdx.x % n];
}

__global__ void missing_barrier(float* out) {
  __shared__ float buf[128];
  buf[threadIdx.x] = threadIdx.x;  // @race-write
  out[threadIdx.x] = buf[127 - threadIdx.x];  // @race-read: reads another warp's element, no barrier
}

__global__ void two_barriers(float* out) {
  __shared__ float buf[64];
  buf[threadIdx.x] = threadIdx.x;
  if (threadIdx.x < 32) {
    __syncthreads();  // @barrier-a
  } else {
    __syncthreads();  // @barrier-b
  }
  out[threadIdx.x] = buf[63 - threadIdx.x];
}

__global__ void half_skips_barrier(float* out) {
  __shared__ float buf[64];
  buf[threadIdx.x] = threadIdx.x;
  if (threadIdx.x < 32) __syncthreads();  // @skipped-barrier
  out[threadIdx.x] = buf[(threadIdx.x + 32) % 64];  // @skipper-access: the upper half never waited
}

// Legal (not a defect): the returning lanes have exited, and a mask may name exited lanes.
__global__ void partial_shuffle(float* out) {
  float v = threadIdx.x;
  if (threadIdx.x >= 16) return;  // lanes 16..31 leave
  v += __shfl_down_sync(0xffffffffu, v, 1);  // @legal-mask: names lanes that returned at once
  out[threadIdx.x] = v;
}

__global__ void late_leavers(float* out) {
  float v = threadIdx.x;
  if (threadIdx.x < 16) {
    v += __shfl_xor_sync(0xffffffffu, v, 1);  // @late-mask: lanes 16..31 are alive here, then return
  }
  out[threadIdx.x] = v;
}
