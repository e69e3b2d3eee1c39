// out[i] = f(lhs[layout_a(i)], rhs[layout_b(i)]) with both layouts broadcast to the output
// shape. Operands are loaded as C (float for the half types); `{{store}}` applies the op
// table's expression of `a` and `b` (integer forms for integer dtypes) and converts to T.
// info: n, bases of the lhs and rhs layouts.
typedef {{T}} T;
typedef {{C}} C;

extern "C" __global__ void kernel(const Info info, const {{T}}* __restrict__ lhs, const {{T}}* __restrict__ rhs,
                                  {{T}}* __restrict__ out) {
    const u64 n = info.w[0];
    for (u64 i = thread_start(); i < n; i += grid_step()) {
        const C a = load(lhs[strided_offset(info, i, info.w[1])]);
        const C b = load(rhs[strided_offset(info, i, info.w[2])]);
        out[i] = {{store}};
    }
}
