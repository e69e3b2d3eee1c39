// out[i] = cond[layout_c(i)] != 0 ? t[layout_t(i)] : f[layout_f(i)].
// info: n, bases of the cond, t and f layouts.
extern "C" __global__ void kernel(const Info info, const {{K}}* __restrict__ cond, const {{T}}* __restrict__ on_true,
                                  const {{T}}* __restrict__ on_false, {{T}}* __restrict__ out) {
    const u64 n = info.w[0];
    for (u64 i = thread_start(); i < n; i += grid_step()) {
        const bool c = cond[strided_offset(info, i, info.w[1])] != 0;
        out[i] = c ? on_true[strided_offset(info, i, info.w[2])] : on_false[strided_offset(info, i, info.w[3])];
    }
}
