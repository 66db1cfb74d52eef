// rnn.cu — legacy recurrent-cell kernels (float32): one whole LSTM step per launch (input and recurrent matrix
// products, biases and the pointwise cell), so an unrolled LSTM has one operator per cell on its critical path.

__device__ __forceinline__ float rnn_sigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }

// The pointwise cell on gate pre-activations (ONNX order i, o, f, c) of element idx with previous state c_old: c and h.
__device__ __forceinline__ void lstm_cell_update(const float (&gate)[4], float c_old, float* __restrict__ h_out,
                                                 float* __restrict__ c_out, size_t idx) {
  const float c = rnn_sigmoid(gate[2]) * c_old + rnn_sigmoid(gate[0]) * tanhf(gate[3]);
  c_out[idx] = c;
  h_out[idx] = rnn_sigmoid(gate[1]) * tanhf(c);
}

// Stages one batch-1 step's vector v = [x (I floats) | h (KH floats)] in shared memory, each read once by consecutive
// threads (coalesced), so the unrolled dot products read v at shared-memory latency instead of waiting on a fresh L2
// line of x or h every few multiply-adds. The caller synchronises before reading vs.
__device__ __forceinline__ void lstm_stage_vector(float* vs, const float* __restrict__ x, const float* __restrict__ h,
                                                  int I, int KH) {
  for (int i = threadIdx.x; i < I; i += blockDim.x) vs[i] = x[i];
  for (int i = threadIdx.x; i < KH; i += blockDim.x) vs[I + i] = h[i];
}

// The cell's own operands of unit j at batch 1, loaded (by the threads that apply a cell) before the products so
// their latency hides behind them: pre[g*H + j] (when has_pre) and c_prev[j].
struct LstmCellInputs {
  float pre[4], c_old;
  __device__ LstmCellInputs(bool cell, const float* __restrict__ pre_row, bool has_pre, int H, int j,
                            const float* __restrict__ c_prev) {
#pragma unroll
    for (int g = 0; g < 4; ++g) pre[g] = cell && has_pre ? pre_row[g * H + j] : 0.0f;
    c_old = cell ? c_prev[j] : 0.0f;
  }
};

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
    lstm_cell_update(gate, c_prev[(size_t)b * H + j], h_out, c_out, (size_t)b * H + j);
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
// float4 partial sums meet in shared memory. x and h are staged in dynamic shared memory first (lstm_stage_vector:
// 4 * (I + KH) bytes) and the cell's pre and c_prev loads issued before the products. Needs H % 4 == 0 and
// 16-byte-aligned Wt and Rt. block (THREADS), grid ceil(H/J), J <= THREADS.
template <int J, int THREADS>
__global__ void __launch_bounds__(THREADS)
lstm_cell_vec4(const float* __restrict__ x, const float* __restrict__ Wt, const float* __restrict__ h,
               const float* __restrict__ Rt, const float* __restrict__ pre, const float* __restrict__ c_prev,
               float* __restrict__ h_out, float* __restrict__ c_out, int H, int I, int KH, int pre_stride) {
  constexpr int SLICES = THREADS / J;
  static_assert(J % 4 == 0 && THREADS % J == 0 && THREADS >= J, "whole quads per gate, whole slices");
  __shared__ float4 part[THREADS / J][J];  // [SLICES][quad]: quad q holds columns (q / (J/4), 4*(q % (J/4)) .. +3)
  extern __shared__ float lstm_v[];        // [I + KH]: x, then h
  const int tid = threadIdx.x, q = tid % J, slice = tid / J;
  const int j0 = blockIdx.x * J, j = j0 + tid;  // thread tid < J applies the cell of unit j
  const bool cell = tid < J && j < H;
  const LstmCellInputs in(cell, pre, pre_stride >= 0, H, j, c_prev);
  lstm_stage_vector(lstm_v, x, h, I, KH);
  __syncthreads();
  const int unit = j0 + 4 * (q % (J / 4));
  const int n = (q / (J / 4)) * H + unit;
  float4 acc = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
  if (unit < H) {  // H % 4 == 0: a quad is whole or absent
    lstm_accumulate4<SLICES>(acc, lstm_v, Wt, I, 4 * H, n, slice);
    lstm_accumulate4<SLICES>(acc, lstm_v + I, Rt, KH, 4 * H, n, slice);
  }
  part[slice][q] = acc;
  __syncthreads();
  if (cell) {
    const int jj = tid;
    float gate[4];
#pragma unroll
    for (int g = 0; g < 4; ++g) {
      float s = in.pre[g];
      const int qq = g * (J / 4) + jj / 4;
      for (int sl = 0; sl < SLICES; ++sl) {
        const float4 p = part[sl][qq];
        s += jj % 4 == 0 ? p.x : jj % 4 == 1 ? p.y : jj % 4 == 2 ? p.z : p.w;
      }
      gate[g] = s;
    }
    lstm_cell_update(gate, in.c_old, h_out, c_out, j);
  }
}

// ---- weight-stationary (resident) LSTM steps (docs/ARCHITECTURE.md §7) ----------------------------------------
// RT_RESIDENT(p): the copy of a resident operand's slice this rTask reads. Compiled as legacy CUDA it is p itself,
// so these kernels are ordinary CUDA reading global memory (and verify as such); in a converted rKernel
// (rtask_runtime.cuh, which defines RT_RUN_AS_KERNEL, comes first) it is the vEU's resident region when the vDevice
// pinned the rTask to a vEU holding that slice (__rt.resident set), else p again. A kernel the converter left as
// it was sees the file-scope __rt below (no task): p.
#ifndef RT_RESIDENT
#ifdef RT_RUN_AS_KERNEL
constexpr int __rt = 0;
template <class P>
__device__ __forceinline__ P rt_resident_of(const rt::Task& t, P p) {
  return t.resident ? reinterpret_cast<P>(t.resident) : p;
}
template <class P>
__device__ __forceinline__ P rt_resident_of(int, P p) { return p; }
#define RT_RESIDENT(p) rt_resident_of(__rt, (p))
#else
#define RT_RESIDENT(p) (p)
#endif
#endif

// Fills the resident region: rTask r copies float4s [r*n4, (r+1)*n4) of src into its vEU's region. Where there is
// no region (a legacy launch, the op-by-op executors, an rTask the scheduler could not pin) it does nothing: the
// readers then read src from global memory. block (any), grid (the readers' rTasks).
__global__ void resident_load(const float4* __restrict__ src, int n4) {
  float4* dst = RT_RESIDENT(static_cast<float4*>(nullptr));
  if (dst == nullptr) return;
  const float4* s = src + (size_t)blockIdx.x * n4;
  for (int i = threadIdx.x; i < n4; i += blockDim.x) dst[i] = s[i];
}

// acc += sum over k = k0, k0 + SLICES, ... < K of v[k] * w4[k*QUADS + q]: one 16-byte weight load per four FMAs,
// two independent accumulators.
template <int SLICES, int QUADS>
__device__ __forceinline__ void lstm_dot_packed(float4& acc, const float* __restrict__ v,
                                                const float4* __restrict__ w4, int K, int q, int k0) {
  float4 b = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
  int k = k0;
#pragma unroll 2
  for (; k + SLICES < K; k += 2 * SLICES) {
    const float s0 = v[k], s1 = v[k + SLICES];
    const float4 w0 = w4[(size_t)k * QUADS + q], w1 = w4[(size_t)(k + SLICES) * QUADS + q];
    acc.x += s0 * w0.x; acc.y += s0 * w0.y; acc.z += s0 * w0.z; acc.w += s0 * w0.w;
    b.x += s1 * w1.x; b.y += s1 * w1.y; b.z += s1 * w1.z; b.w += s1 * w1.w;
  }
  if (k < K) {
    const float s0 = v[k];
    const float4 w0 = w4[(size_t)k * QUADS + q];
    acc.x += s0 * w0.x; acc.y += s0 * w0.y; acc.z += s0 * w0.z; acc.w += s0 * w0.w;
  }
  acc.x += b.x; acc.y += b.y; acc.z += b.z; acc.w += b.w;
}

// One LSTM step at batch 1 with packed weights P [ceil(H/J)][rows + 1][4J]: rTask b's slice P[b] holds, at column
// g*J + jj (gate g in ONNX order i, o, f, c; unit b*J + jj, zero past H), row k < I: Wt[k][g*H + unit], row I + k
// (k < rows - I): Rt[k][...], row `rows`: the bias (zero when the step has none there). The slice is read through
// RT_RESIDENT, so a pinned rTask reads it from its vEU's shared memory and a step reads only x, h and pre from
// global memory. KH is 0 (no h term at this step) or rows - I; pre_rows != 0 adds pre [4H] (a precomputed x·W +
// bias row). Thread t owns the column quad t % J (16-byte loads) over the K-slice t / J; threads past whole slices
// only apply the cell. x and h are staged in dynamic shared memory first (lstm_stage_vector: 4 * (I + KH) bytes), and
// the cell's pre and c_prev loads are issued before the products.
// x [I], h [KH], c_prev / h_out / c_out [H]; P 16-byte aligned. block (THREADS), grid ceil(H/J).
template <int J, int THREADS>
__global__ void __launch_bounds__(THREADS)
lstm_cell_resident(const float* __restrict__ x, const float* __restrict__ h, const float* __restrict__ P,
                   const float* __restrict__ pre, const float* __restrict__ c_prev, float* __restrict__ h_out,
                   float* __restrict__ c_out, int H, int I, int KH, int rows, int pre_rows) {
  constexpr int SLICES = THREADS / J;  // thread t owns the column quad t % J (columns 4q .. 4q+3) of K-slice t / J
  static_assert(SLICES >= 1, "a block covers every column quad and every cell");
  __shared__ float4 part[THREADS / J][J];  // [SLICES][quad]: as floats, [SLICES][4J] by column
  extern __shared__ float lstm_v[];        // [I + KH]: x, then h
  const float4* w4 = reinterpret_cast<const float4*>(RT_RESIDENT(P + (size_t)blockIdx.x * (rows + 1) * 4 * J));
  const int tid = threadIdx.x, q = tid % J, slice = tid / J;
  const int j = blockIdx.x * J + tid;  // one thread per unit applies the cell
  const bool cell = tid < J && j < H;
  const LstmCellInputs in(cell, pre, pre_rows != 0, H, j, c_prev);
  lstm_stage_vector(lstm_v, x, h, I, KH);
  __syncthreads();
  if (slice < SLICES) {
    float4 acc = slice == 0 ? w4[(size_t)rows * J + q] : make_float4(0.0f, 0.0f, 0.0f, 0.0f);  // the bias row
    lstm_dot_packed<SLICES, J>(acc, lstm_v, w4, I, q, slice);
    lstm_dot_packed<SLICES, J>(acc, lstm_v + I, w4 + (size_t)I * J, KH, q, slice);
    part[slice][q] = acc;
  }
  __syncthreads();
  const float* sums = reinterpret_cast<const float*>(&part[0][0]);
  if (cell) {
    float gate[4];
#pragma unroll
    for (int g = 0; g < 4; ++g) {
      gate[g] = in.pre[g];
      for (int sl = 0; sl < SLICES; ++sl) gate[g] += sums[sl * 4 * J + g * J + tid];
    }
    lstm_cell_update(gate, in.c_old, h_out, c_out, j);
  }
}
