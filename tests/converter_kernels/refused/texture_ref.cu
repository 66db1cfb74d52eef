// Refused: a texture reference (removed in CUDA 12).
texture<float, 1> tex;

__global__ void gather_tex(float* out, const int* idx, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = tex1Dfetch(tex, idx[i]);  // REFUSED: tex1Dfetch|tex
}
