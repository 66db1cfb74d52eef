// Several __shared__ arrays in one declaration and a volatile __shared__ counter.
__global__ void shared_multi(float* out, int* positives, const float* x, const float* y, int n) {
  __shared__ float a[16], b[16];
  volatile __shared__ int seen;
  const int t = threadIdx.x, i = blockIdx.x * 16 + t;
  if (t == 0) seen = 0;
  a[t] = i < n ? x[i] : 0.f;
  b[t] = i < n ? y[i] : 0.f;
  __syncthreads();
  if (i < n && a[t] > 0.f) atomicAdd((int*)&seen, 1);
  __syncthreads();
  if (i < n) out[i] = a[15 - t] * b[t];
  if (t == 0) positives[blockIdx.x] = seen;
}
