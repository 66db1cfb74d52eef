// A host function that says constexpr in its body and shares its name with a cooperative-groups call; a second
// kernel needs a header that is not here. Slicing for tile_max must keep neither.
#include <cooperative_groups.h>
#include <cooperative_groups/reduce.h>
#include "generated_by_cmake.h"
namespace cg = cooperative_groups;

__global__ void tile_max(float *out, const float *in) {
  auto tile = cg::tiled_partition<16>(cg::this_thread_block());
  float v = cg::reduce(tile, in[blockIdx.x * blockDim.x + threadIdx.x], cg::greater<float>());
  if (tile.thread_rank() == 0) out[(blockIdx.x * blockDim.x + threadIdx.x) / 16] = v;
}

__global__ void uses_generated(float *out) { out[0] = generated_constant(); }

void reduce(float *out, const float *in, int blocks) {
  constexpr int threads = 64;
  tile_max<<<blocks, threads>>>(out, in);
  uses_generated<<<1, 1>>>(out);
}
