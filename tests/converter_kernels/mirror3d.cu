// 3-D blocks and grid: each block stages its brick in a 3-D shared array and subtracts the value of the
// thread mirrored through the brick's centre (0 where the mirrored element lies outside the volume).
__global__ void mirror3d(float* out, const float* in, int W, int H, int D) {
  __shared__ float brick[2][4][4];
  const int x = blockIdx.x * blockDim.x + threadIdx.x;
  const int y = blockIdx.y * blockDim.y + threadIdx.y;
  const int z = blockIdx.z * blockDim.z + threadIdx.z;
  const bool inside = x < W && y < H && z < D;
  brick[threadIdx.z][threadIdx.y][threadIdx.x] = inside ? in[(z * H + y) * W + x] : 0.f;
  __syncthreads();
  const int mx = blockDim.x - 1 - threadIdx.x, my = blockDim.y - 1 - threadIdx.y, mz = blockDim.z - 1 - threadIdx.z;
  if (inside) out[(z * H + y) * W + x] = brick[threadIdx.z][threadIdx.y][threadIdx.x] - brick[mz][my][mx];
}
