// A tiled matrix transpose staged through LDS (the workgroup's shared memory): each 256-thread workgroup
// reads a TILE x TILE block with coalesced loads, writes it into LDS, and reads it back transposed. Two
// buffers of TILE x (TILE + 1) floats (the +1 column keeps the transposed reads off one LDS bank) make
// 2 * 64 * 65 * 4 = 33,280 bytes of LDS per workgroup: the LDS-heavy kernel of the example.
#include <hip/hip_runtime.h>

#ifndef TILE
#define TILE 64
#endif

extern "C" __global__ void __launch_bounds__(256)
transpose_lds(const float* __restrict__ in, float* __restrict__ out, int rows, int cols) {
    __shared__ float tile[2][TILE][TILE + 1];
    const int tx = threadIdx.x % TILE, ty = threadIdx.x / TILE;  // 64 x 4 threads
    const int c0 = blockIdx.x * TILE, r0 = blockIdx.y * TILE;
    for (int b = 0; b < 2; ++b) {
        for (int r = ty; r < TILE; r += 256 / TILE) {
            const int row = r0 + r, col = c0 + tx;
            tile[b][r][tx] = (row < rows && col < cols) ? in[(long long)row * cols + col] : 0.0f;
        }
    }
    __syncthreads();
    for (int r = ty; r < TILE; r += 256 / TILE) {
        const int row = c0 + r, col = r0 + tx;  // transposed block
        if (row < cols && col < rows) out[(long long)row * rows + col] = tile[0][tx][r] + 0.0f * tile[1][tx][r];
    }
}
