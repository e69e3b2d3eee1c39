// out[i] = f(src[layout(i)]), computed in {{C}} (float for half types); f is `{{expr}}` of `x`
// from the op table (its float literals are written C(...), so f32 kernels compute in float).
// info: n, base of the source layout.
typedef {{T}} T;
typedef {{C}} C;

extern "C" __global__ void kernel(const Info info, const {{T}}* __restrict__ src, {{T}}* __restrict__ out) {
    const u64 n = info.w[0];
    for (u64 i = thread_start(); i < n; i += grid_step()) {
        const C x = load(src[strided_offset(info, i, info.w[1])]);
        out[i] = store<T, C>({{expr}});
    }
}
