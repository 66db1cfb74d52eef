// Row sums with cooperative groups: thread_block, tiled_partition<32>, cg::reduce, block.sync().
#include <cooperative_groups.h>
#include <cooperative_groups/reduce.h>

namespace cg = cooperative_groups;

__global__ void cg_row_sum(const float* __restrict__ x, float* __restrict__ out, int cols) {
  cg::thread_block block = cg::this_thread_block();
  cg::thread_block_tile<32> warp = cg::tiled_partition<32>(block);
  __shared__ float warp_sums[32];
  float s = 0.f;
  for (int i = block.thread_rank(); i < cols; i += block.size()) s += x[blockIdx.x * cols + i];
  s = cg::reduce(warp, s, cg::plus<float>());
  if (warp.thread_rank() == 0) warp_sums[warp.meta_group_rank()] = s;
  block.sync();
  if (block.thread_rank() == 0) {
    float t = 0.f;
    for (int w = 0; w < (int)warp.meta_group_size(); ++w) t += warp_sums[w];
    out[blockIdx.x] = t;
  }
}
