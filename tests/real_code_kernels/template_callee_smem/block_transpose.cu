// A driver-API style kernel file (written for this project): one device function template does the work with
// __shared__ tiles sized by its template parameters; extern "C" kernels pick the tile size and index type.
template <int TILE, typename index_t>
__device__ void transpose_tiles(float *out, const float *in, index_t rows, index_t cols) {
  __shared__ float tile[TILE][TILE + 1];
  index_t c = blockIdx.x * TILE + threadIdx.x, r = blockIdx.y * TILE + threadIdx.y;
  tile[threadIdx.y][threadIdx.x] = (r < rows && c < cols) ? in[r * cols + c] : 0.0f;
  __syncthreads();
  index_t oc = blockIdx.y * TILE + threadIdx.x, orow = blockIdx.x * TILE + threadIdx.y;
  if (orow < cols && oc < rows) out[orow * rows + oc] = tile[threadIdx.x][threadIdx.y];
}

extern "C" __global__ void transpose_8_int(float *out, const float *in, int rows, int cols) {
  transpose_tiles<8, int>(out, in, rows, cols);
}

extern "C" __global__ void transpose_16_long(float *out, const float *in, long rows, long cols) {
  transpose_tiles<16, long>(out, in, rows, cols);
}
