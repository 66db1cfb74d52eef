// Test kernels for the CPU emulator: block barriers, warp collectives, thread/block indices.
// Each kernel writes results that tests/test_emulator.py recomputes with numpy.

// Tree reduction in shared memory, one __syncthreads per level (a barrier inside a loop).
template <int B, class T>
__global__ void block_sum(T* out, const T* x, int n) {
  __shared__ T s[B];
  int t = threadIdx.x;
  T acc = 0;
  for (int i = blockIdx.x * B + t; i < n; i += B * gridDim.x) acc += x[i];
  s[t] = acc;
  __syncthreads();
  for (int o = B / 2; o > 0; o >>= 1) {
    if (t < o) s[t] += s[t + o];
    __syncthreads();
  }
  if (t == 0) out[blockIdx.x] = s[0];
}

// Warp-shuffle reduction; the block may end in a partial warp (lanes past the end do not exist).
__global__ void warp_reduce(float* out, const float* x, int n) {
  static __shared__ float partial[32];  // `static __shared__`, as in NVIDIA's blockReduceSum sample
  int t = threadIdx.x, i = blockIdx.x * blockDim.x + t;
  int lane = t % 32, warp = t / 32, nwarps = (blockDim.x + 31) / 32;
  int warp_threads = min(32, (int)blockDim.x - warp * 32);
  unsigned mask = warp_threads == 32 ? 0xffffffffu : (1u << warp_threads) - 1u;
  float v = i < n ? x[i] : 0.0f;
  // lanes beyond warp_threads do not exist; lanes whose source is past them keep their own value
  for (int o = 16; o > 0; o >>= 1) {
    float other = __shfl_down_sync(mask, v, o);
    if (lane + o < warp_threads) v += other;
  }
  if (lane == 0) partial[warp] = v;
  __syncthreads();
  if (t == 0) {
    float s = 0;
    for (int w = 0; w < nwarps; ++w) s += partial[w];
    out[blockIdx.x] = s;
  }
}

// Every shuffle flavour with a runtime width: out[k][t] for k = idx, up, down, xor.
__global__ void shuffles(int* out, int src, int delta, int width) {
  int t = threadIdx.x, n = blockDim.x;
  int v = t * 10 + 1;
  out[0 * n + t] = __shfl_sync(0xffffffffu, v, src, width);
  out[1 * n + t] = __shfl_up_sync(0xffffffffu, v, delta, width);
  out[2 * n + t] = __shfl_down_sync(0xffffffffu, v, delta, width);
  out[3 * n + t] = __shfl_xor_sync(0xffffffffu, v, delta, width);
  double d = __shfl_xor_sync(0xffffffffu, (double)v + 0.5, 1);  // 8-byte values move whole
  out[4 * n + t] = (int)(d * 2.0);
}

// Votes: ballot / any / all / match_any / __reduce_add_sync over a predicate taken from the data.
__global__ void votes(unsigned* out, const int* pred, const int* key) {
  int t = threadIdx.x, n = blockDim.x;
  int p = pred[t];
  out[0 * n + t] = __ballot_sync(0xffffffffu, p);
  out[1 * n + t] = __any_sync(0xffffffffu, p);
  out[2 * n + t] = __all_sync(0xffffffffu, p);
  out[3 * n + t] = __match_any_sync(0xffffffffu, key[t]);
  out[4 * n + t] = __reduce_add_sync(0xffffffffu, (unsigned)key[t]);
  out[5 * n + t] = (unsigned)__reduce_max_sync(0xffffffffu, key[t] - 50);
}

// Block-wide reductions of a predicate, twice in a row (the second must not see the first's count).
__global__ void sync_reductions(int* out, const int* pred) {
  int t = threadIdx.x + blockDim.x * threadIdx.y;
  int nt = blockDim.x * blockDim.y;
  int b = blockIdx.x, p = pred[b * nt + t];
  int c = __syncthreads_count(p);
  int a = __syncthreads_and(p);
  int o = __syncthreads_or(p);
  int c2 = __syncthreads_count(!p);
  if (t == 0) {
    out[b * 4 + 0] = c;
    out[b * 4 + 1] = a;
    out[b * 4 + 2] = o;
    out[b * 4 + 3] = c2;
  }
}

// Threads past n return before two later barriers; the remaining ones must still finish (sm_70+).
__global__ void early_return(float* y, const float* x, int n) {
  __shared__ float s[256];
  int t = threadIdx.x, i = blockIdx.x * blockDim.x + t;
  if (i >= n) return;
  s[t] = x[i];
  __syncthreads();
  int live = min((int)blockDim.x, n - (int)(blockIdx.x * blockDim.x));
  float left = s[(t + live - 1) % live];
  __syncthreads();
  s[t] = left;
  __syncthreads();
  y[i] = s[t] + x[i];
}

// Every thread writes its indices: 2-D and 3-D blocks and grids, x fastest.
__global__ void indices(int* out) {
  unsigned b = blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z);
  unsigned t = threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
  unsigned nt = blockDim.x * blockDim.y * blockDim.z;
  int* o = out + 6 * (b * nt + t);
  o[0] = threadIdx.x; o[1] = threadIdx.y; o[2] = threadIdx.z;
  o[3] = blockIdx.x; o[4] = blockIdx.y; o[5] = blockIdx.z;
}

// 3x3 box sum with zero padding: a 2-D block loads its tile plus a one-cell halo into shared memory
// (threads loop over the (T+2)^2 cells), then every thread sums its neighbourhood.
template <int T>
__global__ void box3x3(float* out, const float* in, int rows, int cols) {
  __shared__ float halo[T + 2][T + 2];
  int r0 = blockIdx.y * T - 1, c0 = blockIdx.x * T - 1;
  for (int k = threadIdx.y * blockDim.x + threadIdx.x; k < (T + 2) * (T + 2); k += blockDim.x * blockDim.y) {
    int r = r0 + k / (T + 2), c = c0 + k % (T + 2);
    halo[k / (T + 2)][k % (T + 2)] = (r >= 0 && r < rows && c >= 0 && c < cols) ? in[r * cols + c] : 0.0f;
  }
  __syncthreads();
  int r = blockIdx.y * T + threadIdx.y, c = blockIdx.x * T + threadIdx.x;
  if (r >= rows || c >= cols) return;
  float s = 0;
  for (int dr = 0; dr < 3; ++dr)
    for (int dc = 0; dc < 3; ++dc) s += halo[threadIdx.y + dr][threadIdx.x + dc];
  out[r * cols + c] = s;
}

// Cost benchmark: nbar barriers in a loop.
__global__ void barrier_loop(int* out, int nbar) {
  __shared__ int s[1024];
  int t = threadIdx.x;
  s[t] = 0;
  for (int k = 0; k < nbar; ++k) {
    __syncthreads();
    s[(t + 1) % blockDim.x] += 1;
  }
  __syncthreads();
  out[t] = s[t];
}

// Device printf goes to the process's stdout, flushed when the launch ends.
__global__ void hello(int tag) { printf("tag %d block %u thread %u\n", tag, blockIdx.x, threadIdx.x); }
