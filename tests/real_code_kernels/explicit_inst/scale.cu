// A kernel template launched by a host template that the file instantiates explicitly (cuda-samples style).
template <class T> __global__ void scale_by(T *out, const T *in, T s, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = in[i] * s;
}

template <class T> void run_scale(T *out, const T *in, T s, int n) {
  const int threads = 96;
  scale_by<T><<<(n + threads - 1) / threads, threads>>>(out, in, s, n);
}

template void run_scale<float>(float *out, const float *in, float s, int n);
template void run_scale<double>(double *, const double *, double, int);
