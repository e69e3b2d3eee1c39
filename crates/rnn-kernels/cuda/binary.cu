// out[i] = f(lhs[layout_a(i)], rhs[layout_b(i)]) with both layouts broadcast to the output
// shape. Operands are loaded as C (float for the half types); `{{store}}` applies the op
// table's expression of `a` and `b` (integer forms for integer dtypes) and converts to T.
// UNROLL elements per thread and trip, loaded before any is stored (see unary.cu).
// info: n, bases of the lhs and rhs layouts.
typedef {{T}} T;
typedef {{C}} C;

extern "C" __global__ void kernel(const Info info, const {{T}}* __restrict__ lhs, const {{T}}* __restrict__ rhs,
                                  {{T}}* __restrict__ out) {
    const u64 n = info.w[0], step = grid_step();
    for (u64 i0 = thread_start(); i0 < n; i0 += UNROLL * step) {
        C as[UNROLL] = {}, bs[UNROLL] = {};
#pragma unroll
        for (int u = 0; u < UNROLL; ++u) {
            const u64 i = i0 + u * step;
            if (i < n) {
                as[u] = load(lhs[strided_offset(info, i, info.w[1])]);
                bs[u] = load(rhs[strided_offset(info, i, info.w[2])]);
            }
        }
#pragma unroll
        for (int u = 0; u < UNROLL; ++u) {
            const u64 i = i0 + u * step;
            const C a = as[u], b = bs[u];
            if (i < n) out[i] = {{store}};
        }
    }
}
