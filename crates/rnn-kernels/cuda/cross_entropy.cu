// Softmax cross entropy of each contiguous row of n logits against a class id, one block per
// row, computed in `C`: lse = max + log(sum(exp(x - max))) (saved), and the loss
// lse - (1 - s) x[id] - s mean(x) with label smoothing s, 0 for an ignored id. An id out of
// range (and not ignored) gives loss 0 and records its row in `bad` (all ones while none
// is), reported as the CPU reports it; nothing is read out of bounds.
// info: rows, n, x start, has ignore, ignored id (i64 bits), s (double bits), base of the
// ids' layout.


typedef {{T}} T;
typedef {{C}} C;
typedef {{K}} K;

__device__ __forceinline__ C neg_inf() { return (C)__int_as_float(0xff800000); }
__device__ __forceinline__ float exp_c(float x) { return expf(x); }
__device__ __forceinline__ double exp_c(double x) { return exp(x); }
__device__ __forceinline__ float log_c(float x) { return logf(x); }
__device__ __forceinline__ double log_c(double x) { return log(x); }


extern "C" __global__ void kernel(const Info info, const T* __restrict__ x, const K* __restrict__ ids,
                                  T* __restrict__ loss, C* __restrict__ lse_out, u64* __restrict__ bad) {
    __shared__ C part[BLOCK / 32];
    const u64 rows = info.w[0], n = info.w[1];
    const C s = (C)__longlong_as_double((long long)info.w[5]);
    for (u64 row = blockIdx.x; row < rows; row += gridDim.x) {
        const T* xs = x + info.w[2] + row * n;
        const K id = ids[strided_offset(info, row, info.w[6])];
        const bool ignored = info.w[3] != 0 && (i64)id == (i64)info.w[4];
        const bool valid = in_range(id, n);
        if (!ignored && !valid && threadIdx.x == 0) atomicMin(bad, row);
        C m = neg_inf();
        for (u64 k = threadIdx.x; k < n; k += blockDim.x) {
            const C v = (C)load(xs[k]);
            m = v > m ? v : m;
        }
        m = block_reduce(m, true, part);
        C e = 0, sum = 0;
        for (u64 k = threadIdx.x; k < n; k += blockDim.x) {
            const C v = (C)load(xs[k]);
            e += exp_c(v - m);
            sum += v;
        }
        e = block_reduce(e, false, part);
        // Without smoothing the mean is not used: 0 * mean would turn an infinite logit into NaN.
        const C mean = s > (C)0 ? block_reduce(sum, false, part) / (C)n : (C)0;
        if (threadIdx.x == 0) {
            const C lse = m + log_c(e);
            lse_out[row] = lse;
            C l = 0;
            if (!ignored && valid) {
                l = lse - ((C)1 - s) * (C)load(xs[(u64)id]);
                if (s > (C)0) l -= s * mean;
            }
            loss[row] = store<T, C>(l);
        }
    }
}
