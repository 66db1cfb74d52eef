// Row softmax in the llm.c style: threads past the row (and whole blocks past the last row) return early,
// and the remaining threads of the block then meet at four barriers.
__global__ void softmax_early_return(float* out, const float* in, int rows, int cols) {
  __shared__ float vals[64];
  __shared__ float row_max, row_sum;
  const int row = blockIdx.x, t = threadIdx.x;
  if (row >= rows) return;
  if (t >= cols) return;
  const float v = in[row * cols + t];
  vals[t] = v;
  __syncthreads();
  if (t == 0) {
    float m = vals[0];
    for (int k = 1; k < cols; ++k) m = fmaxf(m, vals[k]);
    row_max = m;
  }
  __syncthreads();
  const float e = expf(v - row_max);
  vals[t] = e;
  __syncthreads();
  if (t == 0) {
    float s = 0.f;
    for (int k = 0; k < cols; ++k) s += vals[k];
    row_sum = s;
  }
  __syncthreads();
  out[row * cols + t] = e / row_sum;
}
