// Barrier reductions: how many threads of the block see a large value, whether all are in range, any huge.
__global__ void block_votes(int* counts, int* alls, int* anys, const float* x, int n, float thr) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  const int c = __syncthreads_count(i < n && x[i] > thr);
  const int a = __syncthreads_and(i < n);
  const int o = __syncthreads_or(i < n && x[i] > 3.f * thr);
  if (threadIdx.x == 0) {
    counts[blockIdx.x] = c;
    alls[blockIdx.x] = a;
    anys[blockIdx.x] = o;
  }
}
