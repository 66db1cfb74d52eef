// 2-D blocks: matrix transpose through a padded shared tile (TILE x TILE+1 avoids bank conflicts).
#define TILE 8

__global__ void transpose_tile(float* out, const float* in, int rows, int cols) {
  __shared__ float tile[TILE][TILE + 1];
  const int x = blockIdx.x * TILE + threadIdx.x;  // column of `in`
  const int y = blockIdx.y * TILE + threadIdx.y;  // row of `in`
  if (x < cols && y < rows) tile[threadIdx.y][threadIdx.x] = in[y * cols + x];
  __syncthreads();
  const int ox = blockIdx.y * TILE + threadIdx.x;  // column of `out` (a row of `in`)
  const int oy = blockIdx.x * TILE + threadIdx.y;  // row of `out` (a column of `in`)
  if (ox < rows && oy < cols) out[oy * rows + ox] = tile[threadIdx.x][threadIdx.y];
}
