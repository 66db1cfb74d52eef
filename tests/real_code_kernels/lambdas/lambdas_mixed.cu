// Lambdas the way kernels use them: capture-less ones reading builtins, [=] ones calling block barriers or
// writing shared memory, a mutable [=] one with its own barrier reduction, one reading a __shared__ array.
__global__ void lambdas_mixed(const int *in, int *out) {
  __shared__ int stage[64];
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  auto lane_bias = [](int v) { return v + (int)(threadIdx.x % 7); };
  auto put = [=](int v) { stage[threadIdx.x] = v; };
  auto odd_count = [=](int v) { return __syncthreads_count(v & 1); };
  auto counter = [=](int v) mutable { return __syncthreads_or(v > 40); };
  auto peek = [=](int k) { return stage[k]; };
  put(lane_bias(in[i]));
  __syncthreads();
  int a = peek((threadIdx.x + 3) % 64);
  a = a * 100 + odd_count(in[i]);
  a = a * 10 + counter(in[i]);
  a = a * 100 + __syncthreads_count(in[i] & 2);
  out[i] = a;
}
