// Refused: a helper taking a generic cooperative_groups::thread_group has no rTask counterpart (only the block
// and its tiles do), so the kernel that calls it is refused at the parameter's type.
#include <cooperative_groups.h>
namespace cg = cooperative_groups;

__device__ void group_barrier(const cg::thread_group& g) {  // REFUSED: thread_group|cg::thread_group
  g.sync();
}

__global__ void uses_group(float* x, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) x[i] *= 2.f;
  group_barrier(cg::this_thread_block());
}
