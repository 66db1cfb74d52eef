// convtranspose.cu — legacy transposed convolution (float32, NC + up to 3 spatial dims, groups, dilations, pads):
// ONNX ConvTranspose as a gather, one thread per output element.
//
// X [N, C, ID, IH, IW], W [C, M/group, KD, KH, KW], B [M] (when HAS_BIAS), Y [N, M, OD, OH, OW]; 1-D and 2-D
// problems pass size-1 leading spatial dims. Output (od, oh, ow) receives x(id, ih, iw) * w(kd, kh, kw) wherever
// id*sd - pd + kd*dd == od (likewise h, w), pd/ph/pw being the leading pads.
// block (BLOCK), grid ceil(N*M*OD*OH*OW / BLOCK).

// The input index an output coordinate reads through tap k, or -1 when the stride does not land on one.
__device__ __forceinline__ int transposed_source(int o, int k, int stride, int pad, int dil, int in_len) {
  const int t = o + pad - k * dil;
  if (t < 0 || t % stride) return -1;
  const int i = t / stride;
  return i < in_len ? i : -1;
}

template <bool HAS_BIAS, int BLOCK>
__global__ void convtranspose_nd(const float* __restrict__ X, const float* __restrict__ Wt, const float* __restrict__ B,
                                 float* __restrict__ Y, int N, int C, int M, int group, int ID, int IH, int IW,
                                 int OD, int OH, int OW, int KD, int KH, int KW, int sd, int sh, int sw, int pd,
                                 int ph, int pw, int dd, int dh, int dw) {
  const size_t idx = (size_t)blockIdx.x * BLOCK + threadIdx.x;
  if (idx >= (size_t)N * M * OD * OH * OW) return;
  const int ow = idx % OW;
  const int oh = (idx / OW) % OH;
  const int od = (idx / ((size_t)OW * OH)) % OD;
  const int m = (idx / ((size_t)OW * OH * OD)) % M;
  const size_t n = idx / ((size_t)OW * OH * OD * M);
  const int m_per_group = M / group, c_per_group = C / group;
  const int g = m / m_per_group, mg = m % m_per_group;
  float acc = HAS_BIAS ? B[m] : 0.0f;
  for (int kd = 0; kd < KD; ++kd) {
    const int id = transposed_source(od, kd, sd, pd, dd, ID);
    if (id < 0) continue;
    for (int kh = 0; kh < KH; ++kh) {
      const int ih = transposed_source(oh, kh, sh, ph, dh, IH);
      if (ih < 0) continue;
      for (int kw = 0; kw < KW; ++kw) {
        const int iw = transposed_source(ow, kw, sw, pw, dw, IW);
        if (iw < 0) continue;
        for (int cc = 0; cc < c_per_group; ++cc) {
          const size_t c = (size_t)g * c_per_group + cc;
          const float x = X[(((n * C + c) * ID + id) * IH + ih) * IW + iw];
          const float w = Wt[(((c * m_per_group + mg) * KD + kd) * KH + kh) * KW + kw];
          acc += x * w;
        }
      }
    }
  }
  Y[idx] = acc;
}
