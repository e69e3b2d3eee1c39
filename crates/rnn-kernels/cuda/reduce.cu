// Reductions: out[o] = the reduction over j < r of x[kept(o) + reduced(j)], where `kept` is
// the layout of the dims that stay (with the input's start offset) and `reduced` the layout
// of the reduced dims (start 0), both with adjacent dims merged.
// info: outer (number of outputs), r (elements per output), mode, chunk, base of the kept
// layout, base of the reduced layout.
//
// The reducer `R` (one of the structs below) fixes the accumulator, the merge and the stored
// output type; the reduced layout is read through `strided_offset`. `mode` picks the work split:
//   0: one thread per output (short reductions, or outputs adjacent in memory);
//   1: one warp per output (warp shuffles);
//   2: one block per output (warp shuffles, then shared memory across the warps);
//   3: one block per `chunk` elements of an output, writing partial results to `part`
//      (outer * ceil(r / chunk) of them, output-major), which mode 4 then reduces;
//   4: one warp per output over its parts in `part`.
// Partial results carry positions, so the merge order never changes max / min / arg
// results; float sums are merged as a fixed tree, so a result does not vary between runs.

#define NONE 0xffffffffffffffffull
#define FULL_MASK 0xffffffffu

template <typename V> __device__ __forceinline__ V shfl_down(V v, int d) { return __shfl_down_sync(FULL_MASK, v, d); }
template <> __device__ __forceinline__ u8 shfl_down<u8>(u8 v, int d) {
    return (u8)__shfl_down_sync(FULL_MASK, (u32)v, d);
}

// The lowest and highest value of a compute type (the value of an empty max / min, as the
// CPU's saturating cast of -inf / +inf gives).
template <typename V> __device__ __forceinline__ V lowest();
template <typename V> __device__ __forceinline__ V highest();
template <> __device__ __forceinline__ float lowest<float>() { return __int_as_float(0xff800000); }
template <> __device__ __forceinline__ float highest<float>() { return __int_as_float(0x7f800000); }
template <> __device__ __forceinline__ double lowest<double>() { return __longlong_as_double(0xfff0000000000000ll); }
template <> __device__ __forceinline__ double highest<double>() { return __longlong_as_double(0x7ff0000000000000ll); }
template <> __device__ __forceinline__ u8 lowest<u8>() { return 0; }
template <> __device__ __forceinline__ u8 highest<u8>() { return 255; }
template <> __device__ __forceinline__ u32 lowest<u32>() { return 0u; }
template <> __device__ __forceinline__ u32 highest<u32>() { return 0xffffffffu; }
template <> __device__ __forceinline__ i64 lowest<i64>() { return (i64)0x8000000000000000ull; }
template <> __device__ __forceinline__ i64 highest<i64>() { return (i64)0x7fffffffffffffffull; }

// Float sums, accumulated in A (float for the half types, double for f32 and f64, as the
// CPU sums in f64), rounded once to the stored type.
template <typename T, typename A> struct FloatSum {
    typedef A Acc;
    typedef T Out;
    static __device__ __forceinline__ Acc identity() { return (A)0; }
    static __device__ __forceinline__ Acc element(T x, u64) { return (A)load(x); }
    static __device__ __forceinline__ Acc merge(Acc a, Acc b) { return a + b; }
    static __device__ __forceinline__ Acc shfl(Acc a, int d) { return shfl_down(a, d); }
    static __device__ __forceinline__ Out finish(Acc a) { return store<T, A>(a); }
};

// Sums of u8 / u32, exact in 64 bits, as i64 (saturated to its range).
template <typename T> struct UnsignedSum {
    typedef u64 Acc;
    typedef i64 Out;
    static __device__ __forceinline__ Acc identity() { return 0; }
    static __device__ __forceinline__ Acc element(T x, u64) { return (u64)x; }
    static __device__ __forceinline__ Acc merge(Acc a, Acc b) { return a + b; }
    static __device__ __forceinline__ Acc shfl(Acc a, int d) { return shfl_down(a, d); }
    static __device__ __forceinline__ Out finish(Acc a) { return a > (u64)highest<i64>() ? highest<i64>() : (i64)a; }
};

// A 128-bit two's complement integer.
struct Wide {
    u64 lo;
    u64 hi;
};

// Sums of i64, exact in 128 bits, saturated to i64.
struct SignedSum {
    typedef Wide Acc;
    typedef i64 Out;
    static __device__ __forceinline__ Acc identity() { return Wide{0, 0}; }
    static __device__ __forceinline__ Acc element(i64 x, u64) { return Wide{(u64)x, x < 0 ? NONE : 0}; }
    static __device__ __forceinline__ Acc merge(Acc a, Acc b) {
        const u64 lo = a.lo + b.lo;
        return Wide{lo, a.hi + b.hi + (lo < a.lo ? 1 : 0)};
    }
    static __device__ __forceinline__ Acc shfl(Acc a, int d) { return Wide{shfl_down(a.lo, d), shfl_down(a.hi, d)}; }
    static __device__ __forceinline__ Out finish(Acc a) {
        const bool fits = (a.hi == 0 && (i64)a.lo >= 0) || (a.hi == NONE && (i64)a.lo < 0);
        if (fits) return (i64)a.lo;
        return (i64)a.hi < 0 ? lowest<i64>() : highest<i64>();
    }
};

// The best value so far (compared as V) and its position (NONE before the first element).
template <typename V> struct Best {
    V v;
    u64 j;
};

// Max (GREATER) or min of T compared as V, giving the value or (ARG) its position among the
// reduced elements (as O: i64).
template <typename T, typename V, typename O, bool GREATER, bool ARG> struct Extreme {
    typedef Best<V> Acc;
    typedef O Out;
    static __device__ __forceinline__ Acc identity() { return Acc{GREATER ? lowest<V>() : highest<V>(), NONE}; }
    static __device__ __forceinline__ Acc element(T x, u64 j) { return Acc{(V)load(x), j}; }
    // Whether `b` beats `a`: any element beats none, NaN beats numbers, a better value beats
    // a worse one, and among equals (or NaNs) the first position wins, as on the CPU.
    static __device__ __forceinline__ bool beats(Acc a, Acc b) {
        if (b.j == NONE) return false;
        if (a.j == NONE) return true;
        const bool a_nan = a.v != a.v;
        const bool b_nan = b.v != b.v;
        if (a_nan || b_nan) return b_nan && (!a_nan || b.j < a.j);
        const bool better = GREATER ? b.v > a.v : b.v < a.v;
        return better || (b.v == a.v && b.j < a.j);
    }
    static __device__ __forceinline__ Acc merge(Acc a, Acc b) { return beats(a, b) ? b : a; }
    static __device__ __forceinline__ Acc shfl(Acc a, int d) { return Acc{shfl_down(a.v, d), shfl_down(a.j, d)}; }
    static __device__ __forceinline__ Out finish(Acc a) {
        if constexpr (ARG) {
            return (O)a.j;
        } else {
            return store<O, V>(a.v);
        }
    }
};

typedef {{T}} T;
typedef {{R}} R;
typedef R::Acc Acc;

// The sum of the accumulators of the 32 lanes, in lane 0.
__device__ __forceinline__ Acc warp_merge(Acc a) {
    for (int d = 16; d > 0; d >>= 1) a = R::merge(a, R::shfl(a, d));
    return a;
}

// The merge of every thread's `a` in the block, in thread 0. `part` holds a value per warp.
__device__ __forceinline__ Acc block_merge(Acc a, Acc* part) {
    const u32 lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    a = warp_merge(a);
    if (lane == 0) part[warp] = a;
    __syncthreads();
    if (warp == 0) {
        a = lane < blockDim.x / 32 ? part[lane] : R::identity();
        a = warp_merge(a);
    }
    __syncthreads();
    return a;
}

// Element j of the output whose kept position is `base`.
__device__ __forceinline__ Acc element(const Info& info, const T* __restrict__ x, u64 base, u64 j) {
    return R::element(x[base + strided_offset(info, j, info.w[5])], j);
}

extern "C" __global__ void kernel(const Info info, const T* __restrict__ x, R::Out* __restrict__ out,
                                  Acc* __restrict__ part) {
    __shared__ Acc warps[BLOCK / 32];
    const u64 outer = info.w[0], r = info.w[1], mode = info.w[2], chunk = info.w[3];
    const u32 lane = threadIdx.x % 32;
    if (mode == 0) {
        for (u64 o = thread_start(); o < outer; o += grid_step()) {
            const u64 base = strided_offset(info, o, info.w[4]);
            Acc a = R::identity();
            for (u64 j = 0; j < r; ++j) a = R::merge(a, element(info, x, base, j));
            out[o] = R::finish(a);
        }
    } else if (mode == 1 || mode == 4) {
        // Every lane of a warp has the same `o`, so the shuffles see the whole warp.
        const u64 parts = mode == 4 ? (r + chunk - 1) / chunk : 0;
        for (u64 o = thread_start() / 32; o < outer; o += grid_step() / 32) {
            Acc a = R::identity();
            if (mode == 4) {
                for (u64 k = lane; k < parts; k += 32) a = R::merge(a, part[o * parts + k]);
            } else {
                const u64 base = strided_offset(info, o, info.w[4]);
                for (u64 j = lane; j < r; j += 32) a = R::merge(a, element(info, x, base, j));
            }
            a = warp_merge(a);
            if (lane == 0) out[o] = R::finish(a);
        }
    } else {
        // Modes 2 and 3: block `b` reduces elements [c * chunk, (c + 1) * chunk) of output
        // b / parts, c = b % parts (one part of all r elements in mode 2).
        const u64 parts = mode == 3 ? (r + chunk - 1) / chunk : 1;
        const u64 len = mode == 3 ? chunk : r;
        for (u64 b = blockIdx.x; b < outer * parts; b += gridDim.x) {
            const u64 o = b / parts, first = (b % parts) * len;
            const u64 end = first + len < r ? first + len : r;
            const u64 base = strided_offset(info, o, info.w[4]);
            Acc a = R::identity();
            u64 j = first + threadIdx.x;
            // UNROLL loads in flight per thread before they are merged (one at a time kept a
            // long reduction waiting on memory latency), merged in index order.
            for (; j + (UNROLL - 1) * blockDim.x < end; j += UNROLL * blockDim.x) {
                Acc e[UNROLL];
#pragma unroll
                for (int u = 0; u < UNROLL; ++u) e[u] = element(info, x, base, j + u * blockDim.x);
#pragma unroll
                for (int u = 0; u < UNROLL; ++u) a = R::merge(a, e[u]);
            }
            for (; j < end; j += blockDim.x) a = R::merge(a, element(info, x, base, j));
            a = block_merge(a, warps);
            if (threadIdx.x == 0) {
                if (mode == 3) {
                    part[b] = a;
                } else {
                    out[o] = R::finish(a);
                }
            }
        }
    }
}
