// LayerNorm (RMSNorm when {{rms}}) of each contiguous row of n elements, one block per row,
// computed in `C` (float for f32 and the half types, double for f64): the row's mean
// (0 for RMSNorm), the mean of the centered squares, then y = (x - mean) * rstd * w + b with
// rstd = 1 / sqrt(var + eps). Saves the mean (LayerNorm) and rstd of each row, as C.
// info: rows, n, x start, w start, b start, has w, has b, eps (the bits of a double).
// Without a weight or bias, `w` / `b` are bound to x and not read; RMSNorm does not write
// `mean_out`.


typedef {{T}} T;
typedef {{C}} C;

__device__ __forceinline__ float sqrt_c(float x) { return sqrtf(x); }
__device__ __forceinline__ double sqrt_c(double x) { return sqrt(x); }


extern "C" __global__ void kernel(const Info info, const T* __restrict__ x, const T* __restrict__ w,
                                  const T* __restrict__ b, T* __restrict__ out, C* __restrict__ mean_out,
                                  C* __restrict__ rstd_out) {
    __shared__ C part[BLOCK / 32];
    const u64 rows = info.w[0], n = info.w[1];
    const bool has_w = info.w[5] != 0, has_b = info.w[6] != 0;
    const C eps = (C)__longlong_as_double((long long)info.w[7]);
    for (u64 row = blockIdx.x; row < rows; row += gridDim.x) {
        const T* xs = x + info.w[2] + row * n;
        C mean = 0;
        if (!{{rms}}) {
            C s = 0;
            for (u64 k = threadIdx.x; k < n; k += blockDim.x) s += (C)load(xs[k]);
            mean = block_reduce(s, false, part) / (C)n;
        }
        C q = 0;
        for (u64 k = threadIdx.x; k < n; k += blockDim.x) {
            const C d = (C)load(xs[k]) - mean;
            q += d * d;
        }
        const C rstd = (C)1 / sqrt_c(block_reduce(q, false, part) / (C)n + eps);
        for (u64 k = threadIdx.x; k < n; k += blockDim.x) {
            C v = ((C)load(xs[k]) - mean) * rstd;
            if (has_w) v *= (C)load(w[info.w[3] + k]);
            if (has_b) v += (C)load(b[info.w[4] + k]);
            out[row * n + k] = store<T, C>(v);
        }
        if (threadIdx.x == 0) {
            if (!{{rms}}) mean_out[row] = mean;
            rstd_out[row] = rstd;
        }
    }
}
