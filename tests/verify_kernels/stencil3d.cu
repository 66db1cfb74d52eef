// 7-point 3-D stencil with 3-D thread blocks; each block stages its tile plus a one-cell halo in shared memory.
#include <cuda_runtime.h>

#define BX 8
#define BY 4
#define BZ 2

__global__ void stencil7(const float* __restrict__ in, float* __restrict__ out, int nx, int ny, int nz, float c0,
                         float c1) {
  __shared__ float s[BZ + 2][BY + 2][BX + 2];
  const int x = blockIdx.x * BX + threadIdx.x;
  const int y = blockIdx.y * BY + threadIdx.y;
  const int z = blockIdx.z * BZ + threadIdx.z;
  const int nthreads = blockDim.x * blockDim.y * blockDim.z;
  const int t = threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
  for (int i = t; i < (BX + 2) * (BY + 2) * (BZ + 2); i += nthreads) {
    const int lx = i % (BX + 2), ly = (i / (BX + 2)) % (BY + 2), lz = i / ((BX + 2) * (BY + 2));
    const int gx = blockIdx.x * BX + lx - 1, gy = blockIdx.y * BY + ly - 1, gz = blockIdx.z * BZ + lz - 1;
    const bool inside = gx >= 0 && gx < nx && gy >= 0 && gy < ny && gz >= 0 && gz < nz;
    s[lz][ly][lx] = inside ? in[(gz * ny + gy) * nx + gx] : 0.f;
  }
  __syncthreads();
  if (x >= nx || y >= ny || z >= nz) return;
  const int lx = threadIdx.x + 1, ly = threadIdx.y + 1, lz = threadIdx.z + 1;
  out[(z * ny + y) * nx + x] = c0 * s[lz][ly][lx] + c1 * (s[lz][ly][lx - 1] + s[lz][ly][lx + 1] + s[lz][ly - 1][lx] +
                                                        s[lz][ly + 1][lx] + s[lz - 1][ly][lx] + s[lz + 1][ly][lx]);
}
