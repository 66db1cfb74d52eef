// Refused: inline PTX synchronising a named barrier over a thread count (producer/consumer warps): the rTask's
// threads are not the block's, so the count and the barrier id mean other threads. (`bar.sync 0;` alone is the
// block's barrier and converts to the rTask's.)
__global__ void staged(float* out, const float* in) {
  __shared__ float buf[64];
  if (threadIdx.x < 64) buf[threadIdx.x] = in[threadIdx.x];
  asm volatile("bar.sync 1, 128;");  // REFUSED: asm
  out[threadIdx.x] = buf[threadIdx.x % 64];
}
