// out[layout_out(i)] = convert(src[layout_src(i)]) for i < n: strided copies, casts and the
// parts of `cat`. info: n, base of the source layout, base of the output layout.
extern "C" __global__ void kernel(const Info info, const {{T}}* __restrict__ src, {{O}}* __restrict__ out) {
    const u64 n = info.w[0];
    for (u64 i = thread_start(); i < n; i += grid_step()) {
        const {{T}} x = src[strided_offset(info, i, info.w[1])];
        out[strided_offset(info, i, info.w[2])] = {{convert}};
    }
}
