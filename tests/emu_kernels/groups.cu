// Test kernels for the CPU emulator: cooperative groups (thread_block, tiled_partition, cg::reduce).
#include <cooperative_groups.h>
#include <cooperative_groups/reduce.h>
namespace cg = cooperative_groups;

// Block sum: each 32-thread tile reduces with cg::reduce, tile leaders combine through shared memory.
// The block may end in a partial tile.
__global__ void cg_block_sum(float* out, float* tile_max, const float* x, int n) {
  cg::thread_block block = cg::this_thread_block();
  cg::thread_block_tile<32> tile = cg::tiled_partition<32>(block);
  __shared__ float partial[32];
  unsigned i = block.group_index().x * block.size() + block.thread_rank();
  float v = i < (unsigned)n ? x[i] : 0.0f;
  float s = cg::reduce(tile, v, cg::plus<float>());
  float m = cg::reduce(tile, v, cg::greater<float>());
  if (tile.thread_rank() == 0) {
    partial[tile.meta_group_rank()] = s;
    tile_max[block.group_index().x * tile.meta_group_size() + tile.meta_group_rank()] = m;
  }
  block.sync();
  if (block.thread_rank() == 0) {
    float t = 0;
    for (unsigned w = 0; w < tile.meta_group_size(); ++w) t += partial[w];
    out[block.group_index().x] = t;
  }
}

// Tiles of 8 inside a 2-D block: shuffles, ballot, any/all, min-reduce, and the group's geometry.
__global__ void cg_tiles8(int* out, const int* x) {
  cg::thread_block block = cg::this_thread_block();
  auto t32 = cg::tiled_partition<32>(block);
  auto t8 = cg::tiled_partition<8>(t32);
  unsigned r = block.thread_rank(), nt = block.num_threads();
  int v = x[r];
  out[0 * nt + r] = t8.shfl(v, 3);
  out[1 * nt + r] = t8.shfl_down(v, 2);
  out[2 * nt + r] = t8.shfl_xor(v, 5);
  out[3 * nt + r] = (int)t8.ballot(v % 2);
  out[4 * nt + r] = t8.any(v > 90) * 2 + t8.all(v > 5);
  out[5 * nt + r] = cg::reduce(t8, v, cg::less<int>());
  out[6 * nt + r] = (int)(t8.meta_group_rank() * 100 + t8.thread_rank());
  out[7 * nt + r] = (int)(block.thread_index().x + 10 * block.thread_index().y + 1000 * block.group_dim().y);
  cg::sync(block);
}
