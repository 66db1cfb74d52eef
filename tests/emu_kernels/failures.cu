// Test kernels for the CPU emulator: launches that must end in a clear error, and cross-block polling.

// Threads 0..32 reach __syncthreads while lanes 33..63 wait in a shuffle for lane 32 (alive, at the
// barrier): no thread can proceed.
__global__ void deadlock_mixed(int* out) {
  int v = threadIdx.x;
  if (threadIdx.x <= 32) __syncthreads();
  else v = __shfl_sync(0xffffffffu, v, 0);
  out[threadIdx.x] = v;
}

// A barrier in a branch: threads >= k wait forever in a second barrier... which is the same barrier
// (bar.sync 0), so this completes on sm_70+; the deadlock needs a warp collective the others never reach.
__global__ void deadlock_branch(int* out, int k) {
  if ((int)threadIdx.x < k) {
    out[threadIdx.x] = __ballot_sync(0xffffffffu, 1);  // the lanes >= k of this warp never come
  } else {
    __syncthreads();                                   // ...because they wait here for the ballot lanes
  }
}

// Block b polls a flag that block b+1 sets (and the last block sets the first flag): only a cooperative
// launch (all blocks alive) can finish; a plain launch runs block 0 first and it polls forever.
__global__ void flag_chain(int* flags, int* order, int* counter) {
  unsigned b = blockIdx.x, nb = gridDim.x;
  if (threadIdx.x == 0) {
    if (b == nb - 1) atomicExch(&flags[nb - 1], 1);
    else while (atomicAdd(&flags[b + 1], 0) == 0) __nanosleep(100);   // polls block b+1
    order[b] = atomicAdd(counter, 1);
    atomicExch(&flags[b], 1);
  }
  __syncthreads();
}

// Block 1 spins (volatile read + emu_yield) on a flag set by block 0.
__global__ void spin_on_flag(volatile int* flag, int* seen) {
  if (blockIdx.x == 0 && threadIdx.x == 0) *flag = 42;
  if (blockIdx.x == 1 && threadIdx.x == 0) {
    while (*flag == 0) emu_yield("flag from block 0");
    seen[0] = *flag;
  }
}

// Block 0 spins on a volatile flag without any yield point: the stall watchdog must end the launch.
__global__ void spin_no_yield(volatile int* flag) {
  if (blockIdx.x == 0) {
    while (*flag == 0) {
    }
  } else {
    *flag = 1;
  }
}

// Faults inside device code must end the launch, not the process.
__global__ void null_write(int* p) { if (threadIdx.x == 3) p[threadIdx.x] = 1; }
__device__ int deep(int d, volatile char* prev) {
  volatile char pad[4096];
  pad[0] = (char)d;
  pad[4095] = prev ? prev[0] : 0;
  return d == 0 ? pad[0] : deep(d - 1, pad) + pad[4095];
}
__global__ void stack_hog(int* out, int depth) { out[threadIdx.x] = deep(depth, nullptr); }
__global__ void huge_frame(int* out, int k) {  // one frame larger than the guard pages
  volatile char big[200000];
  big[k] = (char)threadIdx.x;
  out[threadIdx.x] = big[k];
}
__global__ void failing_assert(int* x) { assert(x[threadIdx.x] >= 0); }
__global__ void int_div(int* out, const int* d) { out[threadIdx.x] = 100 / d[threadIdx.x]; }
__global__ void throws(int* x) {
  if (threadIdx.x == 1) throw x[0];
}

// Reads k elements past its own slot: out of bounds once threadIdx.x + k passes the launch's dyn_smem.
// (This file has no namespace-scope extern __shared__ array, which would pin the dynamic base and make the
// check page-granular.)
__global__ void dyn_overflow(float* out, int k) {
  extern __shared__ float buf[];
  buf[threadIdx.x] = (float)threadIdx.x;
  __syncthreads();
  out[threadIdx.x] = buf[(threadIdx.x + k) % 4096];
}
