// Small CUDA kernels for the CUDA mutation operators' tests (tests/mutate/test_cuda_operators.py): each has
// the code an operator changes, and gpuemu.toml's artifact checks are what would let the lint alone kill a
// mutant (a required barrier, a required atomic).
#define WARP 32

__device__ float warp_sum(float v) {
    for (int offset = WARP / 2; offset > 0; offset >>= 1) v += __shfl_down_sync(0xffffffffu, v, offset);
    return v;
}

// The sum of x[0 .. n), into *out (zeroed by the caller): a grid-stride loop, a warp shuffle, one shared
// array and one barrier between the warps, one atomic per block.
extern "C" __global__ void block_sum(const float* __restrict__ x, float* __restrict__ out, int n) {
    __shared__ float partial[WARP];
    const int lane = threadIdx.x & (WARP - 1), warp = threadIdx.x / WARP;
    float acc = 0.0f;
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
        acc += x[i];
    }
    // lane is masked to 0..31: the guard is defensive, and both its bounds compile to the same code.
    if (lane < WARP) acc = warp_sum(acc);
    if (lane == 0) partial[warp] = acc;
    __syncthreads();
    if (warp == 0) {
        float total = lane < static_cast<int>(blockDim.x / WARP) ? partial[lane] : 0.0f;
        total = warp_sum(total);
        if (lane == 0) atomicAdd(out, total);
    }
}

// Counts of x's values in [0, bins) per bin; values outside are not counted.
extern "C" __global__ void histogram(const int* __restrict__ x, unsigned* __restrict__ counts, int n, int bins) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n && x[i] >= 0 && x[i] < bins) atomicAdd(&counts[x[i]], 1u);
}
