// Cooperative-groups calls inside helpers generic over the group type (cuda-samples reduction style): the
// conversion must reach cg::reduce / cg::sync in the helper's clone.
#include <cooperative_groups.h>
#include <cooperative_groups/reduce.h>
namespace cg = cooperative_groups;

template <class Group, class T> __device__ T group_sum(const Group &g, T v) {
  return cg::reduce(g, v, cg::plus<T>());
}

template <class Group> __device__ void group_barrier(Group &g) { cg::sync(g); }

__global__ void tile_sums(const float *in, float *out) {
  cg::thread_block cta = cg::this_thread_block();
  auto tile = cg::tiled_partition<16>(cta);
  __shared__ float partial[8];
  float s = group_sum(tile, in[blockIdx.x * blockDim.x + threadIdx.x]);
  if (tile.thread_rank() == 0) partial[tile.meta_group_rank()] = s;
  group_barrier(cta);
  if (threadIdx.x < 8) out[blockIdx.x * 8 + threadIdx.x] = partial[threadIdx.x] + partial[(threadIdx.x + 1) % 8];
}
