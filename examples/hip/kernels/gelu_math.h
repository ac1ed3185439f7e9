// The math of the GELU kernel, with nothing GPU-specific in it: the same function compiles for the device
// (gelu.hip) and reads line by line against the NumPy reference (reference.py).
#pragma once

#if defined(__HIPCC__)
#define GELU_HOST_DEVICE __host__ __device__
#else
#define GELU_HOST_DEVICE
#endif

GELU_HOST_DEVICE inline float gelu_forward(float x) {
    const float c = 0.7978845608028654f;  // sqrt(2 / pi)
    const float k = 0.044715f;
    return 0.5f * x * (1.0f + tanhf(c * (x + k * x * x * x)));
}
