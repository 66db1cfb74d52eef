// layout.cu — legacy data-movement kernels (float32 data, int64 indices): Concat, Split/Slice, Transpose, Gather,
// GatherElements, Tile, CumSum, Pad, strided N-d copies (Slice over several axes) and Resize of the last two axes.

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

// An index outside [-len, len): onnxruntime refuses the run ("indices element out of data bounds"), and so does the
// kernel instead of reading past X: the CPU emulator names the index, a GPU stops the launch (__trap).
__device__ __forceinline__ void gather_index_out_of_range(const char* op, long long k, int len) {
#if defined(RT_CPU_EMULATOR)
  emu::fail("%s: %s: index %lld is out of range [-%d, %d) (onnxruntime refuses it too)", emu::here(), op, k, len,
            len);
#else
  (void)op; (void)k; (void)len;
  __trap();
#endif
}

// Gather along one axis: X [outer, len, inner] of element type T, n_idx int64 indices (negative ones count from the
// end) -> Y [outer, n_idx, inner]. block (BLOCK), grid ceil(outer*n_idx*inner / BLOCK).
template <int BLOCK, typename T>
__global__ void gather_axis(const T* __restrict__ X, const long long* __restrict__ indices, T* __restrict__ Y,
                            int outer, int len, int n_idx, int inner) {
  const size_t idx = (size_t)blockIdx.x * BLOCK + threadIdx.x;
  if (idx >= (size_t)outer * n_idx * inner) return;
  const size_t i = idx % inner;
  const size_t j = (idx / inner) % n_idx;
  const size_t o = idx / ((size_t)inner * n_idx);
  long long k = indices[j];
  if (k < -len || k >= len) gather_index_out_of_range("Gather", k, len);
  if (k < 0) k += len;
  Y[idx] = X[(o * len + k) * inner + i];
}

// GatherElements: Y has the shape of the indices, up to 4 dims [d0, d1, d2, d3] (d0 implied); Y[c] = X at c with
// coordinate `axis` replaced by indices[c] (negative ones count from len). X (element type T) is read through its
// strides s0..s3. block (BLOCK), grid ceil(n / BLOCK).
template <int BLOCK, typename T>
__global__ void gather_elements(const T* __restrict__ X, const long long* __restrict__ indices,
                                T* __restrict__ Y, int n, int d1, int d2, int d3, int s0, int s1, int s2, int s3,
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
  if (k < -len || k >= len) gather_index_out_of_range("GatherElements", k, len);
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

// CumSum over the middle axis of X [outer, len, inner] (element type T), one thread per (outer, inner) pair;
// `exclusive` leaves each element out of its own sum, `reverse` sums from the end.
// block (BLOCK), grid ceil(outer*inner / BLOCK).
template <int BLOCK, typename T>
__global__ void cumsum_axis(const T* __restrict__ X, T* __restrict__ Y, int outer, int len, int inner,
                            int exclusive, int reverse) {
  const size_t idx = (size_t)blockIdx.x * BLOCK + threadIdx.x;
  if (idx >= (size_t)outer * inner) return;
  const size_t base = (idx / inner) * (size_t)len * inner + idx % inner;
  T acc = 0;
  for (int t = 0; t < len; ++t) {
    const size_t at = base + (size_t)(reverse ? len - 1 - t : t) * inner;
    const T x = X[at];
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

// ---- Resize ----------------------------------------------------------------------------------------------------
// Source coordinate of output index x along one axis, as ONNX's coordinate_transformation_mode says: COORD 0
// half_pixel, 1 asymmetric, 2 align_corners, 3 pytorch_half_pixel, 4 tf_crop_and_resize, 5 half_pixel_symmetric.
// `outside` is set when tf_crop_and_resize samples outside the input (the extrapolation value is used).
template <int COORD>
__device__ double resize_source(int x, int in_len, int out_len, double scale, double roi0, double roi1,
                                bool& outside) {
  const double out_width = scale * in_len;  // the unrounded output length (half_pixel_symmetric's adjustment)
  switch (COORD) {
    case 1: return x / scale;
    // align_corners and tf_crop_and_resize divide by length_resized - 1, the integer output length, as Resize's
    // text and onnxruntime do (ONNX's shipped data for two downsampling cases uses the fractional width instead)
    case 2: return out_len == 1 ? 0.0 : x * (in_len - 1.0) / (out_len - 1.0);
    case 3: return out_width == 1.0 ? -0.5 : (x + 0.5) / scale - 0.5;
    case 4: {
      const double at = (out_len == 1 ? (roi1 - roi0) * (in_len - 1.0) / 2.0
                                      : x * (roi1 - roi0) * (in_len - 1.0) / (out_len - 1.0)) +
                        roi0 * (in_len - 1.0);
      if (at < 0.0 || at > in_len - 1.0) outside = true;
      return at;
    }
    case 5: {
      const double offset = in_len / 2.0 * (1.0 - out_len / out_width);
      return offset + (x + 0.5) / scale - 0.5;
    }
    default: return (x + 0.5) / scale - 0.5;
  }
}

// floor of a double with integer arithmetic only (the parser's device stubs declare no double math).
__device__ __forceinline__ double floor_d(double v) {
  const double t = (double)(long long)v;
  return t > v ? t - 1.0 : t;
}

#define RESIZE_MAX_TAPS 16

// Taps of one axis: MODE 0 nearest (NEAREST 0 round_prefer_floor, 1 round_prefer_ceil, 2 floor, 3 ceil), 1 linear,
// 2 cubic (coefficient a). With `antialias` and a scale below 1, linear and cubic stretch their filter by 1/scale
// (more taps, normalised). exclude_outside drops the taps outside the input and renormalises; the other outside
// taps repeat the edge. Returns the tap count; idx/w receive the input indices and weights.
template <int MODE, int NEAREST>
__device__ int resize_taps(double src, int in_len, double scale, float a, int exclude_outside, int antialias,
                           int* idx, float* w) {
  const double lo = -floor_d(-src) - 1.0;       // ceil(src) - 1: the left neighbour (an integral src: ratio 1)
  const double r = src - lo;                    // in (0, 1]
  const int left = (int)lo;
  if (MODE == 0) {
    bool right;
    if (r == 1.0) right = true;
    else if (NEAREST == 0) right = r > 0.5;
    else if (NEAREST == 1) right = r >= 0.5;
    else right = NEAREST == 3;
    idx[0] = left + (right ? 1 : 0);
    idx[0] = idx[0] < 0 ? 0 : (idx[0] >= in_len ? in_len - 1 : idx[0]);
    w[0] = 1.0f;
    return 1;
  }
  const double s = antialias && scale < 1.0 ? scale : 1.0;  // the filter's stretch
  const double reach = MODE == 1 ? 1.0 : 2.0;               // support of the unstretched filter
  const int start = (int)floor_d(-reach / s) + 1;            // first tap, relative to the left neighbour
  int n = 2 - 2 * start;
  if (n > RESIZE_MAX_TAPS) n = RESIZE_MAX_TAPS;              // the binding refuses such scales
  const double A = a;
  float sum = 0.0f;
  for (int k = 0; k < n; ++k) {
    const double t = s * (start + k - r);
    const double x = t < 0.0 ? -t : t;
    double c;
    if (MODE == 1) c = x < 1.0 ? 1.0 - x : 0.0;
    else c = x <= 1.0 ? ((A + 2.0) * x - (A + 3.0)) * x * x + 1.0
                      : (x < 2.0 ? ((A * x - 5.0 * A) * x + 8.0 * A) * x - 4.0 * A : 0.0);
    idx[k] = left + start + k;
    w[k] = (float)c;
    if (exclude_outside && (idx[k] < 0 || idx[k] >= in_len)) w[k] = 0.0f;
    sum += w[k];
  }
  if (exclude_outside || s < 1.0)
    for (int k = 0; k < n; ++k) w[k] /= sum;
  for (int k = 0; k < n; ++k) idx[k] = idx[k] < 0 ? 0 : (idx[k] >= in_len ? in_len - 1 : idx[k]);
  return n;
}

// Resize of the two innermost axes: X [outer, ih, iw] -> Y [outer, oh, ow], one thread per output element; scales
// and roi in double, as ONNX computes source coordinates.
// block (BLOCK), grid ceil(outer*oh*ow / BLOCK).
template <int MODE, int COORD, int NEAREST, int BLOCK>
__global__ void resize_2d(const float* __restrict__ X, float* __restrict__ Y, int outer, int ih, int iw, int oh,
                          int ow, double scale_h, double scale_w, double roi_h0, double roi_h1, double roi_w0,
                          double roi_w1, float cubic_a, int exclude_outside, int antialias, float extrapolation) {
  const size_t idx = (size_t)blockIdx.x * BLOCK + threadIdx.x;
  if (idx >= (size_t)outer * oh * ow) return;
  const int x = idx % ow;
  const int y = (idx / ow) % oh;
  const size_t o = idx / ((size_t)ow * oh);
  bool outside = false;
  const double sy = resize_source<COORD>(y, ih, oh, scale_h, roi_h0, roi_h1, outside);
  const double sx = resize_source<COORD>(x, iw, ow, scale_w, roi_w0, roi_w1, outside);
  if (outside) {
    Y[idx] = extrapolation;
    return;
  }
  int iy[RESIZE_MAX_TAPS], ix[RESIZE_MAX_TAPS];
  float wy[RESIZE_MAX_TAPS], wx[RESIZE_MAX_TAPS];
  const int ny = resize_taps<MODE, NEAREST>(sy, ih, scale_h, cubic_a, exclude_outside, antialias, iy, wy);
  const int nx = resize_taps<MODE, NEAREST>(sx, iw, scale_w, cubic_a, exclude_outside, antialias, ix, wx);
  const float* plane = X + o * ih * iw;
  float acc = 0.0f;
  for (int a = 0; a < ny; ++a) {
    float row = 0.0f;
    for (int b = 0; b < nx; ++b) row += wx[b] * plane[(size_t)iy[a] * iw + ix[b]];
    acc += wy[a] * row;
  }
  Y[idx] = acc;
}
