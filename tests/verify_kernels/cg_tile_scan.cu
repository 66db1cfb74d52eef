// Inclusive scan with 16-thread tiles (cooperative groups): tile.shfl_up within a tile, tile totals through
// shared memory after cg::sync(block), and a per-tile tile.any() flag.
#include <cooperative_groups.h>

namespace cg = cooperative_groups;

__global__ void cg_tile_scan(const int* __restrict__ in, int* __restrict__ out, int* __restrict__ tile_flags, int n) {
  cg::thread_block block = cg::this_thread_block();
  cg::thread_block_tile<16> tile = cg::tiled_partition<16>(block);
  __shared__ int tile_totals[64];
  const int gid = blockIdx.x * blockDim.x + block.thread_rank();
  int v = gid < n ? in[gid] : 0;
  for (int o = 1; o < 16; o <<= 1) {
    const int u = tile.shfl_up(v, o);
    if ((int)tile.thread_rank() >= o) v += u;
  }
  if (tile.thread_rank() == 15) tile_totals[tile.meta_group_rank()] = v;
  cg::sync(block);
  int offset = 0;
  for (int t = 0; t < (int)tile.meta_group_rank(); ++t) offset += tile_totals[t];
  if (gid < n) out[gid] = v + offset;
  const int negative = tile.any(v + offset < 0);
  if (tile.thread_rank() == 0) tile_flags[blockIdx.x * tile.meta_group_size() + tile.meta_group_rank()] = negative;
}
