// GELU (tanh form) over a float32 vector, one element per thread: no shared memory (LDS), no scratch, few
// registers. The math lives in gelu_math.h; this file is only the launch geometry.
#include <hip/hip_runtime.h>

#include "gelu_math.h"

extern "C" __global__ void gelu(const float* __restrict__ x, float* __restrict__ out, int n) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = gelu_forward(x[i]);
}
