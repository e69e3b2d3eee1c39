// out[i] = gelu(x[i] + b[i % n]), or with {{grad}} out[i] = g[i] gelu'(x[i] + b[i % n]), over
// contiguous buffers, computed in `C`. gelu is the op table's `{{expr}}` of `x`; gelu' is
// the erf form Phi(z) + z phi(z) when {{erf}}, else the tanh form's derivative.
// info: count, n, x start, b start, g start (g is bound to x in the forward).

typedef {{T}} T;
typedef {{C}} C;

__device__ __forceinline__ C gelu_grad(C z) {
    if ({{erf}}) {
        const C cdf = (C)0.5 * ((C)1 + erf(z * (C)0.7071067811865476));
        return cdf + z * exp((C)-0.5 * z * z) * (C)0.3989422804014327;
    }
    const C c = (C)0.7978845608028654, a = (C)0.044715;
    const C t = tanh(c * (z + a * z * z * z));
    return (C)0.5 * ((C)1 + t) + (C)0.5 * z * ((C)1 - t * t) * c * ((C)1 + (C)3 * a * z * z);
}

extern "C" __global__ void kernel(const Info info, const T* __restrict__ xs, const T* __restrict__ b,
                                  const T* __restrict__ g, T* __restrict__ out) {
    const u64 count = info.w[0], n = info.w[1];
    for (u64 i = thread_start(); i < count; i += grid_step()) {
        const C z = (C)load(xs[info.w[2] + i]) + (C)load(b[info.w[3] + i % n]);
        if ({{grad}}) {
            out[i] = store<T, C>((C)load(g[info.w[4] + i]) * gelu_grad(z));
        } else {
            const C x = z;
            out[i] = store<T, C>({{expr}});
        }
    }
}
