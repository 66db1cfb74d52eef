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

// Legal on sm_70+ (PTX ISA: exiting threads release a barrier they hold up): the upper half returns after
// touching shared memory while the lower half waits at a later barrier.
__global__ void early_exit_after_shared(float* out, int n) {
  __shared__ float buf[64];
  buf[threadIdx.x] = threadIdx.x;
  __syncthreads();
  if ((int)threadIdx.x >= n) return;
  float v = buf[(threadIdx.x + 1) % n];  // read while the others may already wait below
  __syncthreads();  // the exited threads no longer count
  buf[threadIdx.x] = v;
  __syncthreads();
  out[threadIdx.x] = buf[threadIdx.x];
}

// A shuffle may name exited lanes in its mask, and lanes may leave while the others wait in it (PTX ISA: it
// waits for the non-exited lanes of the mask); here every read stays among the lanes that take part.
__global__ void exited_lanes_in_mask(float* out) {
  float v = threadIdx.x;
  if (threadIdx.x >= 16) return;  // lanes 16..31 leave
  v += __shfl_xor_sync(0xffffffffu, v, 1);  // @legal-mask: names lanes that returned
  out[threadIdx.x] = v;
}

__global__ void late_leavers(float* out) {
  float v = threadIdx.x;
  if (threadIdx.x < 16) {
    v += __shfl_xor_sync(0xffffffffu, v, 1);  // lanes 16..31 are alive here, run on and return
  }
  out[threadIdx.x] = v;
}

// Defect when `use` is set: lane n-1 reads lane n, which has returned (PTX ISA: the value is undefined), and
// writes what it got. Without `use` the undefined value is dropped (as warp reductions over a partial warp do).
__global__ void shuffle_from_exited(float* out, int n, int use) {
  float v = threadIdx.x;
  if ((int)threadIdx.x >= n) return;
  float other = __shfl_down_sync(0xffffffffu, v, 1);  // @exited-source
  if (use || (int)threadIdx.x + 1 < n) v += other;
  out[threadIdx.x] = v;
}
