// Fused optimizer updates (SGD, Adam / AdamW, RMSprop, Adagrad) of every parameter of one
// dtype in one launch: multi-tensor apply. The host (rnn-core, gpu/optim.rs) uploads a table
// holding, for each tensor, the addresses of its parameter, its gradient and its three state
// buffers (0 where the rule keeps no such state) and its element count (ENTRY words), then the
// index of each tensor's first chunk and the total number of chunks. A chunk is `info.w[1]`
// consecutive elements of one tensor; block b updates chunks b, b + gridDim.x, ... and finds
// the tensor of each by walking the chunk starts forward. Parameters and states are updated
// in place, in the compute type C (the stored type for f32 / f64).
//
// info: tensors, chunk, chunks, flags, hyper[8] (f64 bits; each rule lists its words).
// `{{rule}}` picks the update rule. The formulas are the CPU's (rnn-core fused_update/cpu.rs)
// and the WGSL kernel's (optim.wgsl), operation for operation.
typedef {{T}} T;
typedef {{C}} C;

// Flags (`gpu/optim.rs` sets them): L2 or decoupled weight decay on, the momentum buffer's
// first update, Nesterov momentum, decoupled (AdamW) decay, and which states exist.
#define DECAY 1ull
#define FIRST_STEP 2ull
#define NESTEROV 4ull
#define DECOUPLED 8ull
#define HAS_S0 16ull
#define HAS_S1 32ull
#define HAS_S2 64ull
#define ENTRY 6
#define HYPER 8

struct Hyper {
    C h[HYPER];
    u64 flags;
};

// The gradient with the L2 penalty `wd * p` added, when weight decay is on.
__device__ __forceinline__ C l2(C p, C g, const Hyper& k, C wd) { return (k.flags & DECAY) ? g + p * wd : g; }

// SGD. h: lr, weight decay, momentum, 1 - dampening. s0: the momentum buffer.
__device__ __forceinline__ C sgd(C p, C g, C* s, const Hyper& k) {
    const C lr = k.h[0], mu = k.h[2], keep = k.h[3];
    C d = l2(p, g, k, k.h[1]);
    if (k.flags & HAS_S0) {
        s[0] = (k.flags & FIRST_STEP) ? d : s[0] * mu + d * keep;
        d = (k.flags & NESTEROV) ? d + s[0] * mu : s[0];
    }
    return p - d * lr;
}

// Adam / AdamW. h: lr / (1 - beta1^t), sqrt(1 - beta2^t), 1 - beta1, beta2, 1 - beta2, eps,
// weight decay, 1 - lr * weight decay. s: m, v, the running maximum of v (AMSGrad).
__device__ __forceinline__ C adam(C p, C g, C* s, const Hyper& k) {
    if ((k.flags & DECAY) && (k.flags & DECOUPLED)) p = p * k.h[7];
    if ((k.flags & DECAY) && !(k.flags & DECOUPLED)) g = g + p * k.h[6];
    s[0] = s[0] + (g - s[0]) * k.h[2];
    s[1] = s[1] * k.h[3] + g * g * k.h[4];
    C v = s[1];
    if (k.flags & HAS_S2) {
        // NaN-propagating, as torch.maximum (fmax drops a NaN).
        s[2] = (s[2] != s[2] || s[1] != s[1]) ? s[2] + s[1] : fmax(s[2], s[1]);
        v = s[2];
    }
    return p - s[0] / (sqrt(v) / k.h[1] + k.h[5]) * k.h[0];
}

// RMSprop. h: lr, alpha, 1 - alpha, eps, weight decay, momentum. s: the squared-gradient
// average, the gradient average (centered), the momentum buffer.
__device__ __forceinline__ C rmsprop(C p, C g, C* s, const Hyper& k) {
    g = l2(p, g, k, k.h[4]);
    s[0] = s[0] * k.h[1] + g * g * k.h[2];
    C avg;
    if (k.flags & HAS_S1) {
        s[1] = s[1] + (g - s[1]) * k.h[2];
        avg = sqrt(s[0] - s[1] * s[1]) + k.h[3];
    } else {
        avg = sqrt(s[0]) + k.h[3];
    }
    if (k.flags & HAS_S2) {
        s[2] = s[2] * k.h[5] + g / avg;
        return p - s[2] * k.h[0];
    }
    return p - g / avg * k.h[0];
}

// Adagrad. h: the decayed lr, eps, weight decay. s0: the sum of squared gradients.
__device__ __forceinline__ C adagrad(C p, C g, C* s, const Hyper& k) {
    g = l2(p, g, k, k.h[2]);
    s[0] = s[0] + g * g;
    return p - g / (sqrt(s[0]) + k.h[1]) * k.h[0];
}

extern "C" __global__ void kernel(const Info info, const u64* __restrict__ table) {
    const u64 tensors = info.w[0], chunk = info.w[1], chunks = info.w[2];
    Hyper k;
    k.flags = info.w[3];
    for (int j = 0; j < HYPER; ++j) k.h[j] = (C)__longlong_as_double((long long)info.w[4 + j]);
    const u64* first_chunk = table + ENTRY * tensors;
    u64 t = 0;
    for (u64 c = blockIdx.x; c < chunks; c += gridDim.x) {
        // Chunks only grow along the loop, so the tensor index only moves forward; tensors
        // without elements own no chunk and are stepped over.
        while (first_chunk[t + 1] <= c) ++t;
        const u64* e = table + ENTRY * t;
        T* p = (T*)e[0];
        const T* g = (const T*)e[1];
        T* s0 = (T*)e[2];
        T* s1 = (T*)e[3];
        T* s2 = (T*)e[4];
        const u64 begin = (c - first_chunk[t]) * chunk;
        const u64 end = begin + chunk < e[5] ? begin + chunk : e[5];
        for (u64 i = begin + threadIdx.x; i < end; i += blockDim.x) {
            C s[3] = {0, 0, 0};
            if (s0) s[0] = load(s0[i]);
            if (s1) s[1] = load(s1[i]);
            if (s2) s[2] = load(s2[i]);
            p[i] = store<T, C>({{rule}}(load(p[i]), load(g[i]), s, k));
            if (s0) s0[i] = store<T, C>(s[0]);
            if (s1) s1[i] = store<T, C>(s[1]);
            if (s2) s2[i] = store<T, C>(s[2]);
        }
    }
}
