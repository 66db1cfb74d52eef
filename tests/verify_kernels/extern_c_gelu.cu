// GELU (tanh approximation) as an extern "C" kernel calling a helper in nested namespaces.
#include <cuda_runtime.h>

namespace ops {
namespace detail {
__device__ __forceinline__ float gelu_tanh(float x) {
  const float k0 = 0.7978845608f;
  const float k1 = 0.044715f;
  return 0.5f * x * (1.f + tanhf(k0 * (x + k1 * x * x * x)));
}
}  // namespace detail
}  // namespace ops

extern "C" __global__ void gelu_forward(float* out, const float* inp, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = ops::detail::gelu_tanh(inp[i]);
}
