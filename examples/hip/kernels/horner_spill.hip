// Evaluates 96 polynomials of degree 8 at each point and keeps every result live until the end: more values
// than the 64 VGPRs a wave may hold when the kernel asks for 8 waves per SIMD (amdgpu_waves_per_eu), so the
// compiler spills VGPRs to scratch memory. The spilling kernel of the example: its lint shows VGPR spills and
// a scratch size.
#include <hip/hip_runtime.h>

#ifndef POLYS
#define POLYS 96
#endif
#define DEGREE 8

extern "C" __global__ void __launch_bounds__(256) __attribute__((amdgpu_waves_per_eu(8, 8)))
horner_spill(const float* __restrict__ coeffs, const float* __restrict__ x, float* __restrict__ out, int n) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    const float xi = x[i];
    float acc[POLYS];
#pragma unroll
    for (int p = 0; p < POLYS; ++p) {
        float v = 0.0f;
#pragma unroll
        for (int d = 0; d < DEGREE; ++d) v = v * xi + coeffs[p * DEGREE + d];
        acc[p] = v;
    }
    float total = 0.0f;
#pragma unroll
    for (int p = 0; p < POLYS; ++p) total += acc[p] * acc[(p * 37 + 11) % POLYS];
    out[i] = total;
}
