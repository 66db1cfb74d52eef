// Cooperative groups: the block as a group, 32-thread tiles, tile shuffles, cg::reduce, block.sync() and
// cg::sync(block). Per block: the sum (cg::reduce) and the sum of squares (shfl_down in a helper).
#include <cooperative_groups.h>
#include <cooperative_groups/reduce.h>

namespace cg = cooperative_groups;

__device__ float tile_sum(cg::thread_block_tile<32> tile, float v) {
  for (int o = tile.size() / 2; o > 0; o /= 2) v += tile.shfl_down(v, o);
  return v;  // the tile's sum, in its rank 0
}

__global__ void cg_block_sums(float* sums, float* sumsq, const float* x, int n) {
  __shared__ float part[2][32];
  cg::thread_block block = cg::this_thread_block();
  cg::thread_block_tile<32> tile = cg::tiled_partition<32>(block);
  const int i = blockIdx.x * block.size() + block.thread_rank();
  const float v = i < n ? x[i] : 0.f;
  const float s = cg::reduce(tile, v, cg::plus<float>());
  const float q = tile_sum(tile, v * v);
  if (tile.thread_rank() == 0) {
    part[0][tile.meta_group_rank()] = s;
    part[1][tile.meta_group_rank()] = q;
  }
  block.sync();
  if (block.thread_rank() == 0) {
    float a = 0.f, b = 0.f;
    for (int w = 0; w < (int)tile.meta_group_size(); ++w) {
      a += part[0][w];
      b += part[1][w];
    }
    part[0][0] = a;
    part[1][0] = b;
  }
  cg::sync(block);
  if (block.thread_rank() == 0) {
    sums[blockIdx.x] = part[0][0];
    sumsq[blockIdx.x] = part[1][0];
  }
}
