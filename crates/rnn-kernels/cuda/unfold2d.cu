// out[plane, i * kw + j, oh * wo + ow] = x[plane, oh * sh + i * dh - ph, ow * sw + j * dw - pw],
// or the padding value where that position lies outside the h x w input; one thread per
// output element. `x` is read through its [N, C, H, W] layout.
// info: count, h, w, ho, wo, kh, kw, sh, sw, ph, pw, dh, dw, padding value (bits of the
// stored type, read by `{{pad}}`), base of the input layout.

typedef {{T}} T;

// The input index along one dim of window position `o`, kernel offset `t` (stride, padding,
// dilation at info.w[geo], info.w[geo + 2], info.w[geo + 4]), or `size` when it is in the
// padding.
__device__ __forceinline__ u64 source_index(const Info& info, u64 o, u64 t, u64 size, u64 geo) {
    const u64 padded = o * info.w[geo] + t * info.w[geo + 4];
    const u64 pad = info.w[geo + 2];
    if (padded < pad || padded - pad >= size) return size;
    return padded - pad;
}

extern "C" __global__ void kernel(const Info info, const T* __restrict__ x, T* __restrict__ out) {
    const u64 count = info.w[0], h = info.w[1], w = info.w[2], wo = info.w[4], kw = info.w[6];
    const u64 positions = info.w[3] * wo, taps = info.w[5] * kw;
    const T pad = {{pad}};
    for (u64 i = thread_start(); i < count; i += grid_step()) {
        const u64 pos = i % positions;
        const u64 tap = (i / positions) % taps;
        const u64 plane = i / (positions * taps);
        const u64 row = source_index(info, pos / wo, tap / kw, h, 7);
        const u64 col = source_index(info, pos % wo, tap % kw, w, 8);
        out[i] = row == h || col == w ? pad : x[strided_offset(info, (plane * h + row) * w + col, info.w[14])];
    }
}
