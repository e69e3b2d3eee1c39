// out[i] = lhs[layout_a(i)] {{op}} rhs[layout_b(i)] as a u8 0 / 1.
// info: n, bases of the lhs and rhs layouts.
extern "C" __global__ void kernel(const Info info, const {{T}}* __restrict__ lhs, const {{T}}* __restrict__ rhs,
                                  u8* __restrict__ out) {
    const u64 n = info.w[0];
    for (u64 i = thread_start(); i < n; i += grid_step()) {
        const {{C}} a = load(lhs[strided_offset(info, i, info.w[1])]);
        const {{C}} b = load(rhs[strided_offset(info, i, info.w[2])]);
        out[i] = (a {{op}} b) ? 1 : 0;
    }
}
