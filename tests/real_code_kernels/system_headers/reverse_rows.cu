// System C and C++ headers around a kernel whose cooperative-groups barrier sits in a template callee: the
// conversion must see (instantiate) the callee, so the barrier becomes the rTask's.
#include <stdlib.h>
#include <string.h>
#include <cstdlib>
#include <cstdio>
#include <vector>
#include <algorithm>
#include <cooperative_groups.h>
namespace cg = cooperative_groups;

template <int N, class G> __device__ void stage(G &g, float *s, const float *src) {
  s[g.thread_rank()] = src[g.thread_rank()];
  cg::sync(g);
}

template <int N> __global__ void reverse_rows(float *out, const float *in) {
  cg::thread_block cta = cg::this_thread_block();
  __shared__ float s[N];
  stage<N>(cta, s, in + blockIdx.x * N);
  out[blockIdx.x * N + threadIdx.x] = s[N - 1 - threadIdx.x];
}

int main() {
  std::vector<float> h(4 * 128);
  std::generate(h.begin(), h.end(), [] { return float(rand()) / RAND_MAX; });
  float *d = nullptr;
  reverse_rows<128><<<4, 128>>>(d, d);
  printf("%f\n", h[0]);
  return EXIT_SUCCESS;
}
