// Tiles wider than a warp, written as cuda-samples' multi_warp_cg_reduce writes them: block_tile_memory scratch,
// cg::tiled_partition<TileSize> of several warps, cg::reduce through a helper generic over the group, scans, the
// tile's own barrier around a shared-memory exchange, and the broadcast shfl / any / all that CUDA offers there.
#include <cooperative_groups.h>
#include <cooperative_groups/reduce.h>
#include <cooperative_groups/scan.h>
namespace cg = cooperative_groups;

template <class Group, class T> __device__ T group_sum(const Group &g, T v) {
  return cg::reduce(g, v, cg::plus<T>());
}

struct keep_odd {  // a custom scan operator: the last odd key so far (associative, identity 0)
  __device__ int operator()(int a, int b) const { return (b & 1) ? b : a; }
};

template <unsigned BlockSize, unsigned TileSize>
__global__ void tile_stats(const float *in, const int *keys, float *sums, int *maxes, int *scans, int *flags,
                           float *rev) {
  __shared__ cg::block_tile_memory<BlockSize> scratch;
  __shared__ float stage[BlockSize];
  cg::thread_block cta = cg::this_thread_block(scratch);
  cg::thread_block_tile<TileSize> tile = cg::tiled_partition<TileSize>(cta);
  const unsigned g = blockIdx.x * BlockSize + threadIdx.x;
  const unsigned t = blockIdx.x * tile.meta_group_size() + tile.meta_group_rank();
  const float v = in[g];
  const int k = keys[g];

  float s = group_sum(tile, v);
  int m = cg::reduce(tile, k, cg::greater<int>());
  if (tile.thread_rank() == 0) {
    sums[t] = s;
    maxes[t] = m;
  }
  scans[2 * g] = cg::inclusive_scan(tile, k);
  scans[2 * g + 1] = cg::exclusive_scan(tile, k, keep_odd());

  // the tile's barrier orders a shared-memory exchange among its warps (racecheck would see a missing one)
  stage[threadIdx.x] = v;
  tile.sync();
  const unsigned base = threadIdx.x - tile.thread_rank();
  rev[g] = stage[base + tile.num_threads() - 1 - tile.thread_rank()];
  tile.sync();
  stage[threadIdx.x] = 2.0f * v;
  cg::sync(tile);
  rev[g] += stage[base + (tile.thread_rank() + 33) % TileSize];

  const int last = tile.shfl(k, TileSize - 1);
  flags[g] = last * 4 + tile.any(k > 97) * 2 + tile.all(k > 1);
}

template __global__ void tile_stats<256, 64>(const float *, const int *, float *, int *, int *, int *, float *);
