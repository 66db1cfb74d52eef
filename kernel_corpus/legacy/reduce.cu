// reduce.cu — legacy row-reduction kernels (float32): Softmax, LayerNormalization and GlobalAveragePool.
//
// The input is viewed as [rows, cols], row-major. A row is handled by THREADS threads along threadIdx.x:
//   THREADS == 32: one warp per row, ROWS rows per block (block (32, ROWS)), warp-shuffle reductions only;
//   THREADS  > 32: one block per row (ROWS == 1, block (THREADS, 1)), warp shuffles then a shared-memory step.
// grid ceil(rows / ROWS). A warp whose row is past the end leaves at once (it shares no barrier).

#define REDUCE_LOWEST (-3.402823466e+38f)

template <bool MAX>
__device__ __forceinline__ float reduce_op(float a, float b) {
  return MAX ? fmaxf(a, b) : a + b;
}

// Butterfly over the 32 lanes of a warp: every lane gets the result.
template <bool MAX>
__device__ __forceinline__ float warp_reduce(float v) {
  for (int offset = 16; offset > 0; offset >>= 1) v = reduce_op<MAX>(v, __shfl_xor_sync(0xffffffffu, v, offset));
  return v;
}

// Reduction over a block of THREADS threads (a multiple of 32): warp results meet in shared memory, warp 0 reduces
// them, every thread gets the result. All threads of the block must call it.
template <int THREADS, bool MAX>
__device__ float block_reduce(float v) {
  static_assert(THREADS % 32 == 0 && THREADS <= 1024, "a whole number of warps");
  __shared__ float partial[32];  // one slot per warp (at most 32 warps)
  __shared__ float result;
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  v = warp_reduce<MAX>(v);
  if (lane == 0) partial[warp] = v;
  __syncthreads();
  if (warp == 0) {
    float t = lane < THREADS / 32 ? partial[lane] : (MAX ? REDUCE_LOWEST : 0.0f);
    t = warp_reduce<MAX>(t);
    if (lane == 0) result = t;
  }
  __syncthreads();
  return result;
}

// Reduction over the threads that share a row.
template <int THREADS, bool MAX>
__device__ __forceinline__ float row_reduce(float v) {
  if constexpr (THREADS == 32) return warp_reduce<MAX>(v);
  else return block_reduce<THREADS, MAX>(v);
}

// Softmax over the last axis: y = exp(x - max) / sum exp(x - max).
template <int THREADS, int ROWS>
__global__ void softmax_rows(const float* __restrict__ X, float* __restrict__ Y, int rows, int cols) {
  static_assert(THREADS == 32 || ROWS == 1, "warp rows or block rows");
  const int row = blockIdx.x * ROWS + threadIdx.y;
  if (row >= rows) return;
  const float* x = X + (size_t)row * cols;
  float* y = Y + (size_t)row * cols;
  float mx = REDUCE_LOWEST;
  for (int j = threadIdx.x; j < cols; j += THREADS) mx = fmaxf(mx, x[j]);
  mx = row_reduce<THREADS, true>(mx);
  float sum = 0.0f;
  for (int j = threadIdx.x; j < cols; j += THREADS) sum += expf(x[j] - mx);
  sum = row_reduce<THREADS, false>(sum);
  const float inv = 1.0f / sum;
  for (int j = threadIdx.x; j < cols; j += THREADS) y[j] = expf(x[j] - mx) * inv;
}

// LayerNormalization over the last cols elements: y = (x - mean) / sqrt(var + eps) * scale (+ bias),
// two passes (mean, then the centred variance) for accuracy.
template <int THREADS, int ROWS, bool BIAS>
__global__ void layernorm_rows(const float* __restrict__ X, const float* __restrict__ scale,
                               const float* __restrict__ bias, float* __restrict__ Y, int rows, int cols,
                               float eps) {
  static_assert(THREADS == 32 || ROWS == 1, "warp rows or block rows");
  const int row = blockIdx.x * ROWS + threadIdx.y;
  if (row >= rows) return;
  const float* x = X + (size_t)row * cols;
  float* y = Y + (size_t)row * cols;
  float sum = 0.0f;
  for (int j = threadIdx.x; j < cols; j += THREADS) sum += x[j];
  const float mean = row_reduce<THREADS, false>(sum) / cols;
  float sq = 0.0f;
  for (int j = threadIdx.x; j < cols; j += THREADS) sq += (x[j] - mean) * (x[j] - mean);
  const float rstd = 1.0f / sqrtf(row_reduce<THREADS, false>(sq) / cols + eps);
  for (int j = threadIdx.x; j < cols; j += THREADS) {
    float v = (x[j] - mean) * rstd * scale[j];
    if (BIAS) v += bias[j];
    y[j] = v;
  }
}

// Mean of each row (GlobalAveragePool with rows = N*C, cols = H*W): y[row] = sum(x[row, :]) / cols.
template <int THREADS, int ROWS>
__global__ void mean_rows(const float* __restrict__ X, float* __restrict__ Y, int rows, int cols) {
  static_assert(THREADS == 32 || ROWS == 1, "warp rows or block rows");
  const int row = blockIdx.x * ROWS + threadIdx.y;
  if (row >= rows) return;
  const float* x = X + (size_t)row * cols;
  float sum = 0.0f;
  for (int j = threadIdx.x; j < cols; j += THREADS) sum += x[j];
  sum = row_reduce<THREADS, false>(sum);
  if (threadIdx.x == 0) Y[row] = sum / cols;
}
