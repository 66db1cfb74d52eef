// An application file in the style of course and sample code (written for this project): the sizes are set in
// main, buffers come from cudaMalloc, kernels are launched directly, through a launcher function with dim3s and
// template arguments, and through cudaLaunchKernel.
#include <cstdio>
#include <cstdlib>
#include <cuda_runtime.h>

#define CEIL_DIV(a, b) (((a) + (b) - 1) / (b))
#define TILE 16
constexpr int kThreads = 256;

__global__ void saxpy(int n, float a, const float *x, float *y) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = a * x[i] + y[i];
}

template <int T>
__global__ void transpose_tile(const float *in, float *out, int rows, int cols) {
  __shared__ float tile[T][T + 1];
  int c = blockIdx.x * T + threadIdx.x, r = blockIdx.y * T + threadIdx.y;
  if (r < rows && c < cols) tile[threadIdx.y][threadIdx.x] = in[r * cols + c];
  __syncthreads();
  int oc = blockIdx.y * T + threadIdx.x, orow = blockIdx.x * T + threadIdx.y;
  if (orow < cols && oc < rows) out[orow * rows + oc] = tile[threadIdx.x][threadIdx.y];
}

__global__ void scale_rows(float *m, const float *s, int rows, int cols) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < rows * cols) m[i] *= s[i / cols];
}

void run_transpose(const float *d_in, float *d_out, int rows, int cols) {
  dim3 block(TILE, TILE);
  dim3 grid(CEIL_DIV(cols, TILE), CEIL_DIV(rows, TILE));
  transpose_tile<TILE><<<grid, block>>>(d_in, d_out, rows, cols);
}

int main(int argc, char **argv) {
  int N = 1 << 20;
  size_t bytes = N * sizeof(float);
  float *d_x, *d_y;
  cudaMalloc(&d_x, bytes);
  cudaMalloc((void **)&d_y, bytes);
  int blocks = (N + kThreads - 1) / kThreads;
  saxpy<<<blocks, kThreads>>>(N, 2.0f, d_x, d_y);

  const int rows = 300, cols = 200;
  float *d_in, *d_out, *d_s;
  cudaMalloc(&d_in, rows * cols * sizeof(float));
  cudaMalloc(&d_out, rows * cols * sizeof(float));
  cudaMalloc(&d_s, rows * sizeof(float));
  run_transpose(d_in, d_out, rows, cols);

  int r = rows, c = cols;
  void *args[] = {&d_out, &d_s, &r, &c};
  cudaLaunchKernel((const void *)scale_rows, dim3(CEIL_DIV(rows * cols, 128)), dim3(128), args, 0, 0);
  cudaDeviceSynchronize();
  printf("done\n");
  return 0;
}
