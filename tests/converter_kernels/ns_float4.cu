// A kernel in nested namespaces reading rows through float4 loads; the pure float4 helper needs no rTask
// context and stays as it is.
namespace ops {
namespace detail {
__device__ __forceinline__ float dot4(float4 a, float4 b) { return a.x * b.x + a.y * b.y + a.z * b.z + a.w * b.w; }
}  // namespace detail

__global__ void rowdot_float4(float* __restrict__ out, const float* __restrict__ a, const float* __restrict__ b,
                              int rows, int cols) {
  const int r = blockIdx.x * blockDim.x + threadIdx.x;
  if (r >= rows) return;
  const float4* a4 = reinterpret_cast<const float4*>(a + r * cols);
  const float4* b4 = reinterpret_cast<const float4*>(b + r * cols);
  float s = 0.f;
  for (int k = 0; k < cols / 4; ++k) s += detail::dot4(a4[k], b4[k]);
  out[r] = s;
}
}  // namespace ops
