// The block-wide reduction of the row kernels (softmax, cross entropy, layer / RMS norm),
// placed before their templates by rnn-kernels' lib.rs.

#define FULL_MASK 0xffffffffu

// The max (which skips NaN, as the CPU's does: a NaN still reaches the row through its sum)
// or the sum of every thread's `v`, returned to all threads of the block. `part` holds one
// value per warp.
template <typename C> __device__ __forceinline__ C block_reduce(C v, bool is_max, C* part) {
    const u32 lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    for (int d = 16; d > 0; d >>= 1) {
        const C b = __shfl_down_sync(FULL_MASK, v, d);
        v = is_max ? (b > v ? b : v) : v + b;
    }
    if (lane == 0) part[warp] = v;
    __syncthreads();
    if (warp == 0) {
        v = lane < blockDim.x / 32 ? part[lane] : (is_max ? (C)__int_as_float(0xff800000) : (C)0);
        for (int d = 16; d > 0; d >>= 1) {
            const C b = __shfl_down_sync(FULL_MASK, v, d);
            v = is_max ? (b > v ? b : v) : v + b;
        }
        if (lane == 0) part[0] = v;
    }
    __syncthreads();
    const C total = part[0];
    __syncthreads();
    return total;
}
