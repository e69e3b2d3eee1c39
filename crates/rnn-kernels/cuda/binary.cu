// out[i] = f(lhs[layout_a(i)], rhs[layout_b(i)]) with both layouts broadcast to the output
// shape; `{{expr}}` of `a` and `b` from the op table (integer forms for integer dtypes).
// info: n, bases of the lhs and rhs layouts.
extern "C" __global__ void kernel(const Info info, const {{T}}* __restrict__ lhs, const {{T}}* __restrict__ rhs,
                                  {{T}}* __restrict__ out) {
    const u64 n = info.w[0];
    for (u64 i = thread_start(); i < n; i += grid_step()) {
        const {{C}} a = load(lhs[{{index_a}}(info, i, info.w[1])]);
        const {{C}} b = load(rhs[{{index_b}}(info, i, info.w[2])]);
        out[i] = store<{{T}}, {{C}}>({{expr}});
    }
}
