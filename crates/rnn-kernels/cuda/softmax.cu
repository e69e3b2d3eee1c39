// Softmax (or log-softmax when `log`) of each row of n elements, one block per row: the
// row's max, the sum of exp(x - max), then the outputs (see ROW_CACHE below), computed in
// `C` (float for f32 and the half types, as the CPU computes them, double for f64). Element
// k of row `row` is x[rows(row) + k * stride], with `rows` the layout of the other dims; the
// output is contiguous.
// info: rows, n, stride of the last dim, base of the rows layout.


typedef {{T}} T;
typedef {{C}} C;

// -inf, the max of an empty part.
__device__ __forceinline__ C neg_inf() { return (C)__int_as_float(0xff800000); }

__device__ __forceinline__ float exp_c(float x) { return expf(x); }
__device__ __forceinline__ double exp_c(double x) { return exp(x); }
__device__ __forceinline__ float log_c(float x) { return logf(x); }
__device__ __forceinline__ double log_c(double x) { return log(x); }


// Rows of up to ROW_CACHE * blockDim.x elements are read once, into registers (each thread
// keeps its elements k = threadIdx.x + u * blockDim.x); longer rows are read three times.
// Both forms compute the same values in the same order.
#define ROW_CACHE 8

// The outputs of a row held in `v` (-inf past its end), its max found and written.
__device__ __forceinline__ void cached_row(const C (&v)[ROW_CACHE], C m, u64 n, T* __restrict__ out, C* part) {
    C e[ROW_CACHE];
    C s = 0;
#pragma unroll
    for (int u = 0; u < ROW_CACHE; ++u) {
        const u64 k = threadIdx.x + (u64)u * blockDim.x;
        e[u] = k < n ? v[u] - m : (C)0;
        if (k < n) s += exp_c(e[u]);
    }
    s = block_reduce(s, false, part);
    const C log_sum = log_c(s);
    const C inv = (C)1 / s;
#pragma unroll
    for (int u = 0; u < ROW_CACHE; ++u) {
        const u64 k = threadIdx.x + (u64)u * blockDim.x;
        if (k < n) out[k] = store<T, C>({{log}} ? e[u] - log_sum : exp_c(e[u]) * inv);
    }
}

extern "C" __global__ void kernel(const Info info, const T* __restrict__ x, T* __restrict__ out) {
    __shared__ C part[BLOCK / 32];
    const u64 rows = info.w[0], n = info.w[1], stride = info.w[2];
    for (u64 row = blockIdx.x; row < rows; row += gridDim.x) {
        const T* xs = x + strided_offset(info, row, info.w[3]);
        C m = neg_inf();
        if (n <= ROW_CACHE * (u64)blockDim.x) {
            C v[ROW_CACHE];
#pragma unroll
            for (int u = 0; u < ROW_CACHE; ++u) {
                const u64 k = threadIdx.x + (u64)u * blockDim.x;
                v[u] = k < n ? (C)load(xs[k * stride]) : neg_inf();
                m = v[u] > m ? v[u] : m;
            }
            m = block_reduce(m, true, part);
            cached_row(v, m, n, out + row * n, part);
            continue;
        }
        for (u64 k = threadIdx.x; k < n; k += blockDim.x) {
            const C v = (C)load(xs[k * stride]);
            m = v > m ? v : m;
        }
        m = block_reduce(m, true, part);
        C s = 0;
        for (u64 k = threadIdx.x; k < n; k += blockDim.x) s += exp_c((C)load(xs[k * stride]) - m);
        s = block_reduce(s, false, part);
        const C log_sum = log_c(s);
        const C inv = (C)1 / s;
        for (u64 k = threadIdx.x; k < n; k += blockDim.x) {
            const C e = (C)load(xs[k * stride]) - m;
            out[row * n + k] = store<T, C>({{log}} ? e - log_sum : exp_c(e) * inv);
        }
    }
}
