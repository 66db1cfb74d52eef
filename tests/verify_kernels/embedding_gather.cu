// Embedding lookup with int64 token ids; ids outside the vocabulary produce zero rows. 2-D blocks: x over the
// embedding dimension, y over tokens.
#include <stdint.h>

__global__ void embedding_gather(float* __restrict__ out, const int64_t* __restrict__ ids,
                                 const float* __restrict__ table, int n_ids, int dim, int vocab) {
  const int d = blockIdx.x * blockDim.x + threadIdx.x;
  const int t = blockIdx.y * blockDim.y + threadIdx.y;
  if (t >= n_ids || d >= dim) return;
  const int64_t id = ids[t];
  out[(size_t)t * dim + d] = (id >= 0 && id < vocab) ? table[id * dim + d] : 0.f;
}
