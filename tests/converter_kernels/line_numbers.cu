// #line fidelity: every slot of `lines` receives the __LINE__ of one statement, read in the kernel, in a
// cloned helper, and in functions defined right after a clone and right after the kernel (where the converter
// resumes the original text after generated code). __launch_bounds__ sits alone on its line.
__device__ int after_kernel();

__device__ int lane_line(int fallback) {
  return threadIdx.x == 0 ? __LINE__ : fallback;
}
__device__ int after_clone() { return __LINE__; }

extern "C" __global__ void __launch_bounds__(64)
line_numbers(int* lines) {
  if (blockIdx.x != 0 || threadIdx.x != 0) return;
  lines[0] = __LINE__;
  lines[1] = lane_line(-1);
  lines[2] = after_clone();
  lines[3] = after_kernel();
}
__device__ int after_kernel() {
  return __LINE__;
}
