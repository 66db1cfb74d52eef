// Refused: inline PTX reading the hardware block index, which is not the rTask's legacy block index.
__global__ void block_ids(int* out) {
  unsigned bid;
  asm volatile("mov.u32 %0, %%ctaid.x;" : "=r"(bid));  // REFUSED: asm
  if (threadIdx.x == 0) out[bid] = (int)bid;
}
