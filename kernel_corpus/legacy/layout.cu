// layout.cu — legacy data-movement kernels (float32): Concat, Split/Slice and Transpose.

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
