// rnn.cu — legacy recurrent-cell kernels (float32): one whole LSTM step per launch (input and recurrent matrix
// products, biases and the pointwise cell), so an unrolled LSTM has one operator per cell on its critical path.

__device__ __forceinline__ float rnn_sigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }

// acc[bb] += sum over k = k0, k0 + SLICES, ... < K of v[(b0 + bb)*K + k] * W[k*ldw + n] for the first nb rows:
// a thread walks one weight column over its K-slice, reading each weight once for all BB batch rows.
template <int BB, int SLICES>
__device__ __forceinline__ void lstm_accumulate(float (&acc)[BB], const float* __restrict__ v,
                                                const float* __restrict__ W, int K, int ldw, int n, bool valid,
                                                int k0, int b0, int nb) {
#pragma unroll 4
  for (int k = k0; k < K; k += SLICES) {
    const float w = valid ? W[(size_t)k * ldw + n] : 0.0f;
#pragma unroll
    for (int bb = 0; bb < BB; ++bb)
      if (bb < nb) acc[bb] += v[(size_t)(b0 + bb) * K + k] * w;
  }
}

// One LSTM step for J hidden units and up to BB batch rows per block:
//   gates[b][g*H + j] = pre(b, g*H + j) + sum_k x[b][k] * Wt[k][g*H + j] + sum_k h[b][k] * Rt[k][g*H + j]
//   (g = 0..3 in ONNX order i, o, f, c);  c = sigmoid(f)*c_prev + sigmoid(i)*tanh(c gate),  h = sigmoid(o)*tanh(c).
// x [B, I], Wt [I, 4H], h [B, KH], Rt [KH, 4H], c_prev / h_out / c_out [B, H], all row-major.
// I == 0: no input term (x and Wt are not read); KH == 0 (else KH == H): no recurrent term (h and Rt not read).
// pre(b, n) = pre[b*pre_stride + n]: the bias [4H] (pre_stride 0) or a precomputed x·W + bias [B, 4H]
// (pre_stride 4H); pre_stride < 0: no such term (pre is not read).
// Thread t owns weight column (gate, unit) = ((t % 4J) / J, t % J) over the K-slice t / (4J): a warp reads whole
// J-float segments of one weight row, and the slices' partial sums meet in shared memory; then one thread per
// (row, unit) applies the cell. block (THREADS), grid (ceil(H/J), ceil(B/BB)).
template <int J, int BB, int THREADS>
__global__ void __launch_bounds__(THREADS)
lstm_cell_fused(const float* __restrict__ x, const float* __restrict__ Wt, const float* __restrict__ h,
                const float* __restrict__ Rt, const float* __restrict__ pre, const float* __restrict__ c_prev,
                float* __restrict__ h_out, float* __restrict__ c_out, int B, int H, int I, int KH,
                int pre_stride) {
  constexpr int COLS = 4 * J;
  constexpr int SLICES = THREADS / COLS;
  static_assert(THREADS % COLS == 0 && THREADS >= BB * J, "a block covers whole column sets and every cell");
  __shared__ float part[THREADS / (4 * J)][BB][4 * J];  // [SLICES][BB][COLS]
  const int tid = threadIdx.x;
  const int col = tid % COLS, slice = tid / COLS;
  const int j0 = blockIdx.x * J, b0 = blockIdx.y * BB;
  const int nb = B - b0 < BB ? B - b0 : BB;
  const int unit = j0 + col % J;
  const int n = (col / J) * H + unit;  // weight column of this thread
  const bool valid = unit < H;

  float acc[BB];
#pragma unroll
  for (int bb = 0; bb < BB; ++bb) acc[bb] = 0.0f;
  lstm_accumulate<BB, SLICES>(acc, x, Wt, I, 4 * H, n, valid, slice, b0, nb);
  lstm_accumulate<BB, SLICES>(acc, h, Rt, KH, 4 * H, n, valid, slice, b0, nb);
#pragma unroll
  for (int bb = 0; bb < BB; ++bb) part[slice][bb][col] = acc[bb];
  __syncthreads();

  for (int e = tid; e < BB * J; e += THREADS) {
    const int bb = e / J, jj = e % J;
    const int b = b0 + bb, j = j0 + jj;
    if (bb >= nb || j >= H) continue;
    float gate[4];
#pragma unroll
    for (int g = 0; g < 4; ++g) {
      float s = pre_stride >= 0 ? pre[(size_t)b * pre_stride + g * H + j] : 0.0f;
      for (int sl = 0; sl < SLICES; ++sl) s += part[sl][bb][g * J + jj];
      gate[g] = s;
    }
    const size_t idx = (size_t)b * H + j;
    const float c = rnn_sigmoid(gate[2]) * c_prev[idx] + rnn_sigmoid(gate[0]) * tanhf(gate[3]);
    c_out[idx] = c;
    h_out[idx] = rnn_sigmoid(gate[1]) * tanhf(c);
  }
}

// acc += sum over k = k0, k0 + SLICES, ... < K of v[k] * W[k*ldw + n .. n+3], four rows of 16-byte loads in flight.
template <int SLICES>
__device__ __forceinline__ void lstm_accumulate4(float4& acc, const float* __restrict__ v, const float* __restrict__ W,
                                                 int K, int ldw, int n, int k0) {
  int k = k0;
  for (; k + 3 * SLICES < K; k += 4 * SLICES) {
    float4 w[4];
    float s[4];
#pragma unroll
    for (int u = 0; u < 4; ++u) {
      w[u] = *reinterpret_cast<const float4*>(W + (size_t)(k + u * SLICES) * ldw + n);
      s[u] = v[k + u * SLICES];
    }
#pragma unroll
    for (int u = 0; u < 4; ++u) {
      acc.x += s[u] * w[u].x;
      acc.y += s[u] * w[u].y;
      acc.z += s[u] * w[u].z;
      acc.w += s[u] * w[u].w;
    }
  }
  for (; k < K; k += SLICES) {
    const float4 w = *reinterpret_cast<const float4*>(W + (size_t)k * ldw + n);
    acc.x += v[k] * w.x;
    acc.y += v[k] * w.y;
    acc.z += v[k] * w.z;
    acc.w += v[k] * w.w;
  }
}

// One LSTM step at batch 1 (the same operands and cell as lstm_cell_fused) with 16-byte weight loads: thread t owns
// the 4 weight columns g*H + j0 + 4*(q % (J/4)) .. +3, q = t % J, g = q / (J/4), over the K-slice t / J; the slices'
// float4 partial sums meet in shared memory. Needs H % 4 == 0 and 16-byte-aligned Wt and Rt.
// block (THREADS), grid ceil(H/J).
template <int J, int THREADS>
__global__ void __launch_bounds__(THREADS)
lstm_cell_vec4(const float* __restrict__ x, const float* __restrict__ Wt, const float* __restrict__ h,
               const float* __restrict__ Rt, const float* __restrict__ pre, const float* __restrict__ c_prev,
               float* __restrict__ h_out, float* __restrict__ c_out, int H, int I, int KH, int pre_stride) {
  constexpr int SLICES = THREADS / J;
  static_assert(J % 4 == 0 && THREADS % J == 0 && THREADS >= J, "whole quads per gate, whole slices");
  __shared__ float4 part[THREADS / J][J];  // [SLICES][quad]: quad q holds columns (q / (J/4), 4*(q % (J/4)) .. +3)
  const int tid = threadIdx.x, q = tid % J, slice = tid / J;
  const int j0 = blockIdx.x * J;
  const int unit = j0 + 4 * (q % (J / 4));
  const int n = (q / (J / 4)) * H + unit;
  float4 acc = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
  if (unit < H) {  // H % 4 == 0: a quad is whole or absent
    lstm_accumulate4<SLICES>(acc, x, Wt, I, 4 * H, n, slice);
    lstm_accumulate4<SLICES>(acc, h, Rt, KH, 4 * H, n, slice);
  }
  part[slice][q] = acc;
  __syncthreads();
  for (int jj = tid; jj < J; jj += THREADS) {
    const int j = j0 + jj;
    if (j >= H) continue;
    float gate[4];
#pragma unroll
    for (int g = 0; g < 4; ++g) {
      float s = pre_stride >= 0 ? pre[g * H + j] : 0.0f;
      const int qq = g * (J / 4) + jj / 4;
      for (int sl = 0; sl < SLICES; ++sl) {
        const float4 p = part[sl][qq];
        s += jj % 4 == 0 ? p.x : jj % 4 == 1 ? p.y : jj % 4 == 2 ? p.z : p.w;
      }
      gate[g] = s;
    }
    const float c = rnn_sigmoid(gate[2]) * c_prev[j] + rnn_sigmoid(gate[0]) * tanhf(gate[3]);
    c_out[j] = c;
    h_out[j] = rnn_sigmoid(gate[1]) * tanhf(c);
  }
}
