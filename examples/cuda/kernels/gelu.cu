// GELU (tanh form) over a float32 vector, four elements per thread as bandwidth-bound kernels are written:
// thread t handles x[4t .. 4t+3]. The last group of a length that is not a multiple of 4 is partial.
// Built with -DDROP_TAIL=1 (examples/cuda/gpuemu-buggy.toml) it is the seeded bug: only whole groups of four
// are written, so the last N % 4 outputs are never stored.
#ifndef DROP_TAIL
#define DROP_TAIL 0
#endif

__device__ __forceinline__ float gelu(float x) {
    const float k = 0.7978845608028654f;  // sqrt(2 / pi)
    return 0.5f * x * (1.0f + tanhf(k * (x + 0.044715f * x * x * x)));
}

extern "C" __global__ void gelu_x4(const float* __restrict__ x, float* __restrict__ out, int n) {
    const long long first = 4LL * (blockIdx.x * (long long)blockDim.x + threadIdx.x);
    if (first + 3 < n) {
        for (int j = 0; j < 4; ++j) out[first + j] = gelu(x[first + j]);
    } else if (!DROP_TAIL) {
        for (long long i = first; i < n; ++i) out[i] = gelu(x[i]);
    }
}
