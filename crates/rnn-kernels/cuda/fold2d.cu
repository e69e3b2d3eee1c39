// The adjoint of unfold2d, as a gather: out[plane, y, x] is the sum, in kernel-offset order,
// of the window elements cols[plane, i * kw + j, oh * wo + ow] that unfold2d took from
// (y, x), i.e. oh * sh + i * dh - ph = y and ow * sw + j * dw - pw = x. One thread per
// output element; no atomics, so the result is deterministic. Each add is the CPU's: in
// the stored type (half types through f32, rounded at each step; integers wrap), in the
// same order, so the result is the CPU's bit for bit.
// info: count, h, w, ho, wo, kh, kw, sh, sw, ph, pw, dh, dw, base of the cols layout.

typedef {{T}} T;

__device__ __forceinline__ u8 add(u8 a, u8 b) { return (u8)(a + b); }
__device__ __forceinline__ u32 add(u32 a, u32 b) { return a + b; }
__device__ __forceinline__ i64 add(i64 a, i64 b) { return (i64)((u64)a + (u64)b); }
__device__ __forceinline__ float add(float a, float b) { return a + b; }
__device__ __forceinline__ double add(double a, double b) { return a + b; }
#ifdef RNN_HALF
__device__ __forceinline__ __half add(__half a, __half b) { return __float2half(__half2float(a) + __half2float(b)); }
__device__ __forceinline__ __nv_bfloat16 add(__nv_bfloat16 a, __nv_bfloat16 b) {
    return __float2bfloat16(__bfloat162float(a) + __bfloat162float(b));
}
#endif

// The window position along one dim whose kernel offset `t` reads input index `y` (stride,
// padding, dilation at info.w[geo], info.w[geo + 2], info.w[geo + 4]; `count` positions),
// or `count` when there is none.
__device__ __forceinline__ u64 window_index(const Info& info, u64 y, u64 t, u64 count, u64 geo) {
    const u64 stride = info.w[geo];
    const u64 padded = y + info.w[geo + 2];
    const u64 reach = t * info.w[geo + 4];
    if (padded < reach || (padded - reach) % stride != 0) return count;
    const u64 o = (padded - reach) / stride;
    return o < count ? o : count;
}

extern "C" __global__ void kernel(const Info info, const T* __restrict__ cols, T* __restrict__ out) {
    const u64 count = info.w[0], h = info.w[1], w = info.w[2], ho = info.w[3], wo = info.w[4];
    const u64 kh = info.w[5], kw = info.w[6];
    for (u64 i = thread_start(); i < count; i += grid_step()) {
        const u64 x = i % w;
        const u64 y = (i / w) % h;
        const u64 plane = i / (h * w);
        const u64 first = plane * kh * kw * ho * wo;
        T sum = store<T, float>(0.0f);
        for (u64 ki = 0; ki < kh; ++ki) {
            const u64 oh = window_index(info, y, ki, ho, 7);
            if (oh == ho) continue;
            for (u64 kj = 0; kj < kw; ++kj) {
                const u64 ow = window_index(info, x, kj, wo, 8);
                if (ow == wo) continue;
                sum = add(sum, cols[strided_offset(info, first + ((ki * kw + kj) * ho + oh) * wo + ow, info.w[13])]);
            }
        }
        out[i] = sum;
    }
}
