// cg scans over tiles of several sizes, element types and operators, as segmented prefix sums are written
// without CUB: the tile's inclusive and exclusive scans and a running maximum through a lambda. A block that the
// tile size does not divide (tiles of at most 32 threads) leaves a partial last tile, which scans its live ranks.
#include <cooperative_groups.h>
#include <cooperative_groups/scan.h>
namespace cg = cooperative_groups;

template <unsigned TileSize, class T>
__global__ void tile_scans(const T *in, T *inc, T *exc, T *run_max) {
  cg::thread_block_tile<TileSize> tile = cg::tiled_partition<TileSize>(cg::this_thread_block());
  const unsigned g = blockIdx.x * blockDim.x + threadIdx.x;
  const T v = in[g];
  inc[g] = cg::inclusive_scan(tile, v);
  exc[g] = cg::exclusive_scan(tile, v, cg::plus<T>());
  run_max[g] = cg::inclusive_scan(tile, v, [](T a, T b) { return a < b ? b : a; });
}
