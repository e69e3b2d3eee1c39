// The logits' gradient of softmax cross entropy, one thread per element of the contiguous
// [rows, n] logits: dx = g[row] (exp(x - lse[row]) - (1 - s) [k == id] - s / n), 0 in an
// ignored row (or one whose id is out of range: the forward reported it). Computed in `C`.
// info: count, n, x start, has ignore, ignored id (i64 bits), s (double bits), lse start,
// g start, base of the ids' layout.

typedef {{T}} T;
typedef {{C}} C;
typedef {{K}} K;

__device__ __forceinline__ float exp_c(float x) { return expf(x); }
__device__ __forceinline__ double exp_c(double x) { return exp(x); }

extern "C" __global__ void kernel(const Info info, const T* __restrict__ x, const K* __restrict__ ids,
                                  const C* __restrict__ lse, const T* __restrict__ g, T* __restrict__ dx) {
    const u64 count = info.w[0], n = info.w[1];
    const C s = (C)__longlong_as_double((long long)info.w[5]);
    for (u64 i = thread_start(); i < count; i += grid_step()) {
        const u64 row = i / n, k = i % n;
        const K id = ids[strided_offset(info, row, info.w[8])];
        const bool ignored = info.w[3] != 0 && (i64)id == (i64)info.w[4];
        C d = 0;
        if (!ignored && in_range(id, n)) {
            const C p = exp_c((C)load(x[info.w[2] + i]) - lse[info.w[6] + row]);
            d = (C)load(g[info.w[7] + row]) * (p - ((u64)id == k ? (C)1 - s : (C)0) - s / (C)n);
        }
        dx[i] = store<T, C>(d);
    }
}
