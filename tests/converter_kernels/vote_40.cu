// 40-thread blocks (a full warp and an 8-lane warp): ballot, any, all and a pairwise shuffle over the lanes
// that exist.
__global__ void vote_40(unsigned* ballots, int* anys, int* alls, int* pairs, const float* x, int n, float thr) {
  const int t = threadIdx.x, lane = t & 31, warp = t >> 5;
  const int i = blockIdx.x * blockDim.x + t;
  const int lanes = min(32, (int)blockDim.x - warp * 32);
  const unsigned mask = lanes == 32 ? 0xffffffffu : (1u << lanes) - 1u;
  const int pred = i < n && x[i] > thr;
  const unsigned b = __ballot_sync(mask, pred);
  const int any = __any_sync(mask, pred);
  const int all = __all_sync(mask, i < n);
  const int partner = __shfl_xor_sync(mask, pred, 1);  // lanes come in pairs: 40 = 32 + 8
  if (i < n) pairs[i] = pred + 2 * partner;
  if (lane == 0) {
    const int w = blockIdx.x * 2 + warp;
    ballots[w] = b;
    anys[w] = any;
    alls[w] = all;
  }
}
