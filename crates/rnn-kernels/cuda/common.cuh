// Shared by every CUDA kernel of the rnn CUDA backend (prepended to each source).
//
// Every kernel is `extern "C" __global__ void kernel(const Info info, buffers...)`. `info`
// holds a kernel's sizes and operand layouts as 64-bit words, built on the host by
// `Target::info` (rnn-core, gpu/plan.rs) for CUDA and WGSL alike; a layout stored at w[base]
// is: rank, start offset, dims[rank], strides[rank] (in elements), or CONTIGUOUS, start
// offset, so that `strided_offset` is the one place where strided indexing is written in
// CUDA C. The half types (and their headers, which not every install has) are only part of
// kernels on f16 / bf16 data: the host defines RNN_HALF for those.
#ifdef RNN_HALF
#include <cuda_fp16.h>
#include <cuda_bf16.h>
#endif

#define INFO_WORDS 96
// A kernel's dynamic shared memory (the plan's `shared_bytes`), as `T* name`: the CUDA
// emulator defines its own.
#ifndef RNN_DYNAMIC_SHARED
#define RNN_DYNAMIC_SHARED(T, name) extern __shared__ __align__(16) T name[]
#endif
#define BLOCK 256
// Elements per thread and trip of the unary and binary kernels (`UNROLL` in gpu/target.rs),
// and loads in flight per thread in the long reductions (reduce.cu).
#define UNROLL 4

typedef unsigned long long u64;
typedef unsigned int u32;
typedef unsigned char u8;
typedef long long i64;

struct Info {
    u64 w[INFO_WORDS];
};

// The rank word of a contiguous layout: its element `i` is at `start + i`.
#define CONTIGUOUS 0xffffffffull

// Storage position of the row-major linear index `i` of the layout at info.w[base].
__device__ __forceinline__ u64 strided_offset(const Info& info, u64 i, u64 base) {
    const u64 rank = info.w[base];
    u64 offset = info.w[base + 1];
    if (rank == CONTIGUOUS) return offset + i;
    for (u64 d = rank; d > 0; --d) {
        const u64 size = info.w[base + 1 + d];
        const u64 stride = info.w[base + 1 + rank + d];
        offset += (i % size) * stride;
        i /= size;
    }
    return offset;
}

// The first element index of this thread and the grid-stride step.
__device__ __forceinline__ u64 thread_start() { return (u64)blockIdx.x * blockDim.x + threadIdx.x; }
__device__ __forceinline__ u64 grid_step() { return (u64)gridDim.x * blockDim.x; }

// Loads as the compute type (half types compute in float) and stores back from it.
template <typename T> __device__ __forceinline__ T load(T x) { return x; }
template <typename O, typename C> __device__ __forceinline__ O store(C x) { return (O)x; }
#ifdef RNN_HALF
__device__ __forceinline__ float load(__half x) { return __half2float(x); }
__device__ __forceinline__ float load(__nv_bfloat16 x) { return __bfloat162float(x); }
template <> __device__ __forceinline__ __half store<__half, float>(float x) { return __float2half(x); }
template <> __device__ __forceinline__ __nv_bfloat16 store<__nv_bfloat16, float>(float x) { return __float2bfloat16(x); }
#endif

// The largest value of an integer type (returned for a float at or above it: converting
// an out-of-range double is undefined in C++, and 2^63 - 1 is not a double).
template <typename I> __device__ __forceinline__ I int_max();
template <> __device__ __forceinline__ u8 int_max<u8>() { return 255; }
template <> __device__ __forceinline__ u32 int_max<u32>() { return 0xffffffffu; }
template <> __device__ __forceinline__ i64 int_max<i64>() { return (i64)0x7fffffffffffffffull; }

// Float to integer with Rust `as` semantics: truncate, saturate, NaN -> 0. `lo` (exact in
// a double for every integer type) and `hi` are the type's range as doubles.
template <typename I> __device__ __forceinline__ I float_to_int(double x, double lo, double hi) {
    if (x != x) return (I)0;
    if (x <= lo) return (I)lo;
    if (x >= hi) return int_max<I>();
    return (I)x;
}

// Python's `//` and `%` on floats, as PyTorch's floor_divide and remainder (and the CPU's
// num.rs): from the exact fmod; the quotient (a - mod) / b is an integer up to one
// rounding, which the last step corrects. A zero divisor gives IEEE's inf or NaN.
template <typename C> __device__ __forceinline__ C floor_divide_float(C a, C b) {
    if (b == (C)0) return a / b;
    const C mod = fmod(a, b);
    C div = (a - mod) / b;
    if (mod != (C)0 && (b < (C)0) != (mod < (C)0)) div -= (C)1;
    if (div == (C)0) return copysign((C)0, a / b);
    C floor_div = floor(div);
    if (div - floor_div > (C)0.5) floor_div += (C)1;
    return floor_div;
}
template <typename C> __device__ __forceinline__ C remainder_float(C a, C b) {
    C mod = fmod(a, b);
    if (mod != (C)0 && (b < (C)0) != (mod < (C)0)) mod += b;
    return mod;
}

// The integer forms: a zero divisor gives 0 (Tensor::floor_divide reports it as an error
// before launching), MIN // -1 wraps to MIN. `(r > 0) != (b > 0)`: the signs differ.
template <typename I> __device__ __forceinline__ bool is_minus_one(I b) { return (I)-1 < (I)0 && b == (I)-1; }
template <typename I> __device__ __forceinline__ I floor_divide_int(I a, I b) {
    if (b == 0) return (I)0;
    if (is_minus_one(b)) return (I)((u64)0 - (u64)a);
    const I q = a / b, r = a % b;
    return (r != 0 && (r > 0) != (b > 0)) ? (I)(q - 1) : q;
}
template <typename I> __device__ __forceinline__ I remainder_int(I a, I b) {
    if (b == 0 || is_minus_one(b)) return (I)0;
    const I r = a % b;
    return (r != 0 && (r > 0) != (b > 0)) ? (I)(r + b) : r;
}

// Whether the index `id` (u8, u32 or i64) names one of `size` slices.
__device__ __forceinline__ bool negative(u8) { return false; }
__device__ __forceinline__ bool negative(u32) { return false; }
__device__ __forceinline__ bool negative(i64 id) { return id < 0; }
template <typename K> __device__ __forceinline__ bool in_range(K id, u64 size) { return !negative(id) && (u64)id < size; }
