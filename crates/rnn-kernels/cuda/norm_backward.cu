// The input gradient of LayerNorm (RMSNorm when {{rms}}), one block per contiguous row of n
// elements: with gw = g * w and xhat = (x - mean) * rstd (mean = 0 for RMSNorm),
// dx = rstd * (gw - mean(gw) - xhat * mean(gw * xhat)), the mean(gw) term for LayerNorm only.
// Both sums come from one pass over the row; a second pass writes dx. Computed in `C`.
// info: rows, n, x start, g start, w start, has w, mean start, rstd start.
// Without a weight `w` is bound to x and not read; RMSNorm does not read `mean`.


typedef {{T}} T;
typedef {{C}} C;


extern "C" __global__ void kernel(const Info info, const T* __restrict__ x, const T* __restrict__ g,
                                  const T* __restrict__ w, const C* __restrict__ mean, const C* __restrict__ rstd,
                                  T* __restrict__ dx) {
    __shared__ C part[BLOCK / 32];
    const u64 rows = info.w[0], n = info.w[1];
    const bool has_w = info.w[5] != 0;
    for (u64 row = blockIdx.x; row < rows; row += gridDim.x) {
        const T* xs = x + info.w[2] + row * n;
        const T* gs = g + info.w[3] + row * n;
        const C m = {{rms}} ? (C)0 : mean[info.w[6] + row];
        const C r = rstd[info.w[7] + row];
        C sum_gw = 0, sum_gw_xhat = 0;
        for (u64 k = threadIdx.x; k < n; k += blockDim.x) {
            const C gw = (C)load(gs[k]) * (has_w ? (C)load(w[info.w[4] + k]) : (C)1);
            sum_gw += gw;
            sum_gw_xhat += gw * (((C)load(xs[k]) - m) * r);
        }
        const C shift = {{rms}} ? (C)0 : block_reduce(sum_gw, false, part) / (C)n;
        const C slope = block_reduce(sum_gw_xhat, false, part) / (C)n;
        for (u64 k = threadIdx.x; k < n; k += blockDim.x) {
            const C gw = (C)load(gs[k]) * (has_w ? (C)load(w[info.w[4] + k]) : (C)1);
            const C xhat = ((C)load(xs[k]) - m) * r;
            dx[row * n + k] = store<T, C>(r * (gw - shift - xhat * slope));
        }
    }
}
