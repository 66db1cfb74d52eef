// elementwise.cu — legacy pointwise kernels (float32): binary ops with numpy broadcasting (Add, Sub, Mul, Div, Pow,
// PRelu, Max, Min; n-ary Sum/Mean/Max/Min by accumulation; Expand as a broadcast copy), Where, the unary ops (one
// line each in unary_op), Cast, BatchNormalization (inference) and the fused LSTM-cell pointwise step. One thread
// per element (or per 4).

// Binary operators: 0 Add, 1 Sub, 2 Mul, 3 Div, 4 Pow, 5 PRelu (b is the slope), 6 Max, 7 Min, 8 First (a).
// Max and Min return NaN when either operand is NaN, as ONNX does.
template <int OP>
__device__ __forceinline__ float binary_op(float a, float b) {
  if (OP == 0) return a + b;
  if (OP == 1) return a - b;
  if (OP == 2) return a * b;
  if (OP == 3) return a / b;
  if (OP == 4) return powf(a, b);
  if (OP == 5) return a < 0.0f ? a * b : a;
  if (OP == 6) return (a > b || a != a) ? a : b;
  if (OP == 7) return (a < b || a != a) ? a : b;
  return a;
}

__device__ __forceinline__ float sigmoid_act(float x) { return 1.0f / (1.0f + expf(-x)); }

// min(hi, max(lo, x)) that lets NaN through (hi wins when lo > hi, as ONNX's Clip says).
__device__ __forceinline__ float clip(float x, float lo, float hi) {
  const float t = x < lo ? lo : x;
  return t > hi ? hi : t;
}

__device__ __forceinline__ float clamp01(float t) { return clip(t, 0.0f, 1.0f); }

// Unary operators, one line each; `alpha` and `beta` are the op's float attributes where it has them:
// 0 Relu, 1 Sigmoid, 2 Tanh, 3 Gelu (erf form), 4 Gelu (tanh approximation), 5 LeakyRelu, 6 Erf, 7 Sqrt, 8 Exp,
// 9 Neg, 10 Abs, 11 Reciprocal, 12 Log, 13 Sin, 14 Cos, 15 HardSigmoid, 16 HardSwish, 17 Softplus, 18 Elu,
// 19 Clip (alpha = min, beta = max), 20 Scale (alpha * x), 21 Identity.
// Comparisons are written so that NaN passes through, as in ONNX.
template <int OP>
__device__ __forceinline__ float unary_op(float x, float alpha, float beta) {
  if (OP == 0) return x < 0.0f ? 0.0f : x;
  if (OP == 1) return sigmoid_act(x);
  if (OP == 2) return tanhf(x);
  if (OP == 3) return 0.5f * x * (1.0f + erff(x * 0.70710678118654752f));
  if (OP == 4) return 0.5f * x * (1.0f + tanhf(0.79788456080286536f * (x + 0.044715f * x * x * x)));
  if (OP == 5) return x < 0.0f ? alpha * x : x;
  if (OP == 6) return erff(x);
  if (OP == 7) return sqrtf(x);
  if (OP == 8) return expf(x);
  if (OP == 9) return -x;
  if (OP == 10) return fabsf(x);
  if (OP == 11) return 1.0f / x;
  if (OP == 12) return logf(x);
  if (OP == 13) return sinf(x);
  if (OP == 14) return cosf(x);
  if (OP == 15) return clamp01(alpha * x + beta);
  if (OP == 16) return x * clamp01(x * (1.0f / 6.0f) + 0.5f);
  if (OP == 17) return x > 20.0f ? x : log1pf(expf(x));
  if (OP == 18) return x < 0.0f ? alpha * (expf(x) - 1.0f) : x;
  if (OP == 19) return clip(x, alpha, beta);
  if (OP == 20) return alpha * x;
  return x;
}

// Same-shape binary op then a unary activation ACT (21: none), elements i0 .. i0+3: a float4 load/store when all
// three pointers are 16-byte aligned and the four elements exist, scalar otherwise.
template <int OP, int ACT>
__device__ __forceinline__ void binary_same_at(const float* __restrict__ A, const float* __restrict__ B,
                                               float* __restrict__ Y, int n, size_t i0) {
  if (i0 >= (size_t)n) return;
  const bool aligned = (((size_t)A | (size_t)B | (size_t)Y) & 15) == 0;
  if (aligned && i0 + 4 <= (size_t)n) {
    const float4 a = reinterpret_cast<const float4*>(A)[i0 / 4];
    const float4 b = reinterpret_cast<const float4*>(B)[i0 / 4];
    float4 y;
    y.x = unary_op<ACT>(binary_op<OP>(a.x, b.x), 0.0f, 0.0f);
    y.y = unary_op<ACT>(binary_op<OP>(a.y, b.y), 0.0f, 0.0f);
    y.z = unary_op<ACT>(binary_op<OP>(a.z, b.z), 0.0f, 0.0f);
    y.w = unary_op<ACT>(binary_op<OP>(a.w, b.w), 0.0f, 0.0f);
    reinterpret_cast<float4*>(Y)[i0 / 4] = y;
  } else {
    for (size_t i = i0; i < i0 + 4 && i < (size_t)n; ++i) Y[i] = unary_op<ACT>(binary_op<OP>(A[i], B[i]), 0.0f, 0.0f);
  }
}

// Same-shape binary op, four elements per thread. block (BLOCK), grid ceil(ceil(n/4) / BLOCK).
template <int OP, int BLOCK>
__global__ void binary_same(const float* __restrict__ A, const float* __restrict__ B, float* __restrict__ Y,
                            int n) {
  binary_same_at<OP, 21>(A, B, Y, n, ((size_t)blockIdx.x * BLOCK + threadIdx.x) * 4);
}

// binary_same with the activation ACT (a unary_op code) applied to each result: Add + Relu in one launch.
template <int OP, int ACT, int BLOCK>
__global__ void binary_same_act(const float* __restrict__ A, const float* __restrict__ B, float* __restrict__ Y,
                                int n) {
  binary_same_at<OP, ACT>(A, B, Y, n, ((size_t)blockIdx.x * BLOCK + threadIdx.x) * 4);
}

// Broadcasting binary op then the activation ACT (21: none) at output element idx of an output of up to 4 dims
// [d0, d1, d2, d3] (d0 = n / (d1*d2*d3)): each operand is read through its own element strides per output dim,
// 0 where it is broadcast.
// The coordinates of output element idx in [d0, d1, d2, d3] (d0 implied) and an operand's offset at them through its
// strides (0 where it broadcasts): the index arithmetic of the broadcasting kernels below.
__device__ __forceinline__ void bcast_coords(size_t idx, int d1, int d2, int d3, int (&c)[4]) {
  c[3] = idx % d3;
  c[2] = (idx / d3) % d2;
  c[1] = (idx / ((size_t)d3 * d2)) % d1;
  c[0] = idx / ((size_t)d3 * d2 * d1);
}
__device__ __forceinline__ size_t bcast_at(const int (&c)[4], int s0, int s1, int s2, int s3) {
  return (size_t)c[0] * s0 + (size_t)c[1] * s1 + (size_t)c[2] * s2 + (size_t)c[3] * s3;
}

template <int OP, int ACT>
__device__ __forceinline__ void binary_bcast_at(const float* __restrict__ A, const float* __restrict__ B,
                                                float* __restrict__ Y, int n, int d1, int d2, int d3, int sa0,
                                                int sa1, int sa2, int sa3, int sb0, int sb1, int sb2, int sb3,
                                                size_t idx) {
  if (idx >= (size_t)n) return;
  int c[4];
  bcast_coords(idx, d1, d2, d3, c);
  Y[idx] = unary_op<ACT>(binary_op<OP>(A[bcast_at(c, sa0, sa1, sa2, sa3)], B[bcast_at(c, sb0, sb1, sb2, sb3)]), 0.0f,
                         0.0f);
}

// Broadcasting binary op, one thread per output element. block (BLOCK), grid ceil(n / BLOCK).
template <int OP, int BLOCK>
__global__ void binary_bcast(const float* __restrict__ A, const float* __restrict__ B, float* __restrict__ Y, int n,
                             int d1, int d2, int d3, int sa0, int sa1, int sa2, int sa3, int sb0, int sb1, int sb2,
                             int sb3) {
  binary_bcast_at<OP, 21>(A, B, Y, n, d1, d2, d3, sa0, sa1, sa2, sa3, sb0, sb1, sb2, sb3,
                          (size_t)blockIdx.x * BLOCK + threadIdx.x);
}

// binary_bcast with the activation ACT (a unary_op code) applied to each result.
template <int OP, int ACT, int BLOCK>
__global__ void binary_bcast_act(const float* __restrict__ A, const float* __restrict__ B, float* __restrict__ Y,
                                 int n, int d1, int d2, int d3, int sa0, int sa1, int sa2, int sa3, int sb0, int sb1,
                                 int sb2, int sb3) {
  binary_bcast_at<OP, ACT>(A, B, Y, n, d1, d2, d3, sa0, sa1, sa2, sa3, sb0, sb1, sb2, sb3,
                           (size_t)blockIdx.x * BLOCK + threadIdx.x);
}

// Unary op, one thread per element. block (BLOCK), grid ceil(n / BLOCK).
template <int OP, int BLOCK>
__global__ void unary(const float* __restrict__ X, float* __restrict__ Y, int n, float alpha, float beta) {
  const size_t idx = (size_t)blockIdx.x * BLOCK + threadIdx.x;
  if (idx < (size_t)n) Y[idx] = unary_op<OP>(X[idx], alpha, beta);
}

// One more operand folded into Y in place, Y = op(Y, B) * scale (n-ary Sum/Mean/Max/Min: the first two operands
// go through binary_bcast, each further one through this; Mean passes 1/count with its last operand). B is read
// through its strides per output dim [d0, d1, d2, d3] (0 where broadcast). block (BLOCK), grid ceil(n / BLOCK).
template <int OP, int BLOCK>
__global__ void binary_accumulate(float* Y, const float* __restrict__ B, int n, int d1, int d2, int d3, int sb0,
                                  int sb1, int sb2, int sb3, float scale) {
  const size_t idx = (size_t)blockIdx.x * BLOCK + threadIdx.x;
  if (idx >= (size_t)n) return;
  int c[4];
  bcast_coords(idx, d1, d2, d3, c);
  Y[idx] = binary_op<OP>(Y[idx], B[bcast_at(c, sb0, sb1, sb2, sb3)]) * scale;
}

// Where: Y = C ? A : B with numpy broadcasting of all three over an output of up to 4 dims (strides as in
// binary_bcast; C is a bool tensor, A, B and Y of element type T). block (BLOCK), grid ceil(n / BLOCK).
template <typename T, int BLOCK>
__global__ void where_bcast(const bool* __restrict__ C, const T* __restrict__ A, const T* __restrict__ B,
                            T* __restrict__ Y, int n, int d1, int d2, int d3, int sc0, int sc1, int sc2, int sc3,
                            int sa0, int sa1, int sa2, int sa3, int sb0, int sb1, int sb2, int sb3) {
  const size_t idx = (size_t)blockIdx.x * BLOCK + threadIdx.x;
  if (idx >= (size_t)n) return;
  int c[4];
  bcast_coords(idx, d1, d2, d3, c);
  Y[idx] = C[bcast_at(c, sc0, sc1, sc2, sc3)] ? A[bcast_at(c, sa0, sa1, sa2, sa3)] : B[bcast_at(c, sb0, sb1, sb2, sb3)];
}

// Logical ops on bool tensors (ONNX And 0, Or 1, Xor 2) with numpy broadcasting over an output of up to 4 dims
// (strides as in binary_bcast). block (BLOCK), grid ceil(n / BLOCK).
template <int OP, int BLOCK>
__global__ void logic_bcast(const bool* __restrict__ A, const bool* __restrict__ B, bool* __restrict__ Y, int n,
                            int d1, int d2, int d3, int sa0, int sa1, int sa2, int sa3, int sb0, int sb1, int sb2,
                            int sb3) {
  const size_t idx = (size_t)blockIdx.x * BLOCK + threadIdx.x;
  if (idx >= (size_t)n) return;
  int c[4];
  bcast_coords(idx, d1, d2, d3, c);
  const bool a = A[bcast_at(c, sa0, sa1, sa2, sa3)], b = B[bcast_at(c, sb0, sb1, sb2, sb3)];
  Y[idx] = OP == 0 ? (a && b) : OP == 1 ? (a || b) : (a != b);
}

// Integer arithmetic with broadcasting on T = int or long long, binary_op's codes: Add 0, Sub 1, Mul 2 (wrapping
// as the hardware does). block (BLOCK), grid ceil(n / BLOCK).
template <typename T, int OP, int BLOCK>
__global__ void int_bcast(const T* __restrict__ A, const T* __restrict__ B, T* __restrict__ Y, int n, int d1, int d2,
                          int d3, int sa0, int sa1, int sa2, int sa3, int sb0, int sb1, int sb2, int sb3) {
  const size_t idx = (size_t)blockIdx.x * BLOCK + threadIdx.x;
  if (idx >= (size_t)n) return;
  int c[4];
  bcast_coords(idx, d1, d2, d3, c);
  const T a = A[bcast_at(c, sa0, sa1, sa2, sa3)], b = B[bcast_at(c, sb0, sb1, sb2, sb3)];
  Y[idx] = OP == 0 ? a + b : OP == 1 ? a - b : a * b;
}

// Comparisons with broadcasting into a bool tensor: Equal 0, Less 1, LessOrEqual 2, Greater 3, GreaterOrEqual 4.
// block (BLOCK), grid ceil(n / BLOCK).
template <typename T, int OP, int BLOCK>
__global__ void compare_bcast(const T* __restrict__ A, const T* __restrict__ B, bool* __restrict__ Y, int n, int d1,
                              int d2, int d3, int sa0, int sa1, int sa2, int sa3, int sb0, int sb1, int sb2, int sb3) {
  const size_t idx = (size_t)blockIdx.x * BLOCK + threadIdx.x;
  if (idx >= (size_t)n) return;
  int c[4];
  bcast_coords(idx, d1, d2, d3, c);
  const T a = A[bcast_at(c, sa0, sa1, sa2, sa3)], b = B[bcast_at(c, sb0, sb1, sb2, sb3)];
  Y[idx] = OP == 0 ? a == b : OP == 1 ? a < b : OP == 2 ? a <= b : OP == 3 ? a > b : a >= b;
}

// Not on a bool tensor, one thread per element. block (BLOCK), grid ceil(n / BLOCK).
template <int BLOCK>
__global__ void logic_not(const bool* __restrict__ X, bool* __restrict__ Y, int n) {
  const size_t idx = (size_t)blockIdx.x * BLOCK + threadIdx.x;
  if (idx < (size_t)n) Y[idx] = !X[idx];
}

// Classify floats into a bool tensor: IsNaN (OP 0); IsInf (OP 1), +inf when pos != 0, -inf when neg != 0.
// block (BLOCK), grid ceil(n / BLOCK).
template <int OP, int BLOCK>
__global__ void float_class(const float* __restrict__ X, bool* __restrict__ Y, int n, int pos, int neg) {
  const size_t idx = (size_t)blockIdx.x * BLOCK + threadIdx.x;
  if (idx >= (size_t)n) return;
  const float x = X[idx];
  Y[idx] = OP == 0 ? isnan(x) : (isinf(x) && ((x > 0.0f && pos != 0) || (x < 0.0f && neg != 0)));
}

// A broadcast copy of a tensor of any element type T (Expand of bool and integer tensors): X read through its
// strides per output dim [d0, d1, d2, d3] (0 where broadcast). block (BLOCK), grid ceil(n / BLOCK).
template <typename T, int BLOCK>
__global__ void bcast_copy(const T* __restrict__ X, T* __restrict__ Y, int n, int d1, int d2, int d3, int s0, int s1,
                           int s2, int s3) {
  const size_t idx = (size_t)blockIdx.x * BLOCK + threadIdx.x;
  if (idx >= (size_t)n) return;
  int c[4];
  bcast_coords(idx, d1, d2, d3, c);
  Y[idx] = X[bcast_at(c, s0, s1, s2, s3)];
}

// BatchNormalization, inference form, X [N, C, inner...]: y = (x - mean[c]) / sqrt(var[c] + eps) * scale[c] + bias[c].
// block (BLOCK), grid ceil(n / BLOCK).
template <int BLOCK>
__global__ void batchnorm_infer(const float* __restrict__ X, const float* __restrict__ scale,
                                const float* __restrict__ bias, const float* __restrict__ mean,
                                const float* __restrict__ var, float* __restrict__ Y, int n, int C, int inner,
                                float eps) {
  const size_t idx = (size_t)blockIdx.x * BLOCK + threadIdx.x;
  if (idx >= (size_t)n) return;
  const int c = (idx / inner) % C;
  Y[idx] = (X[idx] - mean[c]) * (scale[c] / sqrtf(var[c] + eps)) + bias[c];
}

// One LSTM step after the matrix products. gates [B, 4H] are pre-activations in ONNX order i, o, f, c (biases
// already added); c_prev [B, H]. c = sigmoid(f) * c_prev + sigmoid(i) * tanh(g), h = sigmoid(o) * tanh(c).
// block (BLOCK), grid ceil(B*H / BLOCK).
template <int BLOCK>
__global__ void lstm_cell_pointwise(const float* __restrict__ gates, const float* __restrict__ c_prev,
                                    float* __restrict__ h_out, float* __restrict__ c_out, int B, int H) {
  const size_t idx = (size_t)blockIdx.x * BLOCK + threadIdx.x;
  if (idx >= (size_t)B * H) return;
  const int b = idx / H, j = idx % H;
  const float* g = gates + (size_t)b * 4 * H;
  const float i_gate = sigmoid_act(g[j]);
  const float o_gate = sigmoid_act(g[H + j]);
  const float f_gate = sigmoid_act(g[2 * H + j]);
  const float cell = tanhf(g[3 * H + j]);
  const float c = f_gate * c_prev[idx] + i_gate * cell;
  c_out[idx] = c;
  h_out[idx] = o_gate * tanhf(c);
}

// Cast between element types, one thread per element (float to an integer truncates toward zero, to bool tests
// != 0, as ONNX's Cast does). block (BLOCK), grid ceil(n / BLOCK).
template <typename TIn, typename TOut, int BLOCK>
__global__ void cast_elements(const TIn* __restrict__ X, TOut* __restrict__ Y, int n) {
  const size_t idx = (size_t)blockIdx.x * BLOCK + threadIdx.x;
  if (idx < (size_t)n) Y[idx] = (TOut)X[idx];
}
