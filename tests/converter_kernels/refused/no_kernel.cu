// No __global__ function at all: only device helpers and host code.
__device__ float square(float v) { return v * v; }

float host_square(float v) { return v * v; }
