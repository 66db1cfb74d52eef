// Refused: dynamic parallelism (a kernel launching a kernel).
__global__ void child(float* data, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) data[i] += 1.f;
}

__global__ void parent(float* data, int n) {
  if (threadIdx.x == 0 && blockIdx.x == 0) {
    child<<<(n + 63) / 64, 64>>>(data, n);  // REFUSED: child<<<|<<<
  }
}
