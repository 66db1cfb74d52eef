// Refused: legacy texture references declared with their read modes (cudaReadModeElementType and friends must
// parse, so that the texture reads themselves are what is reported).
texture<float, 1, cudaReadModeElementType> weights;
texture<float, cudaTextureType2D, cudaReadModeNormalizedFloat> image;

__global__ void sample(float* out, const int* idx, int w, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const float a = tex1Dfetch(weights, idx[i]);  // REFUSED: tex1Dfetch
  out[i] = a * tex2D(image, i % w + 0.5f, i / w + 0.5f);  // REFUSED: tex2D
}
