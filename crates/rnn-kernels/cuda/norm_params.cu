// The weight and bias gradients of LayerNorm / RMSNorm: for each column c of the contiguous
// [rows, n] input, dw[c] = sum over rows of g * (x - mean) * rstd and db[c] = sum of g, one
// thread per column walking the rows (neighbouring threads read neighbouring elements).
// Computed in `C`. info: rows, n, x start, g start, mean start, rstd start, has mean.
// Without a mean (RMSNorm) `mean` is bound to rstd and not read.

typedef {{T}} T;
typedef {{C}} C;

extern "C" __global__ void kernel(const Info info, const T* __restrict__ x, const T* __restrict__ g,
                                  const C* __restrict__ mean, const C* __restrict__ rstd, T* __restrict__ dw,
                                  T* __restrict__ db) {
    const u64 rows = info.w[0], n = info.w[1];
    const bool has_mean = info.w[6] != 0;
    for (u64 c = thread_start(); c < n; c += grid_step()) {
        C sw = 0, sb = 0;
        for (u64 row = 0; row < rows; ++row) {
            const C gv = (C)load(g[info.w[3] + row * n + c]);
            const C m = has_mean ? mean[info.w[4] + row] : (C)0;
            sw += gv * (((C)load(x[info.w[2] + row * n + c]) - m) * rstd[info.w[5] + row]);
            sb += gv;
        }
        dw[c] = store<T, C>(sw);
        db[c] = store<T, C>(sb);
    }
}
