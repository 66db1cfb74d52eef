// reduce.cu — legacy reduction kernels (float32): Softmax/LogSoftmax (rows, or any axis), LayerNormalization
// (with its Mean and InvStdDev outputs), Instance/GroupNormalization, GlobalAveragePool and the Reduce* ops over any
// set of axes.
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

// Softmax over the last axis: y = exp(x - max) / sum exp(x - max); LogSoftmax (LOG): y = x - max - log(sum).
template <int THREADS, int ROWS, bool LOG>
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
  const float inv = 1.0f / sum, shift = mx + logf(sum);
  for (int j = threadIdx.x; j < cols; j += THREADS) y[j] = LOG ? x[j] - shift : expf(x[j] - mx) * inv;
}

// Softmax/LogSoftmax over the middle axis of X [outer, len, inner], one thread per (outer, inner) pair walking the
// axis three times. block (BLOCK), grid ceil(outer*inner / BLOCK).
template <bool LOG, int BLOCK>
__global__ void softmax_axis(const float* __restrict__ X, float* __restrict__ Y, int outer, int len, int inner) {
  const size_t idx = (size_t)blockIdx.x * BLOCK + threadIdx.x;
  if (idx >= (size_t)outer * inner) return;
  const size_t base = (idx / inner) * (size_t)len * inner + idx % inner;
  float mx = REDUCE_LOWEST;
  for (int k = 0; k < len; ++k) mx = fmaxf(mx, X[base + (size_t)k * inner]);
  float sum = 0.0f;
  for (int k = 0; k < len; ++k) sum += expf(X[base + (size_t)k * inner] - mx);
  const float inv = 1.0f / sum, shift = mx + logf(sum);
  for (int k = 0; k < len; ++k) {
    const float x = X[base + (size_t)k * inner];
    Y[base + (size_t)k * inner] = LOG ? x - shift : expf(x - mx) * inv;
  }
}

// LayerNormalization over the last cols elements: y = (x - mean) / sqrt(var + eps) * scale (+ bias),
// two passes (mean, then the centred variance) for accuracy; with STATS, each row's mean and 1/sqrt(var + eps) go
// to mean_out[row] and rstd_out[row] (ONNX's optional outputs Mean and InvStdDev).
template <int THREADS, int ROWS, bool BIAS, bool STATS>
__global__ void layernorm_rows(const float* __restrict__ X, const float* __restrict__ scale,
                               const float* __restrict__ bias, float* __restrict__ Y, float* __restrict__ mean_out,
                               float* __restrict__ rstd_out, int rows, int cols, float eps) {
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
  if (STATS && threadIdx.x == 0) {
    mean_out[row] = mean;
    rstd_out[row] = rstd;
  }
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

// Instance/GroupNormalization, a row per (n, group) of cols = channels_per_group * spatial elements: normalised as
// layernorm_rows does, then scaled per channel (scale[g*cpg + j/spatial]) or, with per_group, per group
// (scale[g]; GroupNormalization before opset 21).
template <int THREADS, int ROWS>
__global__ void groupnorm_rows(const float* __restrict__ X, const float* __restrict__ scale,
                               const float* __restrict__ bias, float* __restrict__ Y, int rows, int cols, int groups,
                               int spatial, int per_group, float eps) {
  static_assert(THREADS == 32 || ROWS == 1, "warp rows or block rows");
  const int row = blockIdx.x * ROWS + threadIdx.y;
  if (row >= rows) return;
  const float* x = X + (size_t)row * cols;
  float* y = Y + (size_t)row * cols;
  const int g = row % groups, cpg = cols / spatial;
  float sum = 0.0f;
  for (int j = threadIdx.x; j < cols; j += THREADS) sum += x[j];
  const float mean = row_reduce<THREADS, false>(sum) / cols;
  float sq = 0.0f;
  for (int j = threadIdx.x; j < cols; j += THREADS) sq += (x[j] - mean) * (x[j] - mean);
  const float rstd = 1.0f / sqrtf(row_reduce<THREADS, false>(sq) / cols + eps);
  for (int j = threadIdx.x; j < cols; j += THREADS) {
    const int c = per_group ? g : g * cpg + j / spatial;
    y[j] = (x[j] - mean) * rstd * scale[c] + bias[c];
  }
}

// Reduce* ops: 0 Sum, 1 Mean, 2 Max, 3 Min, 4 Prod, 5 L1, 6 L2, 7 SumSquare, 8 LogSumExp, 9 LogSum.
// How partial results combine (KIND): 0 add, 1 max, 2 min, 3 multiply (Max/Min keep NaN, as ONNX does).

template <int KIND>
__device__ __forceinline__ float combine(float a, float b) {
  if (KIND == 1) return (a > b || a != a) ? a : b;
  if (KIND == 2) return (a < b || a != a) ? a : b;
  if (KIND == 3) return a * b;
  return a + b;
}

template <int KIND>
__device__ __forceinline__ float identity_of() {
  const float inf = __int_as_float(0x7f800000);
  return KIND == 1 ? -inf : KIND == 2 ? inf : KIND == 3 ? 1.0f : 0.0f;
}

template <int KIND>
__device__ __forceinline__ float warp_combine(float v) {
  for (int offset = 16; offset > 0; offset >>= 1) v = combine<KIND>(v, __shfl_xor_sync(0xffffffffu, v, offset));
  return v;
}

// The term an element adds: |x| for L1, x*x for L2/SumSquare, x otherwise.
template <int OP>
__device__ __forceinline__ float term(float x) { return OP == 5 ? fabsf(x) : (OP == 6 || OP == 7) ? x * x : x; }

// Offset of the i-th element of a view of up to 4 dims [d0, d1, d2, d3] (d0 implied) with element strides s0..s3.
__device__ __forceinline__ size_t view_offset(size_t i, int d1, int d2, int d3, int s0, int s1, int s2, int s3) {
  const size_t i3 = i % d3;
  i /= d3;
  const size_t i2 = i % d2;
  i /= d2;
  const size_t i1 = i % d1;
  return (i / d1) * s0 + i1 * s1 + i2 * s2 + i3 * s3;
}

// Reduction over any set of axes: output element o (a warp each, ROWS per block) walks its kept dims
// [k0..k3] (strides ks) and reduces n_red elements of the reduced dims [r0..r3] (strides rs).
// block (32, ROWS), grid ceil(n_out / ROWS).
template <int OP, int ROWS>
__global__ void reduce_axes(const float* __restrict__ X, float* __restrict__ Y, int n_out, int n_red, int k1, int k2,
                            int k3, int ks0, int ks1, int ks2, int ks3, int r1, int r2, int r3, int rs0, int rs1,
                            int rs2, int rs3) {
  constexpr int KIND = (OP == 2 || OP == 8) ? 1 : OP == 3 ? 2 : OP == 4 ? 3 : 0;  // LogSumExp: the max first
  const int o = blockIdx.x * ROWS + threadIdx.y;
  if (o >= n_out) return;
  const float* x = X + view_offset(o, k1, k2, k3, ks0, ks1, ks2, ks3);
  float acc = identity_of<KIND>();
  for (int j = threadIdx.x; j < n_red; j += 32) acc = combine<KIND>(acc, term<OP>(x[view_offset(j, r1, r2, r3, rs0, rs1, rs2, rs3)]));
  acc = warp_combine<KIND>(acc);
  if (OP == 8) {  // log-sum-exp: the max found, now the sum of exp(x - max)
    const float mx = fabsf(acc) == __int_as_float(0x7f800000) ? 0.0f : acc;
    float sum = 0.0f;
    for (int j = threadIdx.x; j < n_red; j += 32) sum += expf(x[view_offset(j, r1, r2, r3, rs0, rs1, rs2, rs3)] - mx);
    acc = mx + logf(warp_combine<0>(sum));
  }
  if (threadIdx.x != 0) return;
  if (OP == 1) acc /= n_red;
  if (OP == 6) acc = sqrtf(acc);
  if (OP == 9) acc = logf(acc);
  Y[o] = acc;
}
