// out[i] = f(src[layout(i)]), computed in {{C}} (float for half types); f is `{{expr}}` of `x`
// from the op table (its float literals are written C(...), so f32 kernels compute in float).
// Each thread takes UNROLL elements a grid stride apart per trip, all loaded before any is
// stored, so that enough bytes are in flight to keep memory busy (the host launches a grid
// of n / UNROLL threads).
// info: n, base of the source layout.
typedef {{T}} T;
typedef {{C}} C;

extern "C" __global__ void kernel(const Info info, const {{T}}* __restrict__ src, {{T}}* __restrict__ out) {
    const u64 n = info.w[0], step = grid_step();
    for (u64 i0 = thread_start(); i0 < n; i0 += UNROLL * step) {
        C xs[UNROLL] = {};
#pragma unroll
        for (int u = 0; u < UNROLL; ++u) {
            const u64 i = i0 + u * step;
            if (i < n) xs[u] = load(src[strided_offset(info, i, info.w[1])]);
        }
#pragma unroll
        for (int u = 0; u < UNROLL; ++u) {
            const u64 i = i0 + u * step;
            const C x = xs[u];
            if (i < n) out[i] = store<T, C>({{expr}});
        }
    }
}
