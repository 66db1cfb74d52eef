// Refused: grid-wide synchronisation needs every block resident at once, which rTasks do not guarantee.
#include <cooperative_groups.h>
namespace cg = cooperative_groups;

__global__ void two_phase(float* data, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) data[i] *= 2.f;
  cg::this_grid().sync();  // REFUSED: cg::this_grid|this_grid
  if (i < n && i + 1 < n) data[i] += data[i + 1];
}
