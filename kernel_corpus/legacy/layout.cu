// layout.cu — legacy data-movement kernels (float32 data, int64 indices): Concat, Split/Slice, Transpose, Gather,
// GatherElements, Tile, CumSum, Pad and strided N-d copies (Slice over several axes).

// One Concat input into its place in the output: src viewed as [outer, src_inner], dst as [outer, dst_inner];
// element (o, r) goes to dst[o*dst_inner + offset + r]. One launch per input. block (BLOCK), grid ceil(outer*src_inner / BLOCK).
template <int BLOCK>
__global__ void concat_copy(const float* __restrict__ src, float* __restrict__ dst, int outer, int src_inner,
                            int dst_inner, int offset) {
  const size_t idx = (size_t)blockIdx.x * BLOCK + threadIdx.x;
  if (idx >= (size_t)outer * src_inner) return;
  const size_t o = idx / src_inner, r = idx % src_inner;
  dst[o * dst_inner + offset + r] = src[idx];
}

// Strided slice of one axis: src [outer, len_in, inner] -> dst [outer, len_out, inner] with
// dst[o, j, i] = src[o, start + j*step, i] (step may be negative). block (BLOCK), grid ceil(outer*len_out*inner / BLOCK).
template <int BLOCK>
__global__ void slice_axis(const float* __restrict__ src, float* __restrict__ dst, int outer, int len_in, int len_out,
                           int inner, int start, int step) {
  const size_t idx = (size_t)blockIdx.x * BLOCK + threadIdx.x;
  if (idx >= (size_t)outer * len_out * inner) return;
  const int i = idx % inner;
  const int j = (idx / inner) % len_out;
  const long long o = idx / ((size_t)inner * len_out);
  const long long pos = start + (long long)j * step;
  dst[idx] = src[(o * len_in + pos) * inner + i];
}

// Transpose of up to 4 dims: the output [d0, d1, d2, d3] (d0 = n / (d1*d2*d3)) reads the input through s0..s3,
// the input's element stride along each output dim. block (BLOCK), grid ceil(n / BLOCK).
template <int BLOCK>
__global__ void transpose_nd(const float* __restrict__ src, float* __restrict__ dst, int n, int d1, int d2, int d3,
                             int s0, int s1, int s2, int s3) {
  const size_t idx = (size_t)blockIdx.x * BLOCK + threadIdx.x;
  if (idx >= (size_t)n) return;
  size_t rest = idx;
  const size_t i3 = rest % d3;
  rest /= d3;
  const size_t i2 = rest % d2;
  rest /= d2;
  const size_t i1 = rest % d1;
  dst[idx] = src[(rest / d1) * s0 + i1 * s1 + i2 * s2 + i3 * s3];
}

// Batched 2-D transpose of the last two dims, [batch, rows, cols] -> [batch, cols, rows], through a padded
// TILE x (TILE+1) shared tile so both global reads and writes are coalesced.
// block (TILE, ROWS), grid (ceil(cols/TILE), ceil(rows/TILE), batch).
template <int TILE, int ROWS>
__global__ void transpose_tiled(const float* __restrict__ src, float* __restrict__ dst, int rows, int cols) {
  __shared__ float tile[TILE][TILE + 1];
  const size_t plane = (size_t)blockIdx.z * rows * cols;
  const int r0 = blockIdx.y * TILE, c0 = blockIdx.x * TILE;
  for (int j = threadIdx.y; j < TILE; j += ROWS) {
    const int r = r0 + j, c = c0 + threadIdx.x;
    if (r < rows && c < cols) tile[j][threadIdx.x] = src[plane + (size_t)r * cols + c];
  }
  __syncthreads();
  for (int j = threadIdx.y; j < TILE; j += ROWS) {
    const int out_row = c0 + j, out_col = r0 + threadIdx.x;
    if (out_row < cols && out_col < rows) dst[plane + (size_t)out_row * rows + out_col] = tile[threadIdx.x][j];
  }
}

// Gather along one axis: X [outer, len, inner], n_idx int64 indices (negative ones count from the end) ->
// Y [outer, n_idx, inner]. block (BLOCK), grid ceil(outer*n_idx*inner / BLOCK).
template <int BLOCK>
__global__ void gather_axis(const float* __restrict__ X, const long long* __restrict__ indices, float* __restrict__ Y,
                            int outer, int len, int n_idx, int inner) {
  const size_t idx = (size_t)blockIdx.x * BLOCK + threadIdx.x;
  if (idx >= (size_t)outer * n_idx * inner) return;
  const size_t i = idx % inner;
  const size_t j = (idx / inner) % n_idx;
  const size_t o = idx / ((size_t)inner * n_idx);
  long long k = indices[j];
  if (k < 0) k += len;
  Y[idx] = X[(o * len + k) * inner + i];
}

// GatherElements: Y has the shape of the indices, up to 4 dims [d0, d1, d2, d3] (d0 implied); Y[c] = X at c with
// coordinate `axis` replaced by indices[c] (negative ones count from len). X is read through its strides s0..s3.
// block (BLOCK), grid ceil(n / BLOCK).
template <int BLOCK>
__global__ void gather_elements(const float* __restrict__ X, const long long* __restrict__ indices,
                                float* __restrict__ Y, int n, int d1, int d2, int d3, int s0, int s1, int s2, int s3,
                                int axis, int len) {
  const size_t idx = (size_t)blockIdx.x * BLOCK + threadIdx.x;
  if (idx >= (size_t)n) return;
  long long c[4];
  size_t rest = idx;
  c[3] = rest % d3;
  rest /= d3;
  c[2] = rest % d2;
  rest /= d2;
  c[1] = rest % d1;
  c[0] = rest / d1;
  long long k = indices[idx];
  c[axis] = k < 0 ? k + len : k;
  Y[idx] = X[c[0] * s0 + c[1] * s1 + c[2] * s2 + c[3] * s3];
}

// Tile: Y [d0, d1, d2, d3] (d0 implied) reads X [e0, e1, e2, e3] at each coordinate modulo X's dim, through X's
// strides s0..s3. block (BLOCK), grid ceil(n / BLOCK).
template <int BLOCK>
__global__ void tile_nd(const float* __restrict__ X, float* __restrict__ Y, int n, int d1, int d2, int d3, int e0,
                        int e1, int e2, int e3, int s0, int s1, int s2, int s3) {
  const size_t idx = (size_t)blockIdx.x * BLOCK + threadIdx.x;
  if (idx >= (size_t)n) return;
  size_t rest = idx;
  const size_t c3 = rest % d3;
  rest /= d3;
  const size_t c2 = rest % d2;
  rest /= d2;
  const size_t c1 = rest % d1;
  const size_t c0 = rest / d1;
  Y[idx] = X[(c0 % e0) * s0 + (c1 % e1) * s1 + (c2 % e2) * s2 + (c3 % e3) * s3];
}

// CumSum over the middle axis of X [outer, len, inner], one thread per (outer, inner) pair; `exclusive` leaves each
// element out of its own sum, `reverse` sums from the end. block (BLOCK), grid ceil(outer*inner / BLOCK).
template <int BLOCK>
__global__ void cumsum_axis(const float* __restrict__ X, float* __restrict__ Y, int outer, int len, int inner,
                            int exclusive, int reverse) {
  const size_t idx = (size_t)blockIdx.x * BLOCK + threadIdx.x;
  if (idx >= (size_t)outer * inner) return;
  const size_t base = (idx / inner) * (size_t)len * inner + idx % inner;
  float acc = 0.0f;
  for (int t = 0; t < len; ++t) {
    const size_t at = base + (size_t)(reverse ? len - 1 - t : t) * inner;
    const float x = X[at];
    if (!exclusive) acc += x;
    Y[at] = acc;
    if (exclusive) acc += x;
  }
}

// Strided copy of up to 4 dims: the output [d0, d1, d2, d3] (d0 implied) reads src[base + sum c_i * s_i] with
// signed element strides (a Slice of several axes, negative steps included). block (BLOCK), grid ceil(n / BLOCK).
template <int BLOCK>
__global__ void strided_copy(const float* __restrict__ src, float* __restrict__ dst, int n, long long base, int d1,
                             int d2, int d3, int s0, int s1, int s2, int s3) {
  const size_t idx = (size_t)blockIdx.x * BLOCK + threadIdx.x;
  if (idx >= (size_t)n) return;
  long long rest = (long long)idx;
  const long long c3 = rest % d3;
  rest /= d3;
  const long long c2 = rest % d2;
  rest /= d2;
  const long long c1 = rest % d1;
  dst[idx] = src[base + (rest / d1) * s0 + c1 * s1 + c2 * s2 + c3 * s3];
}

// Where coordinate x of a padded axis reads from an input axis of length e: MODE 0 constant (-1: the pad value),
// 1 reflect, 2 edge, 3 wrap.
template <int MODE>
__device__ __forceinline__ long long pad_source(long long x, int e) {
  if (x >= 0 && x < e) return x;
  if (MODE == 0) return -1;
  if (MODE == 2) return x < 0 ? 0 : e - 1;
  if (MODE == 3) return ((x % e) + e) % e;
  if (e == 1) return 0;
  const long long period = 2LL * (e - 1);  // reflect without repeating the edge
  long long m = ((x % period) + period) % period;
  return m < e ? m : period - m;
}

// Pad of up to 4 dims: output [d0, d1, d2, d3] (d0 implied), input dims e0..e3 with element strides s0..s3,
// leading pads p0..p3 (negative: cropped). block (BLOCK), grid ceil(n / BLOCK).
template <int MODE, int BLOCK>
__global__ void pad_nd(const float* __restrict__ src, float* __restrict__ dst, int n, int d1, int d2, int d3, int e0,
                       int e1, int e2, int e3, int s0, int s1, int s2, int s3, int p0, int p1, int p2, int p3,
                       float value) {
  const size_t idx = (size_t)blockIdx.x * BLOCK + threadIdx.x;
  if (idx >= (size_t)n) return;
  long long rest = (long long)idx;
  const long long c3 = pad_source<MODE>(rest % d3 - p3, e3);
  rest /= d3;
  const long long c2 = pad_source<MODE>(rest % d2 - p2, e2);
  rest /= d2;
  const long long c1 = pad_source<MODE>(rest % d1 - p1, e1);
  const long long c0 = pad_source<MODE>(rest / d1 - p0, e0);
  if (c0 < 0 || c1 < 0 || c2 < 0 || c3 < 0) {
    dst[idx] = value;
    return;
  }
  dst[idx] = src[c0 * s0 + c1 * s1 + c2 * s2 + c3 * s3];
}
