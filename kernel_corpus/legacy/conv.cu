// conv.cu — legacy 2-D convolution kernels for ONNX Conv (float32, NCHW).
//
// X [N, C, H, W], Wt [M, C/group, KH, KW], Bias [M] (read only when BIAS), Y [N, M, OH, OW].
// Input row of output row oh and kernel row kh: ih = oh*sh - ph + kh*dh (ph = leading pad); likewise for columns.
// Positions outside the input read as zero (the padding). With res (a run-time flag, the last argument of every
// kernel), Z [N, M, OH, OW] is added after the bias: a residual Add fused into the kernel (Z read at Y's index; X
// stands in when there is none, never read). With RELU, Y = max(0, conv + bias (+ Z)): a following Relu fused too.
// Split-K (conv_implicit_gemm with splits > 1): blockIdx.z = g * splits + s; the block sums the (c, kh, kw) of its
// split (SplitRange) and writes the raw sum to P[s][m][p] (m the output channel, p = (n, oh, ow));
// conv_splitk_reduce then adds the splits in order s = 0, 1, ... and applies bias and Relu.

// X[n, c, ih, iw], or 0 in the padding.
__device__ __forceinline__ float conv_input_at(const float* X, int n, int c, int ih, int iw, int C, int H, int W) {
  if (ih < 0 || ih >= H || iw < 0 || iw >= W) return 0.0f;
  return X[(((size_t)n * C + c) * H + ih) * W + iw];
}

// acc (+ Bias[m]) (+ Z[at] when res), then the optional Relu: the epilogue shared by every kernel of this file.
template <bool BIAS, bool RELU>
__device__ __forceinline__ float conv_epilogue(float acc, const float* Bias, int m, const float* Z, size_t at,
                                               int res) {
  if (BIAS) acc += Bias[m];
  if (res) acc += Z[at];
  return RELU && acc < 0.0f ? 0.0f : acc;  // not fmaxf: Relu keeps NaN, as ONNX does
}

// Direct convolution: one thread per output element, the whole C/group x KH x KW window in a loop.
// block (BLOCK), grid ceil(N*M*OH*OW / BLOCK).
template <int BLOCK, bool BIAS, bool RELU>
__global__ void conv_direct(const float* __restrict__ X, const float* __restrict__ Wt,
                            const float* __restrict__ Bias, float* __restrict__ Y, int N, int C, int H, int W,
                            int M, int OH, int OW, int KH, int KW, int sh, int sw, int ph, int pw, int dh, int dw,
                            int group, const float* __restrict__ Z, int res) {
  const size_t idx = (size_t)blockIdx.x * BLOCK + threadIdx.x;
  if (idx >= (size_t)N * M * OH * OW) return;
  const int ow = idx % OW;
  const int oh = (idx / OW) % OH;
  const int m = (idx / ((size_t)OW * OH)) % M;
  const int n = idx / ((size_t)OW * OH * M);
  const int cg = C / group;
  const int c0 = (m / (M / group)) * cg;
  const float* w = Wt + (size_t)m * cg * KH * KW;
  float acc = 0.0f;
  for (int c = 0; c < cg; ++c)
    for (int kh = 0; kh < KH; ++kh) {
      const int ih = oh * sh - ph + kh * dh;
      for (int kw = 0; kw < KW; ++kw)
        acc += conv_input_at(X, n, c0 + c, ih, ow * sw - pw + kw * dw, C, H, W) * w[(c * KH + kh) * KW + kw];
    }
  Y[idx] = conv_epilogue<BIAS, RELU>(acc, Bias, m, Z, idx, res);
}

// The r range [begin, end) of split s of `splits`: the ceil(R / step) steps of a kernel's r loop shared out as evenly
// as whole steps allow (split s starts at step floor(s * steps / splits)); splits 1 is the whole of R.
struct ConvSplitRange {
  int begin, end;
  __device__ ConvSplitRange(int s, int splits, int R, int step) {
    const int steps = (R + step - 1) / step;
    begin = s * steps / splits * step;
    const int last = (s + 1) * steps / splits * step;
    end = last < R ? last : R;
  }
};

// Implicit-GEMM convolution: per group g, Y_g[m][p] = sum_r W_g[m][r] * im2col(X)[r][p] with r = (c, kh, kw)
// and p = (n, oh, ow); the im2col tile is gathered on the fly into shared memory.
// block (TILE, TILE), grid (ceil(N*OH*OW / TILE), ceil((M/group) / TILE), group * splits); P [splits][M][N*OH*OW]
// (written when splits > 1).
template <int TILE, bool BIAS, bool RELU>
__global__ void conv_implicit_gemm(const float* __restrict__ X, const float* __restrict__ Wt,
                                   const float* __restrict__ Bias, float* __restrict__ Y, int N, int C, int H,
                                   int W, int M, int OH, int OW, int KH, int KW, int sh, int sw, int ph, int pw,
                                   int dh, int dw, int group, float* __restrict__ Part, int splits,
                                   const float* __restrict__ Z, int res) {
  __shared__ float Ws[TILE][TILE];
  __shared__ float Xs[TILE][TILE + 1];
  const int tx = threadIdx.x, ty = threadIdx.y;
  const int g = blockIdx.z / splits, s = blockIdx.z % splits;
  const int cg = C / group, mg = M / group;
  const int R = cg * KH * KW;
  const int P = N * OH * OW;
  const int m = blockIdx.y * TILE + ty;  // output channel within the group
  const int p = blockIdx.x * TILE + tx;  // output pixel (n, oh, ow)
  const int n = p / (OH * OW), oh = (p / OW) % OH, ow = p % OW;
  const ConvSplitRange rs(s, splits, R, TILE);
  float acc = 0.0f;
  for (int k0 = rs.begin; k0 < rs.end; k0 += TILE) {
    const int rw = k0 + tx;
    Ws[ty][tx] = (m < mg && rw < rs.end) ? Wt[(size_t)(g * mg + m) * R + rw] : 0.0f;
    const int rx = k0 + ty;
    float v = 0.0f;
    if (p < P && rx < rs.end) {
      const int c = rx / (KH * KW), kh = (rx / KW) % KH, kw = rx % KW;
      v = conv_input_at(X, n, g * cg + c, oh * sh - ph + kh * dh, ow * sw - pw + kw * dw, C, H, W);
    }
    Xs[ty][tx] = v;
    __syncthreads();
#pragma unroll
    for (int k = 0; k < TILE; ++k) acc += Ws[ty][k] * Xs[k][tx];
    __syncthreads();
  }
  if (m < mg && p < P) {
    const int mo = g * mg + m;
    if (splits > 1)
      Part[((size_t)s * M + mo) * P + p] = acc;
    else {
      const size_t at = (((size_t)n * M + mo) * OH + oh) * OW + ow;
      Y[at] = conv_epilogue<BIAS, RELU>(acc, Bias, mo, Z, at, res);
    }
  }
}

// Split-K fixup of conv_implicit_gemm: Y[n][m][pix] = epilogue(P[0][m][p] + P[1][m][p] + ...), p = n*OHW + pix,
// added in split order, then the epilogue (the residual added once, after the sum). block (BLOCK), grid
// ceil(N*M*OHW / BLOCK).
template <int BLOCK, bool BIAS, bool RELU>
__global__ void conv_splitk_reduce(const float* __restrict__ Part, const float* __restrict__ Bias,
                                   float* __restrict__ Y, int N, int M, int OHW, int splits,
                                   const float* __restrict__ Z, int res) {
  const int e = blockIdx.x * BLOCK + threadIdx.x, total = N * M * OHW;
  if (e >= total) return;
  const int pix = e % OHW, m = (e / OHW) % M, n = e / (OHW * M);
  const size_t q = (size_t)m * N * OHW + (size_t)n * OHW + pix;
  float v = Part[q];
  for (int s = 1; s < splits; ++s) v += Part[(size_t)s * total + q];
  Y[e] = conv_epilogue<BIAS, RELU>(v, Bias, m, Z, e, res);
}

// Depthwise convolution (group == C, M = C * multiplier): a TILE x TILE output tile of one (n, m) plane per block;
// the input patch it needs (with halo) and the KH x KW filter are staged in dynamic shared memory of
// (PH*PW + KH*KW) floats, PH = (TILE-1)*sh + (KH-1)*dh + 1, PW likewise.
// block (TILE, TILE), grid (ceil(OW/TILE), ceil(OH/TILE), N*M).
template <int TILE, bool BIAS, bool RELU>
__global__ void conv_depthwise_tiled(const float* __restrict__ X, const float* __restrict__ Wt,
                                     const float* __restrict__ Bias, float* __restrict__ Y, int N, int C, int H,
                                     int W, int M, int OH, int OW, int KH, int KW, int sh, int sw, int ph, int pw,
                                     int dh, int dw, const float* __restrict__ Z, int res) {
  extern __shared__ float smem[];
  const int PH = (TILE - 1) * sh + (KH - 1) * dh + 1;
  const int PW = (TILE - 1) * sw + (KW - 1) * dw + 1;
  float* patch = smem;
  float* filt = smem + PH * PW;
  const int tx = threadIdx.x, ty = threadIdx.y, tid = ty * TILE + tx;
  const int n = blockIdx.z / M, m = blockIdx.z % M;
  const int c = m / (M / C);
  const int oh0 = blockIdx.y * TILE, ow0 = blockIdx.x * TILE;
  const int ih0 = oh0 * sh - ph, iw0 = ow0 * sw - pw;
  for (int i = tid; i < PH * PW; i += TILE * TILE)
    patch[i] = conv_input_at(X, n, c, ih0 + i / PW, iw0 + i % PW, C, H, W);
  for (int i = tid; i < KH * KW; i += TILE * TILE) filt[i] = Wt[(size_t)m * KH * KW + i];
  __syncthreads();
  const int oh = oh0 + ty, ow = ow0 + tx;
  if (oh >= OH || ow >= OW) return;
  float acc = 0.0f;
  for (int kh = 0; kh < KH; ++kh)
    for (int kw = 0; kw < KW; ++kw) acc += patch[(ty * sh + kh * dh) * PW + tx * sw + kw * dw] * filt[kh * KW + kw];
  const size_t at = (((size_t)n * M + m) * OH + oh) * OW + ow;
  Y[at] = conv_epilogue<BIAS, RELU>(acc, Bias, m, Z, at, res);
}
