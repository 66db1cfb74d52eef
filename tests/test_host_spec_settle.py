"""`spec --from-host` when the launch's sizes are a launcher's parameters, read at run time (a reduction sample's
`reduce(size, threads, blocks, ...)` wrapper): each unknown name gets the default 1024, so the block has 1024
threads and the grid 1024 blocks. Scaling the grid down kept it a multiple of the block's largest side (1024), a
quarter of 1024 rounded to that stayed 1024, and the loop ended in "the sizes do not settle" (the skeleton's guess
replaced the host code's launch). Written for this test, in the style of such host code."""
import yaml

from rtransform.host_spec import spec_from_host

REDUCE = """
__global__ void reduce_sum(const float* in, float* out, unsigned int n) {
  extern __shared__ float part[];
  unsigned int t = threadIdx.x, i = blockIdx.x * blockDim.x + threadIdx.x;
  part[t] = i < n ? in[i] : 0.0f;
  __syncthreads();
  for (unsigned int s = blockDim.x / 2; s > 0; s >>= 1) {
    if (t < s) part[t] += part[t + s];
    __syncthreads();
  }
  if (t == 0) out[blockIdx.x] = part[0];
}

void launch_reduce(int size, int threads, int blocks, float* d_in, float* d_out) {
  dim3 block_dims(threads, 1, 1);
  dim3 grid_dims(blocks, 1, 1);
  int shmem = threads * sizeof(float);
  reduce_sum<<<grid_dims, block_dims, shmem>>>(d_in, d_out, size);
}
"""


def test_runtime_block_and_grid_settle() -> None:
    """The host code's launch gives the spec (not an error): the grid is scaled below 1024 blocks although
    1024 is a whole number of 1024-thread blocks, and the notes say which names were defaulted."""
    spec = spec_from_host(REDUCE, "reduce.cu", "reduce_sum")
    doc = yaml.safe_load(spec.yaml)
    assert doc["block"] == [1024, 1, 1]
    assert 1 <= doc["grid"][0] < 1024
    assert any(n.startswith("blocks:") for n in spec.notes)
    assert any(n.startswith("threads:") for n in spec.notes)


def test_already_small_sizes_are_left_alone() -> None:
    """A launch that fits needs no scaling: the sizes the host code gives stay as they are."""
    text = REDUCE + """
int main() {
  float *d_in, *d_out;
  cudaMalloc(&d_in, 4096 * sizeof(float));
  cudaMalloc(&d_out, 16 * sizeof(float));
  launch_reduce(4096, 256, 16, d_in, d_out);
  return 0;
}
"""
    doc = yaml.safe_load(spec_from_host(text, "reduce.cu", "reduce_sum").yaml)
    assert doc["grid"] == [16, 1, 1] and doc["block"] == [256, 1, 1]


SCATTER = """
__global__ void scale_node(const float* src, float* dst) {
  int tid = blockIdx.x * blockDim.x + threadIdx.x;
  dst[tid] = 2.0f * src[tid];
}

void run_on_node(float* host, int threads, int blocks) {
  int count = 65536;
  float *d_src, *d_dst;
  cudaMalloc((void**)&d_src, count * sizeof(float));
  cudaMalloc((void**)&d_dst, count * sizeof(float));
  scale_node<<<blocks, threads>>>(d_src, d_dst);
}
"""


def test_too_many_threads_shrink_the_grid_not_the_buffers() -> None:
    """Threads and blocks read at run time (1024 each by default) are too many threads for the emulator: the
    block count is what shrinks (and the grid is clipped), while the buffers, which every thread indexes, keep
    at least one element per thread of the launch."""
    doc = yaml.safe_load(spec_from_host(SCATTER, "node.cu", "scale_node").yaml)
    threads = doc["grid"][0] * doc["block"][0]
    assert threads <= 1 << 14
    assert all(a["size"] >= threads for a in doc["args"])


TEMPLATED = """
template <class T>
__global__ void block_sum(const T* in, T* out, unsigned int n) {
  extern __shared__ unsigned char raw[];
  T* part = reinterpret_cast<T*>(raw);
  unsigned int t = threadIdx.x, i = blockIdx.x * blockDim.x + threadIdx.x;
  part[t] = i < n ? in[i] : T(0);
  __syncthreads();
  if (t == 0) {
    T acc = 0;
    for (unsigned int k = 0; k < blockDim.x; ++k) acc += part[k];
    out[blockIdx.x] = acc;
  }
}

template <class T>
void sum_blocks(int n, int threads, int blocks, const T* d_in, T* d_out) {
  int shared_bytes = (threads <= 32) ? 2 * threads * sizeof(T) : threads * sizeof(T);
  block_sum<T><<<blocks, threads, shared_bytes>>>(d_in, d_out, n);
}
"""


def test_underived_dynamic_shared_memory_is_the_default_limit() -> None:
    """`sizeof(T)` of the launcher's own template parameter has no value here: the spec asks for 48 KiB of
    dynamic shared memory (what any launch without an opt-in may use), not 0, which every extern __shared__
    access would overrun."""
    spec = spec_from_host(TEMPLATED, "sum.cu", "block_sum")
    doc = yaml.safe_load(spec.yaml)
    assert doc["dynamic_smem"] == 48 * 1024
    assert any("dynamic shared memory" in n and "49152 here" in n for n in spec.notes)


# Arguments under a preprocessor conditional inside the launch, as a benchmark keeps its debug outputs: the
# directive lines were taken as parts of the arguments' text, the notes quoting them spanned lines, and the spec
# written was not YAML.
CONDITIONAL_ARGS = """
__global__ void encode(const unsigned* in, unsigned* dbg, unsigned* dbg_len, unsigned* out, unsigned n) {
  unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) { out[i] = in[i] * 3u; dbg[i] = in[i]; dbg_len[i] = 1u; }
}

int main() {
  unsigned n = 4096, *d_in, *d_out, *d_dbg, *d_dbg_len;
  cudaMalloc((void**)&d_in, n * sizeof(unsigned));
  cudaMalloc((void**)&d_out, n * sizeof(unsigned));
  encode<<<n / 256, 256>>>(d_in,
#ifdef TESTING
                           d_dbg, d_dbg_len,
#endif
                           d_out, n);
  return 0;
}
"""


def test_arguments_under_a_conditional_give_a_yaml_spec() -> None:
    """Every note is one comment line and the spec parses as YAML; the arguments are the kernel's, in order, and
    the sizes the host code gives are kept."""
    spec = spec_from_host(CONDITIONAL_ARGS, "encode.cu", "encode")
    doc = yaml.safe_load(spec.yaml)
    assert [a["name"] for a in doc["args"]] == ["in", "dbg", "dbg_len", "out", "n"]
    assert doc["block"] == [256, 1, 1]
    sizes = {a["name"]: a.get("size") for a in doc["args"]}
    assert sizes["in"] == sizes["out"] and sizes["in"] >= 256 * doc["grid"][0]
    assert all(line.startswith("#") or not line.startswith(" ") for line in spec.yaml.splitlines())
    assert not any("#ifdef" in n or "#endif" in n for n in spec.notes)
