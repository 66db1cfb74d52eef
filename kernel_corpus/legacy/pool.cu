// pool.cu — legacy windowed 2-D and 3-D pooling for ONNX MaxPool and AveragePool (float32, NCHW / NCDHW).
//
// X [NC, H, W] (N and C flattened), Y [NC, OH, OW]. Window tap (kh, kw) of output (oh, ow) reads
// ih = oh*sh - ph + kh*dh, iw = ow*sw - pw + kw*dw. ph/pw are the leading pads, ph_end/pw_end the trailing ones;
// a ceil_mode window may reach past the trailing pad, and those taps count for nothing.
// MODE 0: max over the taps inside the input. MODE 1: average over the taps inside the input
// (count_include_pad = 0). MODE 2: average over the taps inside the padded input (count_include_pad = 1).
// block (BLOCK), grid ceil(NC*OH*OW / BLOCK), one thread per output.
template <int MODE, int BLOCK>
__global__ void pool2d(const float* __restrict__ X, float* __restrict__ Y, int NC, int H, int W, int OH, int OW,
                       int KH, int KW, int sh, int sw, int ph, int pw, int ph_end, int pw_end, int dh, int dw) {
  const size_t idx = (size_t)blockIdx.x * BLOCK + threadIdx.x;
  if (idx >= (size_t)NC * OH * OW) return;
  const int ow = idx % OW;
  const int oh = (idx / OW) % OH;
  const size_t plane = idx / ((size_t)OW * OH);
  const float* x = X + plane * H * W;
  float acc = MODE == 0 ? -3.402823466e+38f : 0.0f;
  int count = 0;
  for (int kh = 0; kh < KH; ++kh) {
    const int ih = oh * sh - ph + kh * dh;
    const bool row_in = ih >= 0 && ih < H;
    const bool row_padded = ih >= -ph && ih < H + ph_end;
    for (int kw = 0; kw < KW; ++kw) {
      const int iw = ow * sw - pw + kw * dw;
      const bool in = row_in && iw >= 0 && iw < W;
      if (MODE == 2) count += (row_padded && iw >= -pw && iw < W + pw_end) ? 1 : 0;
      else count += in ? 1 : 0;
      if (!in) continue;
      const float v = x[(size_t)ih * W + iw];
      if (MODE == 0) acc = v > acc ? v : acc;
      else acc += v;
    }
  }
  Y[idx] = MODE == 0 ? acc : (count > 0 ? acc / count : 0.0f);
}

// 3-D pooling, the same rules over X [NC, D, H, W] -> Y [NC, OD, OH, OW], window (KD, KH, KW), strides, leading and
// trailing pads, dilations. block (BLOCK), grid ceil(NC*OD*OH*OW / BLOCK), one thread per output.
template <int MODE, int BLOCK>
__global__ void pool3d(const float* __restrict__ X, float* __restrict__ Y, int NC, int D, int H, int W, int OD,
                       int OH, int OW, int KD, int KH, int KW, int sd, int sh, int sw, int pd, int ph, int pw,
                       int pd_end, int ph_end, int pw_end, int dd, int dh, int dw) {
  const size_t idx = (size_t)blockIdx.x * BLOCK + threadIdx.x;
  if (idx >= (size_t)NC * OD * OH * OW) return;
  const int ow = idx % OW;
  const int oh = (idx / OW) % OH;
  const int od = (idx / ((size_t)OW * OH)) % OD;
  const size_t plane = idx / ((size_t)OW * OH * OD);
  const float* x = X + plane * D * H * W;
  float acc = MODE == 0 ? -3.402823466e+38f : 0.0f;
  int count = 0;
  for (int kd = 0; kd < KD; ++kd) {
    const int id = od * sd - pd + kd * dd;
    const bool d_in = id >= 0 && id < D, d_padded = id >= -pd && id < D + pd_end;
    for (int kh = 0; kh < KH; ++kh) {
      const int ih = oh * sh - ph + kh * dh;
      const bool h_in = d_in && ih >= 0 && ih < H, h_padded = d_padded && ih >= -ph && ih < H + ph_end;
      for (int kw = 0; kw < KW; ++kw) {
        const int iw = ow * sw - pw + kw * dw;
        const bool in = h_in && iw >= 0 && iw < W;
        if (MODE == 2) count += (h_padded && iw >= -pw && iw < W + pw_end) ? 1 : 0;
        else count += in ? 1 : 0;
        if (!in) continue;
        const float v = x[((size_t)id * H + ih) * W + iw];
        if (MODE == 0) acc = v > acc ? v : acc;
        else acc += v;
      }
    }
  }
  Y[idx] = MODE == 0 ? acc : (count > 0 ? acc / count : 0.0f);
}

// MaxPool with its Indices output: as pool2d MODE 0, also writing the flat index (into X [N*C, H, W]) of the
// maximum that was taken; column-major (storage_order 1) counts h fastest. The first maximum wins a tie.
// block (BLOCK), grid ceil(NC*OH*OW / BLOCK).
template <int BLOCK>
__global__ void maxpool2d_indices(const float* __restrict__ X, float* __restrict__ Y, long long* __restrict__ I,
                                  int NC, int H, int W, int OH, int OW, int KH, int KW, int sh, int sw, int ph,
                                  int pw, int dh, int dw, int column_major) {
  const size_t idx = (size_t)blockIdx.x * BLOCK + threadIdx.x;
  if (idx >= (size_t)NC * OH * OW) return;
  const int ow = idx % OW;
  const int oh = (idx / OW) % OH;
  const size_t plane = idx / ((size_t)OW * OH);
  const float* x = X + plane * H * W;
  float acc = -3.402823466e+38f;
  int best_h = 0, best_w = 0;
  bool found = false;
  for (int kh = 0; kh < KH; ++kh) {
    const int ih = oh * sh - ph + kh * dh;
    if (ih < 0 || ih >= H) continue;
    for (int kw = 0; kw < KW; ++kw) {
      const int iw = ow * sw - pw + kw * dw;
      if (iw < 0 || iw >= W) continue;
      const float v = x[(size_t)ih * W + iw];
      if (!found || v > acc) {
        acc = v;
        best_h = ih;
        best_w = iw;
        found = true;
      }
    }
  }
  Y[idx] = acc;
  I[idx] = (long long)plane * H * W + (column_major ? (long long)best_w * H + best_h : (long long)best_h * W + best_w);
}
