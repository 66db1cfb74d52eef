// Two extern __shared__ arrays alias the same dynamic buffer: floats written through one view are read back
// as their bit patterns through the other.
__global__ void dyn_alias(float* out, int* bits, const float* x, int n) {
  extern __shared__ float fbuf[];
  extern __shared__ int ibuf[];
  const int t = threadIdx.x, nt = blockDim.x, i = blockIdx.x * nt + t;
  fbuf[t] = i < n ? x[i] : 0.f;
  ibuf[nt + t] = i < n ? 3 * i : -1;  // second half of the buffer, through the int view
  __syncthreads();
  const int j = nt - 1 - t;           // mirrored thread of the block
  if (i < n) {
    out[i] = fbuf[j] + (float)ibuf[nt + j];
    bits[i] = ibuf[j];                // the float fbuf[j], read as an int
  }
}
