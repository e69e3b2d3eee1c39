// cuda_shim.h: runs rnn's CUDA C kernel sources on the host, compiled by g++ (C++17, Linux,
// glibc, x86-64 or any target with ucontext), so that machines without a GPU can execute the
// real kernels.
//
// CONTRACT. The library writes one translation unit per batch of kernels:
//
//     #include "cuda_shim.h"
//     namespace rnn_v0 {
//     #define RNN_HALF            // only for f16 / bf16 variants (#undef it before the `}`:
//                                 // macros ignore namespaces)
//     <common.cuh> <filled kernel template, `extern "C" __global__` -> `__global__`>
//     }
//     extern "C" int rnn_emu_v0(const unsigned long long* words, unsigned long n_words,
//                               void* const* buffers, unsigned long n_buffers,
//                               const rnn_emu::LaunchDims* dims, char* err, unsigned long err_cap) {
//         return rnn_emu::launch(rnn_v0::kernel, words, n_words, buffers, n_buffers, dims, err, err_cap);
//     }
//     namespace rnn_v1 { ... } ...
//
// built with `g++ -std=c++17 -O1 -fno-strict-aliasing -fPIC -shared -pthread -I <this dir>`.
// Load the result with dlopen(RTLD_LOCAL) (libloading's default): kernel namespaces repeat
// between batches (rnn_v0 in every file), so RTLD_GLOBAL could bind one file's calls to
// another's functions. Everything this header defines has internal linkage (unnamed
// namespaces, `static`), so files built from different versions of it never mix.
//
// rnn_emu::launch(kernel, ...) copies `n_words` words into the kernel's Info (zeroing the
// rest), casts `buffers[i]` to the kernel's i-th pointer parameter, runs every block of the
// grid (x fastest) on up to `os_threads` OS threads (0: the CPUs this process may run on;
// never more than there are blocks; the calling thread is one of them) and returns 0, or
// 1 for an invalid launch (buffer count, info size, dims), 2 for a fault found while running
// (deadlock, divergent barrier, bad warp collective, __trap), 3 for an internal failure (out
// of memory), with a NUL-terminated message in `err` (truncated to err_cap) naming the block
// and thread; when several blocks fail, the lowest block's error is reported. Host buffers
// must keep what CUDA allocations guarantee and kernels rely on (scatter_add's byte atomics
// touch the aligned 32-bit word holding the byte): 256-byte alignment, sizes rounded up to
// 256 bytes. Launches may run concurrently from several threads.
//
// WHAT IS EMULATED.
// - Execution: each OS thread takes whole blocks, one at a time. The threads of a block are
//   fibers on that OS thread (64 KiB stacks, switched by a few instructions on x86-64, by
//   ucontext elsewhere); each runs until it exits or waits at __syncthreads / a warp
//   collective, so a block runs as one valid interleaving, deterministically. A thread that
//   exits hands its fiber to the next thread, so barrier-free kernels use one fiber per
//   block. blockIdx, threadIdx, blockDim, gridDim, warpSize; lanes are consecutive linear
//   thread indices (x fastest), 32 per warp.
// - __syncthreads (and _count / _and / _or): a barrier of all threads of the block. A barrier
//   that cannot complete (a thread exited, or waits in a warp collective) is reported.
// - Warp collectives (__shfl*_sync, __ballot / __any / __all_sync, __syncwarp,
//   __reduce_*_sync, __match_*_sync) are a rendezvous of every existing lane named in the
//   mask: each lane deposits its value and waits; the last to arrive computes every lane's
//   result before any lane goes on, so no value is overwritten before all have read it.
//   Reported as errors: a named lane that exited or waits elsewhere, lanes disagreeing on
//   the operation, a caller missing from its own mask, reading a lane that does not exist
//   (partial last warp) or is not in the mask, a width that is not a power of two <= 32.
// - __shared__: one instance per OS thread (`static thread_local`), hence per running block.
//   Dynamic shared memory: `extern __shared__ T a[];` does not compile here; write
//   RNN_DYNAMIC_SHARED(T, a) (see below), which gets `shared_bytes` per OS thread.
// - Atomics (GCC __atomic builtins, relaxed like CUDA's; fences are full fences), correct
//   across OS threads; 16-bit float atomicAdd adds in float and rounds once, through a
//   compare-exchange on the element's own 16 bits.
// - __half / __nv_bfloat16 with every conversion rounded exactly once to nearest even (also
//   from double and 64-bit integers), subnormals, overflow to inf, NaN -> 0x7fff, and the
//   arithmetic that cuda_fp16.h / cuda_bf16.h define (computed in float, rounded once: exact).
// - Math names with CUDA's (NVRTC's) overload set: float arguments compute in float
//   (exp(float) is expf), fmax(float, int) is the float fmax, CUDA's integer min / max.
//   __CUDA_ARCH__ is 900 (sm_90); RNN_EMU is defined. __nanosleep lets the block's other
//   threads run; __trap fails the launch; assert is the C one (it aborts the process).
//
// WHAT IT CANNOT SEE. Data races and the memory model (unsynchronized accesses happen in one
// fixed order, so a missing __syncthreads / __syncwarp / fence usually goes unnoticed; lanes
// never run in lockstep, so implicit warp-synchronous code is not modelled, and
// __activemask() returns the lanes that have not exited, not those of a divergent branch);
// which call site a barrier is reached from; coalescing, bank conflicts, timing, occupancy,
// register, stack and shared memory limits; tensor-core instructions (wmma / mma), inline
// PTX (asm), cooperative groups, textures, dynamic parallelism; spinning on another block
// (there is no forward-progress guarantee between blocks here) or on another thread of the
// block without __nanosleep.
// Numerics that differ: CUDA's math library and fast intrinsics (__expf...) are replaced by
// glibc's functions (last-ulp differences); NVRTC contracts a*b+c into fma by default, g++
// on x86-64 does not (on AArch64 it may, at other places); atom.add.f32 on global memory
// flushes subnormals to zero on the GPU, not here; float -> integer conversions outside the
// target's range are UB in C++ (the GPU saturates, x86 gives INT_MIN unless folded).
// Out-of-bounds accesses are plain host memory errors (build with -fsanitize=address).

#ifndef RNN_EMU_CUDA_SHIM_H
#define RNN_EMU_CUDA_SHIM_H

#include <cassert>
#include <cfloat>
#include <climits>
#include <cmath>
#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <new>
#include <type_traits>
#include <utility>

#include <pthread.h>
#include <sched.h>
#include <sys/mman.h>
#include <time.h>
#include <ucontext.h>
#include <unistd.h>

#define RNN_EMU 1
#define __CUDA_ARCH__ 900

// ---------------------------------------------------------------------------------------
// Keywords. Every function is an ordinary host function; `__shared__` is per OS thread.
// ---------------------------------------------------------------------------------------
#define __global__
#define __device__
#define __host__
#define __forceinline__ inline __attribute__((always_inline))
#define __noinline__ __attribute__((noinline))
#define __launch_bounds__(...)
#define __grid_constant__
#define __constant__
#define __managed__
#define __align__(n) __attribute__((aligned(n)))
// __restrict__ is a g++ keyword with CUDA's meaning; left as is.
//
// One OS thread runs one block at a time, and all threads of that block run on it, so a
// thread_local variable is exactly "one instance per running block, shared by its threads".
// `static` also makes `extern __shared__ T a[]` a compile error instead of a link error.
#define __shared__ static thread_local

// Fiber stack per emulated thread. CUDA's default stack limit is 1 KiB per thread, so real
// kernels need little; 64 KiB leaves room for glibc (printf uses a few KiB) and -O1 frames.
// A guard page below each stack turns an overflow into SIGSEGV.
#ifndef RNN_EMU_STACK_BYTES
#if defined(__SANITIZE_ADDRESS__)
#define RNN_EMU_STACK_BYTES (256 * 1024)
#else
#define RNN_EMU_STACK_BYTES (64 * 1024)
#endif
#endif

// ---------------------------------------------------------------------------------------
// Vector types, dim3 and the built-in index variables.
// ---------------------------------------------------------------------------------------
namespace {

#define RNN_EMU_VEC(N, T, A2, A4)                                                             \
    struct N##1 { T x; };                                                                     \
    struct alignas(A2) N##2 { T x, y; };                                                      \
    struct N##3 { T x, y, z; };                                                               \
    struct alignas(A4) N##4 { T x, y, z, w; };                                                \
    inline N##1 make_##N##1(T x) { return {x}; }                                              \
    inline N##2 make_##N##2(T x, T y) { return {x, y}; }                                      \
    inline N##3 make_##N##3(T x, T y, T z) { return {x, y, z}; }                              \
    inline N##4 make_##N##4(T x, T y, T z, T w) { return {x, y, z, w}; }
RNN_EMU_VEC(char, signed char, 2, 4)
RNN_EMU_VEC(uchar, unsigned char, 2, 4)
RNN_EMU_VEC(short, short, 4, 8)
RNN_EMU_VEC(ushort, unsigned short, 4, 8)
RNN_EMU_VEC(int, int, 8, 16)
RNN_EMU_VEC(uint, unsigned int, 8, 16)
RNN_EMU_VEC(long, long, 16, 16)
RNN_EMU_VEC(ulong, unsigned long, 16, 16)
RNN_EMU_VEC(longlong, long long, 16, 16)
RNN_EMU_VEC(ulonglong, unsigned long long, 16, 16)
RNN_EMU_VEC(float, float, 8, 16)
RNN_EMU_VEC(double, double, 16, 16)
#undef RNN_EMU_VEC

struct dim3 {
    unsigned int x, y, z;
    constexpr dim3(unsigned int vx = 1, unsigned int vy = 1, unsigned int vz = 1) : x(vx), y(vy), z(vz) {}
    constexpr dim3(uint3 v) : x(v.x), y(v.y), z(v.z) {}
    constexpr operator uint3() const { return uint3{x, y, z}; }
};

// Set by the scheduler for whichever emulated thread runs on this OS thread.
thread_local uint3 threadIdx;
thread_local uint3 blockIdx;
thread_local dim3 blockDim;
thread_local dim3 gridDim;
constexpr int warpSize = 32;

} // namespace

// ---------------------------------------------------------------------------------------
// Exact rounding to the 16-bit float formats.
// ---------------------------------------------------------------------------------------
namespace rnn_emu {
namespace {
namespace fp {

// m / 2^s rounded to nearest, ties to even (s >= 1).
inline uint64_t rne_shift(uint64_t m, int s) {
    if (s > 64) return 0; // m / 2^s < 1/2
    const uint64_t n = s == 64 ? 0 : m >> s;
    const uint64_t rem = s == 64 ? m : m & ((1ull << s) - 1);
    const uint64_t half = 1ull << (s - 1);
    return n + ((rem > half || (rem == half && (n & 1))) ? 1 : 0);
}

// The bits (sign excluded) of m * 2^k rounded once to nearest-even in a binary format with
// `mant` fraction bits, exponent bias `bias` and `ebits` exponent bits; overflow gives inf.
inline unsigned round_bits(uint64_t m, int k, int mant, int bias, int ebits) {
    if (m == 0) return 0;
    const int e = 63 - __builtin_clzll(m) + k; // exponent of the leading bit
    const int emin = 1 - bias;
    const int top = e > emin ? e : emin;   // exponent of the result's leading bit position
    const int shift = top - mant - k;      // bits of m below the result's last bit
    const uint64_t n = shift <= 0 ? m << -shift : rne_shift(m, shift);
    // n includes the hidden bit, so a carry out of the fraction bumps the exponent, and a
    // subnormal (top == emin) rounding up to 2^mant becomes the smallest normal.
    const uint64_t bits = ((uint64_t)(top + bias - 1) << mant) + n;
    const uint64_t inf = ((1ull << ebits) - 1) << mant;
    return (unsigned)(bits >= inf ? inf : bits);
}

struct Format {
    int mant, bias, ebits;
    unsigned short inf, nan;
};
constexpr Format kHalf{10, 15, 5, 0x7c00, 0x7fff};
constexpr Format kBf16{7, 127, 8, 0x7f80, 0x7fff};

// float converts to double exactly, so this one path rounds floats and doubles alike once.
inline unsigned short from_double(double d, const Format& f) {
    uint64_t b;
    std::memcpy(&b, &d, 8);
    const unsigned sign = (unsigned)(b >> 63) << 15;
    const unsigned ex = (unsigned)(b >> 52) & 0x7ff;
    const uint64_t frac = b & ((1ull << 52) - 1);
    if (ex == 0x7ff) return frac ? f.nan : (unsigned short)(sign | f.inf);
    const uint64_t m = ex ? frac | (1ull << 52) : frac;
    const int k = (ex ? (int)ex : 1) - 1075;
    return (unsigned short)(sign | round_bits(m, k, f.mant, f.bias, f.ebits));
}

inline unsigned short from_int(bool negative, uint64_t magnitude, const Format& f) {
    return (unsigned short)((negative ? 0x8000u : 0u) | round_bits(magnitude, 0, f.mant, f.bias, f.ebits));
}
inline unsigned short from_signed(long long v, const Format& f) {
    return from_int(v < 0, v < 0 ? 0ull - (unsigned long long)v : (unsigned long long)v, f);
}

inline float bits_float(uint32_t b) {
    float x;
    std::memcpy(&x, &b, 4);
    return x;
}

inline float half_to_float(unsigned short h) {
    const uint32_t sign = (uint32_t)(h & 0x8000) << 16;
    const uint32_t ex = (h >> 10) & 0x1f, frac = h & 0x3ff;
    if (ex == 0x1f) return bits_float(sign | 0x7f800000u | (frac << 13));
    if (ex == 0) { // zero or subnormal: frac * 2^-24, exact in float
        const float mag = (float)frac * 0x1p-24f;
        return sign ? -mag : mag;
    }
    return bits_float(sign | ((ex + 112) << 23) | (frac << 13));
}

inline float bf16_to_float(unsigned short h) { return bits_float((uint32_t)h << 16); }

// Float to integer as CUDA's cvt.rzi / cvt.rni: NaN gives 0, out of range saturates.
template <typename I> inline I to_int(double r) {
    if (r != r) return 0;
    if (r <= (double)std::numeric_limits<I>::min()) return std::numeric_limits<I>::min();
    if (r >= (double)std::numeric_limits<I>::max()) return std::numeric_limits<I>::max();
    return (I)r;
}

} // namespace fp
} // namespace
} // namespace rnn_emu

// ---------------------------------------------------------------------------------------
// __half and __nv_bfloat16: cuda_fp16.h / cuda_bf16.h (CUDA 12), types in the global
// namespace. Both stub headers are empty because the library includes them inside a
// kernel namespace.
// ---------------------------------------------------------------------------------------
namespace {

struct __half_raw { unsigned short x; };
struct __nv_bfloat16_raw { unsigned short x; };

// One struct per format, generated so that the two stay identical. Construction from
// integers and the integer conversions mirror CUDA 12's headers (rn in, rz + saturate out).
#define RNN_EMU_HALF_TYPE(H, RAW, FMT, TO_FLOAT)                                               \
    struct H {                                                                                 \
        unsigned short __x;                                                                    \
        H() = default;                                                                         \
        constexpr H(const RAW& r) : __x(r.x) {}                                                \
        H(float f) : __x(rnn_emu::fp::from_double(f, FMT)) {}                                  \
        H(double d) : __x(rnn_emu::fp::from_double(d, FMT)) {}                                 \
        H(short v) : __x(rnn_emu::fp::from_signed(v, FMT)) {}                                  \
        H(unsigned short v) : __x(rnn_emu::fp::from_int(false, v, FMT)) {}                     \
        H(int v) : __x(rnn_emu::fp::from_signed(v, FMT)) {}                                    \
        H(unsigned int v) : __x(rnn_emu::fp::from_int(false, v, FMT)) {}                       \
        H(long v) : __x(rnn_emu::fp::from_signed(v, FMT)) {}                                   \
        H(unsigned long v) : __x(rnn_emu::fp::from_int(false, v, FMT)) {}                      \
        H(long long v) : __x(rnn_emu::fp::from_signed(v, FMT)) {}                              \
        H(unsigned long long v) : __x(rnn_emu::fp::from_int(false, v, FMT)) {}                 \
        H& operator=(const RAW& r) { __x = r.x; return *this; }                                \
        operator RAW() const { return RAW{__x}; }                                              \
        operator float() const { return TO_FLOAT(__x); }                                       \
        operator bool() const { return (__x & 0x7fff) != 0; }                                  \
        operator signed char() const { return rnn_emu::fp::to_int<signed char>(TO_FLOAT(__x)); }     \
        operator unsigned char() const { return rnn_emu::fp::to_int<unsigned char>(TO_FLOAT(__x)); } \
        operator short() const { return rnn_emu::fp::to_int<short>(TO_FLOAT(__x)); }                 \
        operator unsigned short() const { return rnn_emu::fp::to_int<unsigned short>(TO_FLOAT(__x)); } \
        operator int() const { return rnn_emu::fp::to_int<int>(TO_FLOAT(__x)); }                     \
        operator unsigned int() const { return rnn_emu::fp::to_int<unsigned int>(TO_FLOAT(__x)); }   \
        operator long() const { return rnn_emu::fp::to_int<long>(TO_FLOAT(__x)); }                   \
        operator unsigned long() const { return rnn_emu::fp::to_int<unsigned long>(TO_FLOAT(__x)); } \
        operator long long() const { return rnn_emu::fp::to_int<long long>(TO_FLOAT(__x)); }         \
        operator unsigned long long() const { return rnn_emu::fp::to_int<unsigned long long>(TO_FLOAT(__x)); } \
    };
RNN_EMU_HALF_TYPE(__half, __half_raw, rnn_emu::fp::kHalf, rnn_emu::fp::half_to_float)
RNN_EMU_HALF_TYPE(__nv_bfloat16, __nv_bfloat16_raw, rnn_emu::fp::kBf16, rnn_emu::fp::bf16_to_float)
#undef RNN_EMU_HALF_TYPE
static_assert(sizeof(__half) == 2 && sizeof(__nv_bfloat16) == 2, "16-bit float types");
static_assert(std::is_trivially_copyable<__half>::value && std::is_trivial<__nv_bfloat16>::value, "POD");

typedef __half half;
typedef __nv_bfloat16 nv_bfloat16;
struct alignas(4) __half2 { __half x, y; };
struct alignas(4) __nv_bfloat162 { __nv_bfloat16 x, y; };
typedef __half2 half2;
typedef __nv_bfloat162 nv_bfloat162;

inline __half __ushort_as_half(unsigned short b) { return __half_raw{b}; }
inline unsigned short __half_as_ushort(__half h) { return h.__x; }
inline __half __short_as_half(short b) { return __half_raw{(unsigned short)b}; }
inline short __half_as_short(__half h) { return (short)h.__x; }
inline __nv_bfloat16 __ushort_as_bfloat16(unsigned short b) { return __nv_bfloat16_raw{b}; }
inline unsigned short __bfloat16_as_ushort(__nv_bfloat16 h) { return h.__x; }
inline __nv_bfloat16 __short_as_bfloat16(short b) { return __nv_bfloat16_raw{(unsigned short)b}; }
inline short __bfloat16_as_short(__nv_bfloat16 h) { return (short)h.__x; }

inline float __half2float(__half h) { return rnn_emu::fp::half_to_float(h.__x); }
inline float __bfloat162float(__nv_bfloat16 h) { return rnn_emu::fp::bf16_to_float(h.__x); }

// Conversions to the 16-bit types, all round-to-nearest-even applied once.
#define RNN_EMU_TO_16(H, P, FMT)                                                                     \
    inline H __float2##P(float x) { return __##P##_raw_from(rnn_emu::fp::from_double(x, FMT)); }    \
    inline H __float2##P##_rn(float x) { return __float2##P(x); }                                   \
    inline H __double2##P(double x) { return __##P##_raw_from(rnn_emu::fp::from_double(x, FMT)); }  \
    inline H __int2##P##_rn(int v) { return __##P##_raw_from(rnn_emu::fp::from_signed(v, FMT)); }   \
    inline H __short2##P##_rn(short v) { return __##P##_raw_from(rnn_emu::fp::from_signed(v, FMT)); } \
    inline H __ll2##P##_rn(long long v) { return __##P##_raw_from(rnn_emu::fp::from_signed(v, FMT)); } \
    inline H __uint2##P##_rn(unsigned v) { return __##P##_raw_from(rnn_emu::fp::from_int(false, v, FMT)); } \
    inline H __ushort2##P##_rn(unsigned short v) { return __##P##_raw_from(rnn_emu::fp::from_int(false, v, FMT)); } \
    inline H __ull2##P##_rn(unsigned long long v) { return __##P##_raw_from(rnn_emu::fp::from_int(false, v, FMT)); }
inline __half __half_raw_from(unsigned short b) { return __half_raw{b}; }
inline __nv_bfloat16 __bfloat16_raw_from(unsigned short b) { return __nv_bfloat16_raw{b}; }
RNN_EMU_TO_16(__half, half, rnn_emu::fp::kHalf)
RNN_EMU_TO_16(__nv_bfloat16, bfloat16, rnn_emu::fp::kBf16)
#undef RNN_EMU_TO_16

// Conversions from the 16-bit types to integers (round toward zero, saturating, NaN -> 0).
#define RNN_EMU_FROM_16(H, P, TOF)                                                               \
    inline int __##P##2int_rz(H h) { return rnn_emu::fp::to_int<int>(TOF(h)); }                  \
    inline unsigned __##P##2uint_rz(H h) { return rnn_emu::fp::to_int<unsigned>(TOF(h)); }       \
    inline short __##P##2short_rz(H h) { return rnn_emu::fp::to_int<short>(TOF(h)); }            \
    inline unsigned short __##P##2ushort_rz(H h) { return rnn_emu::fp::to_int<unsigned short>(TOF(h)); } \
    inline long long __##P##2ll_rz(H h) { return rnn_emu::fp::to_int<long long>(TOF(h)); }       \
    inline unsigned long long __##P##2ull_rz(H h) { return rnn_emu::fp::to_int<unsigned long long>(TOF(h)); } \
    inline int __##P##2int_rn(H h) { return rnn_emu::fp::to_int<int>(std::nearbyint(TOF(h))); }
RNN_EMU_FROM_16(__half, half, __half2float)
RNN_EMU_FROM_16(__nv_bfloat16, bfloat16, __bfloat162float)
#undef RNN_EMU_FROM_16

// Arithmetic and comparisons, for both types (CUDA overloads the same names). The sum,
// difference, product or quotient of two 16-bit values computed in float and rounded once
// is the correctly rounded 16-bit result (float has more than 2p+2 bits), as the GPU's.
inline __half __canonical_nan(__half) { return __half_raw{0x7fff}; }
inline __nv_bfloat16 __canonical_nan(__nv_bfloat16) { return __nv_bfloat16_raw{0x7fff}; }

#define RNN_EMU_HALF_MATH(H, TOF)                                                                  \
    inline bool __hisnan(H a) { return TOF(a) != TOF(a); }                                        \
    inline int __hisinf(H a) { return std::isinf(TOF(a)) ? (TOF(a) < 0 ? -1 : 1) : 0; }          \
    inline H __hadd(H a, H b) { return H(TOF(a) + TOF(b)); }                                      \
    inline H __hsub(H a, H b) { return H(TOF(a) - TOF(b)); }                                      \
    inline H __hmul(H a, H b) { return H(TOF(a) * TOF(b)); }                                      \
    inline H __hdiv(H a, H b) { return H(TOF(a) / TOF(b)); }                                      \
    /* a * b is exact in double and 53 >= 2p+2, so fma in double then one rounding is exact. */  \
    inline H __hfma(H a, H b, H c) { return H(std::fma((double)TOF(a), (double)TOF(b), (double)TOF(c))); } \
    inline H __hneg(H a) { H r; r.__x = (unsigned short)(a.__x ^ 0x8000); return r; }             \
    inline H __habs(H a) { H r; r.__x = (unsigned short)(a.__x & 0x7fff); return r; }            \
    inline bool __heq(H a, H b) { return TOF(a) == TOF(b); }                                      \
    inline bool __hne(H a, H b) { return TOF(a) < TOF(b) || TOF(a) > TOF(b); }                    \
    inline bool __hlt(H a, H b) { return TOF(a) < TOF(b); }                                       \
    inline bool __hle(H a, H b) { return TOF(a) <= TOF(b); }                                      \
    inline bool __hgt(H a, H b) { return TOF(a) > TOF(b); }                                       \
    inline bool __hge(H a, H b) { return TOF(a) >= TOF(b); }                                      \
    inline bool __hequ(H a, H b) { return !__hne(a, b); }                                         \
    inline bool __hneu(H a, H b) { return !__heq(a, b); }                                         \
    inline bool __hltu(H a, H b) { return !__hge(a, b); }                                         \
    inline bool __hleu(H a, H b) { return !__hgt(a, b); }                                         \
    inline bool __hgtu(H a, H b) { return !__hle(a, b); }                                         \
    inline bool __hgeu(H a, H b) { return !__hlt(a, b); }                                         \
    /* NaNs pass through (the other input wins; both NaN: canonical NaN); +0 > -0. */              \
    inline H __hmax(H a, H b) {                                                                   \
        if (__hisnan(a)) return __hisnan(b) ? __canonical_nan(a) : b;                             \
        if (__hisnan(b)) return a;                                                                \
        if (TOF(a) == TOF(b)) return (a.__x & 0x8000) ? b : a;                                    \
        return TOF(a) > TOF(b) ? a : b;                                                           \
    }                                                                                             \
    inline H __hmin(H a, H b) {                                                                   \
        if (__hisnan(a)) return __hisnan(b) ? __canonical_nan(a) : b;                             \
        if (__hisnan(b)) return a;                                                                \
        if (TOF(a) == TOF(b)) return (a.__x & 0x8000) ? a : b;                                    \
        return TOF(a) < TOF(b) ? a : b;                                                           \
    }                                                                                             \
    /* Either input NaN: canonical NaN. */                                                        \
    inline H __hmax_nan(H a, H b) { return __hisnan(a) || __hisnan(b) ? __canonical_nan(a) : __hmax(a, b); } \
    inline H __hmin_nan(H a, H b) { return __hisnan(a) || __hisnan(b) ? __canonical_nan(a) : __hmin(a, b); } \
    inline H operator+(const H& a, const H& b) { return __hadd(a, b); }                           \
    inline H operator-(const H& a, const H& b) { return __hsub(a, b); }                           \
    inline H operator*(const H& a, const H& b) { return __hmul(a, b); }                           \
    inline H operator/(const H& a, const H& b) { return __hdiv(a, b); }                           \
    inline H& operator+=(H& a, const H& b) { return a = __hadd(a, b); }                           \
    inline H& operator-=(H& a, const H& b) { return a = __hsub(a, b); }                           \
    inline H& operator*=(H& a, const H& b) { return a = __hmul(a, b); }                           \
    inline H& operator/=(H& a, const H& b) { return a = __hdiv(a, b); }                           \
    inline H operator+(const H& a) { return a; }                                                  \
    inline H operator-(const H& a) { return __hneg(a); }                                          \
    inline H& operator++(H& a) { return a = __hadd(a, H(1.0f)); }                                 \
    inline H& operator--(H& a) { return a = __hsub(a, H(1.0f)); }                                 \
    inline H operator++(H& a, int) { H r = a; ++a; return r; }                                    \
    inline H operator--(H& a, int) { H r = a; --a; return r; }                                    \
    inline bool operator==(const H& a, const H& b) { return __heq(a, b); }                        \
    inline bool operator!=(const H& a, const H& b) { return __hneu(a, b); }                       \
    inline bool operator<(const H& a, const H& b) { return __hlt(a, b); }                         \
    inline bool operator<=(const H& a, const H& b) { return __hle(a, b); }                        \
    inline bool operator>(const H& a, const H& b) { return __hgt(a, b); }                         \
    inline bool operator>=(const H& a, const H& b) { return __hge(a, b); }                        \
    inline H hsqrt(H a) { return H(std::sqrt(TOF(a))); }                                          \
    inline H hrsqrt(H a) { return H(1.0 / std::sqrt((double)TOF(a))); }                           \
    inline H hrcp(H a) { return H(1.0f / TOF(a)); }                                               \
    inline H hexp(H a) { return H(std::exp(TOF(a))); }                                            \
    inline H hexp2(H a) { return H(std::exp2(TOF(a))); }                                          \
    inline H hexp10(H a) { return H(::exp10f(TOF(a))); }                                          \
    inline H hlog(H a) { return H(std::log(TOF(a))); }                                            \
    inline H hlog2(H a) { return H(std::log2(TOF(a))); }                                          \
    inline H hlog10(H a) { return H(std::log10(TOF(a))); }                                        \
    inline H hsin(H a) { return H(std::sin(TOF(a))); }                                            \
    inline H hcos(H a) { return H(std::cos(TOF(a))); }                                            \
    inline H htanh(H a) { return H(std::tanh(TOF(a))); }                                          \
    inline H hceil(H a) { return H(std::ceil(TOF(a))); }                                          \
    inline H hfloor(H a) { return H(std::floor(TOF(a))); }                                        \
    inline H htrunc(H a) { return H(std::trunc(TOF(a))); }                                        \
    inline H hrint(H a) { return H(std::nearbyint(TOF(a))); }
RNN_EMU_HALF_MATH(__half, __half2float)
RNN_EMU_HALF_MATH(__nv_bfloat16, __bfloat162float)
#undef RNN_EMU_HALF_MATH

// Pairs.
inline __half2 __halves2half2(__half a, __half b) { return {a, b}; }
inline __half2 __float2half2_rn(float a) { return {__float2half(a), __float2half(a)}; }
inline __half2 __floats2half2_rn(float a, float b) { return {__float2half(a), __float2half(b)}; }
inline float2 __half22float2(__half2 h) { return {__half2float(h.x), __half2float(h.y)}; }
inline __half __low2half(__half2 h) { return h.x; }
inline __half __high2half(__half2 h) { return h.y; }
inline float __low2float(__half2 h) { return __half2float(h.x); }
inline float __high2float(__half2 h) { return __half2float(h.y); }
inline __nv_bfloat162 __halves2bfloat162(__nv_bfloat16 a, __nv_bfloat16 b) { return {a, b}; }
inline __nv_bfloat162 __float2bfloat162_rn(float a) { return {__float2bfloat16(a), __float2bfloat16(a)}; }
inline __nv_bfloat162 __floats2bfloat162_rn(float a, float b) { return {__float2bfloat16(a), __float2bfloat16(b)}; }
inline float2 __bfloat1622float2(__nv_bfloat162 h) { return {__bfloat162float(h.x), __bfloat162float(h.y)}; }
inline __nv_bfloat16 __low2bfloat16(__nv_bfloat162 h) { return h.x; }
inline __nv_bfloat16 __high2bfloat16(__nv_bfloat162 h) { return h.y; }
inline __half2 __hadd2(__half2 a, __half2 b) { return {__hadd(a.x, b.x), __hadd(a.y, b.y)}; }
inline __half2 __hmul2(__half2 a, __half2 b) { return {__hmul(a.x, b.x), __hmul(a.y, b.y)}; }
inline __nv_bfloat162 __hadd2(__nv_bfloat162 a, __nv_bfloat162 b) { return {__hadd(a.x, b.x), __hadd(a.y, b.y)}; }
inline __nv_bfloat162 __hmul2(__nv_bfloat162 a, __nv_bfloat162 b) { return {__hmul(a.x, b.x), __hmul(a.y, b.y)}; }

} // namespace

// ---------------------------------------------------------------------------------------
// Math with CUDA's (NVRTC's) overload set: glibc declares the C functions (double and the
// `f` forms); these add what CUDA adds in the global namespace. There is deliberately no
// std-style template for mixed arguments, so fmax(float, int) is the float fmax and
// exp(int) is ambiguous, as under NVRTC. These are `static` members of the global namespace
// itself (not of an unnamed one), so that a qualified ::exp(x) finds them too, as in CUDA.
// ---------------------------------------------------------------------------------------

#define RNN_EMU_F1(name) static inline float name(float x) { return ::name##f(x); }
RNN_EMU_F1(acos) RNN_EMU_F1(asin) RNN_EMU_F1(atan) RNN_EMU_F1(acosh) RNN_EMU_F1(asinh)
RNN_EMU_F1(atanh) RNN_EMU_F1(cos) RNN_EMU_F1(sin) RNN_EMU_F1(tan) RNN_EMU_F1(cosh)
RNN_EMU_F1(sinh) RNN_EMU_F1(tanh) RNN_EMU_F1(exp) RNN_EMU_F1(exp2) RNN_EMU_F1(expm1)
RNN_EMU_F1(exp10) RNN_EMU_F1(log) RNN_EMU_F1(log2) RNN_EMU_F1(log10) RNN_EMU_F1(log1p)
RNN_EMU_F1(logb) RNN_EMU_F1(sqrt) RNN_EMU_F1(cbrt) RNN_EMU_F1(erf) RNN_EMU_F1(erfc)
RNN_EMU_F1(lgamma) RNN_EMU_F1(tgamma) RNN_EMU_F1(ceil) RNN_EMU_F1(floor) RNN_EMU_F1(trunc)
RNN_EMU_F1(round) RNN_EMU_F1(rint) RNN_EMU_F1(nearbyint) RNN_EMU_F1(fabs)
#undef RNN_EMU_F1
#define RNN_EMU_F2(name) static inline float name(float a, float b) { return ::name##f(a, b); }
RNN_EMU_F2(atan2) RNN_EMU_F2(fmod) RNN_EMU_F2(remainder) RNN_EMU_F2(hypot) RNN_EMU_F2(fdim)
RNN_EMU_F2(fmax) RNN_EMU_F2(fmin) RNN_EMU_F2(copysign) RNN_EMU_F2(nextafter) RNN_EMU_F2(pow)
#undef RNN_EMU_F2
static inline float pow(float a, int b) { return ::powf(a, (float)b); }
static inline double pow(double a, int b) { return ::pow(a, (double)b); }
static inline float fma(float a, float b, float c) { return ::fmaf(a, b, c); }
static inline float ldexp(float a, int e) { return ::ldexpf(a, e); }
static inline float scalbn(float a, int e) { return ::scalbnf(a, e); }
static inline float scalbln(float a, long e) { return ::scalblnf(a, e); }
static inline float frexp(float a, int* e) { return ::frexpf(a, e); }
static inline float modf(float a, float* i) { return ::modff(a, i); }
static inline float remquo(float a, float b, int* q) { return ::remquof(a, b, q); }
static inline int ilogb(float a) { return ::ilogbf(a); }
static inline long lround(float a) { return ::lroundf(a); }
static inline long long llround(float a) { return ::llroundf(a); }
static inline long lrint(float a) { return ::lrintf(a); }
static inline long long llrint(float a) { return ::llrintf(a); }
static inline double copysign(double a, float b) { return ::copysign(a, (double)b); }
static inline double copysign(float a, double b) { return ::copysign((double)a, b); }
static inline void sincos(float a, float* s, float* c) { ::sincosf(a, s, c); }
static inline float abs(float a) { return ::fabsf(a); }
static inline double abs(double a) { return ::fabs(a); }
static inline long abs(long a) { return ::labs(a); }
static inline long long abs(long long a) { return ::llabs(a); }
// Classification (glibc's C++ mode leaves these to std::; CUDA declares them globally).
#define RNN_EMU_CLASSIFY(name, builtin) \
    static inline int name(float x) { return builtin(x); } \
    static inline int name(double x) { return builtin(x); } \
    static inline int name(long double x) { return builtin(x); }
RNN_EMU_CLASSIFY(isnan, __builtin_isnan) RNN_EMU_CLASSIFY(isinf, __builtin_isinf)
RNN_EMU_CLASSIFY(isfinite, __builtin_isfinite) RNN_EMU_CLASSIFY(signbit, __builtin_signbit)
#undef RNN_EMU_CLASSIFY

// CUDA-only functions. The `template <class = void>` forms lose to a C library function of
// the same signature, so a libc that adds e.g. C23's rsqrt does not make calls ambiguous.
static inline double rnn_erfinv_core(double t);
template <class = void> static inline double rsqrt(double x) { return 1.0 / ::sqrt(x); }
template <class = void> static inline float rsqrtf(float x) { return (float)(1.0 / ::sqrt((double)x)); }
static inline float rsqrt(float x) { return rsqrtf(x); }
template <class = void> static inline double rcbrt(double x) { return 1.0 / ::cbrt(x); }
template <class = void> static inline float rcbrtf(float x) { return (float)(1.0 / ::cbrt((double)x)); }
static inline float rcbrt(float x) { return rcbrtf(x); }
// sin(pi x) on x mod 2 in [-1, 1], folded to [-0.5, 0.5] (exact steps), so that integers
// give zeros and half-integers +-1 exactly, as CUDA's do; cos(pi x) = sin(pi (0.5 - |x|)).
template <class = void> static inline double sinpi(double x) {
    double r = ::remainder(x, 2.0);
    if (::fabs(r) > 0.5) r = ::copysign(1.0, r) - r;
    return ::sin(M_PI * r);
}
template <class = void> static inline double cospi(double x) {
    if (::isinf(x)) return NAN;
    return sinpi(0.5 - ::fabs(::remainder(x, 2.0)));
}
template <class = void> static inline float sinpif(float x) { return (float)sinpi((double)x); }
template <class = void> static inline float cospif(float x) { return (float)cospi((double)x); }
static inline float sinpi(float x) { return sinpif(x); }
static inline float cospi(float x) { return cospif(x); }
template <class = void> static inline void sincospi(double x, double* s, double* c) { *s = sinpi(x); *c = cospi(x); }
template <class = void> static inline void sincospif(float x, float* s, float* c) { *s = sinpif(x); *c = cospif(x); }
static inline void sincospi(float x, float* s, float* c) { sincospif(x, s, c); }
template <class = void> static inline double normcdf(double x) { return 0.5 * ::erfc(-x * M_SQRT1_2); }
template <class = void> static inline float normcdff(float x) { return (float)normcdf((double)x); }
static inline float normcdf(float x) { return normcdff(x); }
// z with erf(z) = x, through erfc near +-1 so that no precision is lost there.
template <class = void> static inline double erfinv(double x) {
    if (!(x > -1.0 && x < 1.0)) return x == 1.0 ? HUGE_VAL : x == -1.0 ? -HUGE_VAL : NAN;
    const double a = ::fabs(x);
    return ::copysign(a < 0.5 ? rnn_erfinv_core(-a) : rnn_erfinv_core(1.0 - a), x);
}
template <class = void> static inline double erfcinv(double t) {
    if (!(t > 0.0 && t < 2.0)) return t == 0.0 ? HUGE_VAL : t == 2.0 ? -HUGE_VAL : NAN;
    if (t > 1.0) return -erfcinv(2.0 - t);            // 2 - t is exact here
    return t > 0.5 ? rnn_erfinv_core(-(1.0 - t)) : rnn_erfinv_core(t);
}
template <class = void> static inline float erfinvf(float x) { return (float)erfinv((double)x); }
template <class = void> static inline float erfcinvf(float x) { return (float)erfcinv((double)x); }
static inline float erfinv(float x) { return erfinvf(x); }
static inline float erfcinv(float x) { return erfcinvf(x); }
template <class = void> static inline double normcdfinv(double p) { return -M_SQRT2 * erfcinv(2.0 * p); }
template <class = void> static inline float normcdfinvf(float p) { return (float)normcdfinv((double)p); }
static inline float normcdfinv(float p) { return normcdfinvf(p); }
// Negative v: erfinv(-v) for |v| < 0.5 (Newton on erf). Else v = erfc(z) in (0, 0.5]
// (Newton on erfc). Giles' single-precision approximation starts both.
static inline double rnn_erfinv_core(double v) {
    const bool small = v <= 0.0;
    const double x = small ? -v : 1.0 - v, t = small ? 1.0 - x : v;
    double w = -::log(t * (2.0 - t)), p;
    if (w < 5.0) {
        w -= 2.5;
        p = 2.81022636e-08; p = 3.43273939e-07 + p * w; p = -3.5233877e-06 + p * w;
        p = -4.39150654e-06 + p * w; p = 0.00021858087 + p * w; p = -0.00125372503 + p * w;
        p = -0.00417768164 + p * w; p = 0.246640727 + p * w; p = 1.50140941 + p * w;
    } else {
        w = ::sqrt(w) - 3.0;
        p = -0.000200214257; p = 0.000100950558 + p * w; p = 0.00134934322 + p * w;
        p = -0.00367342844 + p * w; p = 0.00573950773 + p * w; p = -0.0076224613 + p * w;
        p = 0.00943887047 + p * w; p = 1.00167406 + p * w; p = 2.83297682 + p * w;
    }
    double z = p * x;
    for (int i = 0; i < 3; ++i) {
        const double slope = 1.1283791670955126 * ::exp(-z * z); // d erf / dz
        if (slope == 0.0) break;
        z += small ? (x - ::erf(z)) / slope : (::erfc(z) - t) / slope;
    }
    return z;
}

// min / max as CUDA declares them (integers of every width, mixed signedness, floats).
#define RNN_EMU_MINMAX(R, A, B)                                             \
    static inline R min(A a, B b) { return (R)a < (R)b ? (R)a : (R)b; }            \
    static inline R max(A a, B b) { return (R)a > (R)b ? (R)a : (R)b; }
RNN_EMU_MINMAX(int, int, int)
RNN_EMU_MINMAX(unsigned int, unsigned int, unsigned int)
RNN_EMU_MINMAX(unsigned int, int, unsigned int)
RNN_EMU_MINMAX(unsigned int, unsigned int, int)
RNN_EMU_MINMAX(long, long, long)
RNN_EMU_MINMAX(unsigned long, unsigned long, unsigned long)
RNN_EMU_MINMAX(unsigned long, long, unsigned long)
RNN_EMU_MINMAX(unsigned long, unsigned long, long)
RNN_EMU_MINMAX(long long, long long, long long)
RNN_EMU_MINMAX(unsigned long long, unsigned long long, unsigned long long)
RNN_EMU_MINMAX(unsigned long long, long long, unsigned long long)
RNN_EMU_MINMAX(unsigned long long, unsigned long long, long long)
#undef RNN_EMU_MINMAX
static inline float min(float a, float b) { return ::fminf(a, b); }
static inline float max(float a, float b) { return ::fmaxf(a, b); }
static inline double min(double a, double b) { return ::fmin(a, b); }
static inline double max(double a, double b) { return ::fmax(a, b); }
static inline double min(float a, double b) { return ::fmin((double)a, b); }
static inline double max(float a, double b) { return ::fmax((double)a, b); }
static inline double min(double a, float b) { return ::fmin(a, (double)b); }
static inline double max(double a, float b) { return ::fmax(a, (double)b); }
static inline unsigned umin(unsigned a, unsigned b) { return a < b ? a : b; }
static inline unsigned umax(unsigned a, unsigned b) { return a > b ? a : b; }
static inline long long llmin(long long a, long long b) { return a < b ? a : b; }
static inline long long llmax(long long a, long long b) { return a > b ? a : b; }
static inline unsigned long long ullmin(unsigned long long a, unsigned long long b) { return a < b ? a : b; }
static inline unsigned long long ullmax(unsigned long long a, unsigned long long b) { return a > b ? a : b; }

// Fast intrinsics, here the accurate glibc functions. glibc's <math.h> itself declares
// (without exporting) __expf, __logf, __sinf ...; these macros route CUDA's names to our
// own functions instead (every system header is included above, so none sees them).
static inline float rnn_emu_expf(float x) { return ::expf(x); }
static inline float rnn_emu_exp10f(float x) { return ::exp10f(x); }
static inline float rnn_emu_logf(float x) { return ::logf(x); }
static inline float rnn_emu_log2f(float x) { return ::log2f(x); }
static inline float rnn_emu_log10f(float x) { return ::log10f(x); }
static inline float rnn_emu_sinf(float x) { return ::sinf(x); }
static inline float rnn_emu_cosf(float x) { return ::cosf(x); }
static inline float rnn_emu_tanf(float x) { return ::tanf(x); }
static inline void rnn_emu_sincosf(float x, float* s, float* c) { ::sincosf(x, s, c); }
static inline float rnn_emu_powf(float a, float b) { return ::powf(a, b); }
#define __expf rnn_emu_expf
#define __exp10f rnn_emu_exp10f
#define __logf rnn_emu_logf
#define __log2f rnn_emu_log2f
#define __log10f rnn_emu_log10f
#define __sinf rnn_emu_sinf
#define __cosf rnn_emu_cosf
#define __tanf rnn_emu_tanf
#define __sincosf rnn_emu_sincosf
#define __powf rnn_emu_powf
static inline float __fdividef(float a, float b) { return a / b; }
static inline float __saturatef(float x) { return x >= 1.0f ? 1.0f : x > 0.0f ? x : 0.0f; } // NaN -> 0
static inline float __fadd_rn(float a, float b) { return a + b; }
static inline float __fsub_rn(float a, float b) { return a - b; }
static inline float __fmul_rn(float a, float b) { return a * b; }
static inline float __fdiv_rn(float a, float b) { return a / b; }
static inline float __frcp_rn(float a) { return 1.0f / a; }
static inline float __fsqrt_rn(float a) { return ::sqrtf(a); }
static inline float __frsqrt_rn(float a) { return rsqrtf(a); }
static inline float __fmaf_rn(float a, float b, float c) { return ::fmaf(a, b, c); }
static inline double __dadd_rn(double a, double b) { return a + b; }
static inline double __dsub_rn(double a, double b) { return a - b; }
static inline double __dmul_rn(double a, double b) { return a * b; }
static inline double __ddiv_rn(double a, double b) { return a / b; }
static inline double __drcp_rn(double a) { return 1.0 / a; }
static inline double __dsqrt_rn(double a) { return ::sqrt(a); }
static inline double __fma_rn(double a, double b, double c) { return ::fma(a, b, c); }

namespace {

// Float <-> integer conversions with explicit rounding: NaN -> 0, saturating.
#define RNN_EMU_F2I(F, P, I)                                                                  \
    inline I __##F##2##P##_rn(F x) { return rnn_emu::fp::to_int<I>(std::nearbyint((double)x)); } \
    inline I __##F##2##P##_rz(F x) { return rnn_emu::fp::to_int<I>(std::trunc((double)x)); }     \
    inline I __##F##2##P##_ru(F x) { return rnn_emu::fp::to_int<I>(std::ceil((double)x)); }      \
    inline I __##F##2##P##_rd(F x) { return rnn_emu::fp::to_int<I>(std::floor((double)x)); }
RNN_EMU_F2I(float, int, int) RNN_EMU_F2I(float, uint, unsigned int)
RNN_EMU_F2I(float, ll, long long) RNN_EMU_F2I(float, ull, unsigned long long)
RNN_EMU_F2I(double, int, int) RNN_EMU_F2I(double, uint, unsigned int)
RNN_EMU_F2I(double, ll, long long) RNN_EMU_F2I(double, ull, unsigned long long)
#undef RNN_EMU_F2I
// The host's int -> float conversions round once to nearest even (SSE / AArch64 FPU).
inline float __int2float_rn(int v) { return (float)v; }
inline float __uint2float_rn(unsigned v) { return (float)v; }
inline float __ll2float_rn(long long v) { return (float)v; }
inline float __ull2float_rn(unsigned long long v) { return (float)v; }
inline double __int2double_rn(int v) { return (double)v; }
inline double __uint2double_rn(unsigned v) { return (double)v; }
inline double __ll2double_rn(long long v) { return (double)v; }
inline double __ull2double_rn(unsigned long long v) { return (double)v; }
inline float __double2float_rn(double v) { return (float)v; }

// Bit casts.
template <class To, class From> inline To rnn_bit_cast(From v) {
    static_assert(sizeof(To) == sizeof(From), "bit cast");
    To r;
    std::memcpy(&r, &v, sizeof r);
    return r;
}
inline float __int_as_float(int v) { return rnn_bit_cast<float>(v); }
inline int __float_as_int(float v) { return rnn_bit_cast<int>(v); }
inline float __uint_as_float(unsigned v) { return rnn_bit_cast<float>(v); }
inline unsigned __float_as_uint(float v) { return rnn_bit_cast<unsigned>(v); }
inline double __longlong_as_double(long long v) { return rnn_bit_cast<double>(v); }
inline long long __double_as_longlong(double v) { return rnn_bit_cast<long long>(v); }
inline int __double2hiint(double v) { return (int)(rnn_bit_cast<unsigned long long>(v) >> 32); }
inline int __double2loint(double v) { return (int)rnn_bit_cast<unsigned long long>(v); }
inline double __hiloint2double(int hi, int lo) {
    return rnn_bit_cast<double>(((unsigned long long)(unsigned)hi << 32) | (unsigned)lo);
}

// Integer intrinsics.
inline int __popc(unsigned x) { return __builtin_popcount(x); }
inline int __popcll(unsigned long long x) { return __builtin_popcountll(x); }
inline int __clz(int x) { return x ? __builtin_clz((unsigned)x) : 32; }
inline int __clzll(long long x) { return x ? __builtin_clzll((unsigned long long)x) : 64; }
inline int __ffs(int x) { return __builtin_ffs(x); }
inline int __ffsll(long long x) { return __builtin_ffsll(x); }
inline unsigned __brev(unsigned x) {
    x = ((x >> 1) & 0x55555555u) | ((x & 0x55555555u) << 1);
    x = ((x >> 2) & 0x33333333u) | ((x & 0x33333333u) << 2);
    x = ((x >> 4) & 0x0f0f0f0fu) | ((x & 0x0f0f0f0fu) << 4);
    return __builtin_bswap32(x);
}
inline unsigned long long __brevll(unsigned long long x) {
    return ((unsigned long long)__brev((unsigned)x) << 32) | __brev((unsigned)(x >> 32));
}
inline int __mulhi(int a, int b) { return (int)(((long long)a * b) >> 32); }
inline unsigned __umulhi(unsigned a, unsigned b) { return (unsigned)(((unsigned long long)a * b) >> 32); }
__extension__ typedef __int128 rnn_i128;
__extension__ typedef unsigned __int128 rnn_u128;
inline long long __mul64hi(long long a, long long b) { return (long long)(((rnn_i128)a * b) >> 64); }
inline unsigned long long __umul64hi(unsigned long long a, unsigned long long b) {
    return (unsigned long long)(((rnn_u128)a * b) >> 64);
}
inline int __mul24(int a, int b) { return (int)((long long)((a << 8) >> 8) * ((b << 8) >> 8)); }
inline unsigned __umul24(unsigned a, unsigned b) { return (a & 0xffffffu) * (b & 0xffffffu); }
inline int __hadd(int a, int b) { return (int)(((long long)a + b) >> 1); }
inline int __rhadd(int a, int b) { return (int)(((long long)a + b + 1) >> 1); }
inline unsigned __uhadd(unsigned a, unsigned b) { return (unsigned)(((unsigned long long)a + b) >> 1); }
inline unsigned __urhadd(unsigned a, unsigned b) { return (unsigned)(((unsigned long long)a + b + 1) >> 1); }
inline unsigned __sad(int a, int b, unsigned c) { return (a > b ? (unsigned)a - (unsigned)b : (unsigned)b - (unsigned)a) + c; }
inline unsigned __usad(unsigned a, unsigned b, unsigned c) { return (a > b ? a - b : b - a) + c; }
inline unsigned __byte_perm(unsigned x, unsigned y, unsigned s) {
    const unsigned long long v = ((unsigned long long)y << 32) | x;
    unsigned r = 0;
    for (int i = 0; i < 4; ++i) r |= (unsigned)((v >> (((s >> (4 * i)) & 7) * 8)) & 0xff) << (8 * i);
    return r;
}
inline unsigned __funnelshift_l(unsigned lo, unsigned hi, unsigned s) {
    return (unsigned)(((((unsigned long long)hi << 32) | lo) << (s & 31)) >> 32);
}
inline unsigned __funnelshift_lc(unsigned lo, unsigned hi, unsigned s) {
    return (unsigned)(((((unsigned long long)hi << 32) | lo) << (s < 32 ? s : 32)) >> 32);
}
inline unsigned __funnelshift_r(unsigned lo, unsigned hi, unsigned s) {
    return (unsigned)((((unsigned long long)hi << 32) | lo) >> (s & 31));
}
inline unsigned __funnelshift_rc(unsigned lo, unsigned hi, unsigned s) {
    return (unsigned)((((unsigned long long)hi << 32) | lo) >> (s < 32 ? s : 32));
}

// Loads and stores with cache hints are plain accesses.
template <class T> inline T __ldg(const T* p) { return *p; }
template <class T> inline T __ldcg(const T* p) { return *p; }
template <class T> inline T __ldca(const T* p) { return *p; }
template <class T> inline T __ldcs(const T* p) { return *p; }
template <class T> inline T __ldlu(const T* p) { return *p; }
template <class T> inline T __ldcv(const T* p) { return *p; }
template <class T> inline void __stwb(T* p, T v) { *p = v; }
template <class T> inline void __stcg(T* p, T v) { *p = v; }
template <class T> inline void __stcs(T* p, T v) { *p = v; }
template <class T> inline void __stwt(T* p, T v) { *p = v; }

inline long long clock64() {
    timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (long long)t.tv_sec * 1000000000ll + t.tv_nsec;
}

// ---------------------------------------------------------------------------------------
// Atomics: relaxed, like CUDA's (fences are separate); lock-free for 2, 4 and 8 bytes.
// ---------------------------------------------------------------------------------------

template <class T, class F> inline T rnn_atomic_update(T* p, F f) {
    static_assert(__atomic_always_lock_free(sizeof(T), 0), "lock-free atomic of this size");
    T old, want;
    __atomic_load(p, &old, __ATOMIC_RELAXED);
    do {
        want = f(old);
    } while (!__atomic_compare_exchange(p, &old, &want, false, __ATOMIC_RELAXED, __ATOMIC_RELAXED));
    return old;
}

#define RNN_EMU_FETCH(name, op, T) \
    inline T name(T* p, T v) { return __atomic_fetch_##op(p, v, __ATOMIC_RELAXED); }
RNN_EMU_FETCH(atomicAdd, add, int) RNN_EMU_FETCH(atomicAdd, add, unsigned int)
RNN_EMU_FETCH(atomicAdd, add, unsigned long long)
RNN_EMU_FETCH(atomicSub, sub, int) RNN_EMU_FETCH(atomicSub, sub, unsigned int)
RNN_EMU_FETCH(atomicAnd, and, int) RNN_EMU_FETCH(atomicAnd, and, unsigned int)
RNN_EMU_FETCH(atomicAnd, and, unsigned long long)
RNN_EMU_FETCH(atomicOr, or, int) RNN_EMU_FETCH(atomicOr, or, unsigned int)
RNN_EMU_FETCH(atomicOr, or, unsigned long long)
RNN_EMU_FETCH(atomicXor, xor, int) RNN_EMU_FETCH(atomicXor, xor, unsigned int)
RNN_EMU_FETCH(atomicXor, xor, unsigned long long)
#undef RNN_EMU_FETCH
#define RNN_EMU_EXCH(T) \
    inline T atomicExch(T* p, T v) { T old; __atomic_exchange(p, &v, &old, __ATOMIC_RELAXED); return old; }
RNN_EMU_EXCH(int) RNN_EMU_EXCH(unsigned int) RNN_EMU_EXCH(unsigned long long) RNN_EMU_EXCH(float)
#undef RNN_EMU_EXCH
#define RNN_EMU_CAS(T)                                                                            \
    inline T atomicCAS(T* p, T compare, T val) {                                                  \
        __atomic_compare_exchange(p, &compare, &val, false, __ATOMIC_RELAXED, __ATOMIC_RELAXED);   \
        return compare; /* the old value, whether or not it matched */                           \
    }
RNN_EMU_CAS(int) RNN_EMU_CAS(unsigned int) RNN_EMU_CAS(unsigned long long) RNN_EMU_CAS(unsigned short)
#undef RNN_EMU_CAS
#define RNN_EMU_MINMAX_ATOMIC(T)                                                                 \
    inline T atomicMin(T* p, T v) { return rnn_atomic_update(p, [v](T o) { return v < o ? v : o; }); } \
    inline T atomicMax(T* p, T v) { return rnn_atomic_update(p, [v](T o) { return v > o ? v : o; }); }
RNN_EMU_MINMAX_ATOMIC(int) RNN_EMU_MINMAX_ATOMIC(unsigned int)
RNN_EMU_MINMAX_ATOMIC(unsigned long long) RNN_EMU_MINMAX_ATOMIC(long long)
#undef RNN_EMU_MINMAX_ATOMIC
inline unsigned atomicInc(unsigned* p, unsigned v) {
    return rnn_atomic_update(p, [v](unsigned o) { return o >= v ? 0u : o + 1; });
}
inline unsigned atomicDec(unsigned* p, unsigned v) {
    return rnn_atomic_update(p, [v](unsigned o) { return o == 0 || o > v ? v : o - 1; });
}
// Float adds: a compare-exchange loop on the value's own bytes (2, 4 or 8), so each add is
// the ordinary IEEE add rounded once (16-bit: added in float, rounded once, as CUDA).
inline float atomicAdd(float* p, float v) { return rnn_atomic_update(p, [v](float o) { return o + v; }); }
inline double atomicAdd(double* p, double v) { return rnn_atomic_update(p, [v](double o) { return o + v; }); }
inline __half atomicAdd(__half* p, __half v) { return rnn_atomic_update(p, [v](__half o) { return __hadd(o, v); }); }
inline __nv_bfloat16 atomicAdd(__nv_bfloat16* p, __nv_bfloat16 v) {
    return rnn_atomic_update(p, [v](__nv_bfloat16 o) { return __hadd(o, v); });
}
// The pair forms are atomic per 32-bit word, as on the GPU.
inline __half2 atomicAdd(__half2* p, __half2 v) { return rnn_atomic_update(p, [v](__half2 o) { return __hadd2(o, v); }); }
inline __nv_bfloat162 atomicAdd(__nv_bfloat162* p, __nv_bfloat162 v) {
    return rnn_atomic_update(p, [v](__nv_bfloat162 o) { return __hadd2(o, v); });
}
// Scope variants (_block, _system) behave as the device-wide ones.
#define RNN_EMU_SCOPED(name)                                                                    \
    template <class... A> inline auto name##_block(A... a) -> decltype(name(a...)) { return name(a...); } \
    template <class... A> inline auto name##_system(A... a) -> decltype(name(a...)) { return name(a...); }
RNN_EMU_SCOPED(atomicAdd) RNN_EMU_SCOPED(atomicSub) RNN_EMU_SCOPED(atomicExch) RNN_EMU_SCOPED(atomicMin)
RNN_EMU_SCOPED(atomicMax) RNN_EMU_SCOPED(atomicInc) RNN_EMU_SCOPED(atomicDec) RNN_EMU_SCOPED(atomicCAS)
RNN_EMU_SCOPED(atomicAnd) RNN_EMU_SCOPED(atomicOr) RNN_EMU_SCOPED(atomicXor)
#undef RNN_EMU_SCOPED

inline void __threadfence() { __atomic_thread_fence(__ATOMIC_SEQ_CST); }
inline void __threadfence_block() { __atomic_thread_fence(__ATOMIC_SEQ_CST); }
inline void __threadfence_system() { __atomic_thread_fence(__ATOMIC_SEQ_CST); }

} // namespace


// ---------------------------------------------------------------------------------------
// The runtime: blocks on OS threads, the threads of a block as fibers on one OS thread.
// ---------------------------------------------------------------------------------------
namespace rnn_emu {

struct LaunchDims {
    unsigned grid[3];
    unsigned block[3];
    unsigned shared_bytes;
    unsigned os_threads;
};

namespace {

constexpr unsigned kMaxThreads = 1024;
constexpr unsigned kMaxSharedBytes = 227 * 1024; // sm_90's opt-in limit per block

// printf into a fixed buffer.
struct Msg {
    char s[640];
    Msg() { s[0] = 0; }
    __attribute__((format(printf, 2, 3))) void set(const char* f, ...) {
        va_list a;
        va_start(a, f);
        vsnprintf(s, sizeof s, f, a);
        va_end(a);
    }
    bool empty() const { return s[0] == 0; }
};

struct Tid { // "(x,y,z)" of an index, for messages
    char s[40];
    explicit Tid(uint3 v) { snprintf(s, sizeof s, "(%u,%u,%u)", v.x, v.y, v.z); }
};

// --- Fiber stacks: mmap'd with a guard page, pooled across launches, freed at unload. ---

struct StackPool {
    pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
    void* head = nullptr; // free stacks, linked through their first word
    unsigned count = 0;
    static size_t page() { return (size_t)sysconf(_SC_PAGESIZE); }
    char* get() {
        pthread_mutex_lock(&mu);
        char* s = (char*)head;
        if (s) head = *(void**)s, --count;
        pthread_mutex_unlock(&mu);
        if (s) return s;
        void* m = mmap(nullptr, page() + RNN_EMU_STACK_BYTES, PROT_READ | PROT_WRITE,
                       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_STACK, -1, 0);
        if (m == MAP_FAILED) return nullptr;
        mprotect(m, page(), PROT_NONE); // guard page below the stack
        return (char*)m + page();
    }
    void put(char* s) {
        pthread_mutex_lock(&mu);
        const bool keep = count < 4096;
        if (keep) *(void**)s = head, head = s, ++count;
        pthread_mutex_unlock(&mu);
        if (!keep) munmap(s - page(), page() + RNN_EMU_STACK_BYTES);
    }
    ~StackPool() {
        while (head) {
            char* s = (char*)head;
            head = *(void**)s;
            munmap(s - page(), page() + RNN_EMU_STACK_BYTES);
        }
    }
};
StackPool g_stacks;

// --- Context switches. ---
//
// glibc's swapcontext makes a system call (sigprocmask) per switch, about 0.3 us, which
// dominates kernels that synchronize often. On x86-64 a 20-instruction switch of the
// callee-saved registers is used instead, except in sanitizer builds (ASan / TSan intercept
// swapcontext) and under CET shadow stacks; RNN_EMU_UCONTEXT forces ucontext.
#if !defined(RNN_EMU_UCONTEXT) && defined(__x86_64__) && !defined(__SANITIZE_ADDRESS__) && \
    !defined(__SANITIZE_THREAD__) && !(defined(__CET__) && (__CET__ & 2))
#define RNN_EMU_FAST_SWITCH 1
struct Ctx {
    void* sp; // the saved stack pointer; the registers are on that stack
};
// Pushes rbp, rbx, r12-r15 and the MXCSR / x87 control words (the SysV callee-saved state)
// on the current stack, saves its pointer in *save, then does the reverse from `load`.
__attribute__((naked, noinline)) void ctx_switch(void** /*save*/, void* /*load*/) {
    __asm__ volatile(
        "pushq %rbp\n\tpushq %rbx\n\tpushq %r12\n\tpushq %r13\n\tpushq %r14\n\tpushq %r15\n\t"
        "subq $8, %rsp\n\tstmxcsr (%rsp)\n\tfnstcw 4(%rsp)\n\t"
        "movq %rsp, (%rdi)\n\tmovq %rsi, %rsp\n\t"
        "ldmxcsr (%rsp)\n\tfldcw 4(%rsp)\n\taddq $8, %rsp\n\t"
        "popq %r15\n\tpopq %r14\n\tpopq %r13\n\tpopq %r12\n\tpopq %rbx\n\tpopq %rbp\n\t"
        "ret\n\t");
}
inline void switch_ctx(Ctx* save, Ctx* load) { ctx_switch(&save->sp, load->sp); }
// A context that starts `entry` on the stack [stack, stack + bytes): the frame ctx_switch pops.
inline void make_ctx(Ctx* c, char* stack, size_t bytes, void (*entry)(), Ctx*) {
    void** sp = (void**)(((uintptr_t)stack + bytes) & ~(uintptr_t)15);
    *--sp = nullptr;                            // entry's return address: it never returns
    *--sp = reinterpret_cast<void*>(entry);     // ctx_switch's `ret` goes here
    for (int i = 0; i < 6; ++i) *--sp = nullptr; // rbp rbx r12 r13 r14 r15
    unsigned short fcw;
    __asm__ volatile("fnstcw %0" : "=m"(fcw));
    uint64_t control = (uint64_t)__builtin_ia32_stmxcsr() | (uint64_t)fcw << 32;
    *--sp = reinterpret_cast<void*>(control);
    c->sp = sp;
}
#else
#define RNN_EMU_FAST_SWITCH 0
struct Ctx {
    ucontext_t uc;
};
inline void switch_ctx(Ctx* save, Ctx* load) { swapcontext(&save->uc, &load->uc); }
// Kept out of line: GCC treats getcontext like setjmp (returns twice) for its caller.
__attribute__((noinline)) void make_ctx(Ctx* c, char* stack, size_t bytes, void (*entry)(), Ctx* link) {
    getcontext(&c->uc);
    c->uc.uc_stack.ss_sp = stack;
    c->uc.uc_stack.ss_size = bytes;
    c->uc.uc_link = &link->uc; // not reached: entry never returns
    makecontext(&c->uc, entry, 0);
}
#endif

struct Fiber {
    Ctx ctx;
    char* stack;
};

// --- Emulated threads and what they wait for. ---

enum class St : unsigned char { Unstarted, Running, Ready, Barrier, Warp, Done };

enum Kind : unsigned char {
    kShfl, kShflUp, kShflDown, kShflXor, kBallot, kAny, kAll, kSyncwarp, kRedAdd, kRedMin,
    kRedMax, kRedUmin, kRedUmax, kRedAnd, kRedOr, kRedXor, kMatchAny, kMatchAll
};
const char* const kKindName[] = {
    "__shfl_sync", "__shfl_up_sync", "__shfl_down_sync", "__shfl_xor_sync", "__ballot_sync",
    "__any_sync", "__all_sync", "__syncwarp", "__reduce_add_sync", "__reduce_min_sync",
    "__reduce_max_sync", "__reduce_min_sync", "__reduce_max_sync", "__reduce_and_sync",
    "__reduce_or_sync", "__reduce_xor_sync", "__match_any_sync", "__match_all_sync"};

struct Op { // what a lane brings to a warp collective, and what it gets back
    Kind kind;
    unsigned size; // bytes of `value` (shuffles, match)
    unsigned mask;
    int width;
    long long arg; // srcLane / delta / laneMask
    uint64_t value;
    uint64_t result;
};

struct Thread {
    St st;
    uint3 idx;
    Fiber* fiber; // from start to exit
    Op op;
};

// The kernel with its arguments bound: `invoke(call)` runs it for the current thread.
struct Kernel {
    void (*invoke)(const void*);
    const void* call;
};

struct Worker;
thread_local Worker* tl_worker; // the worker running on this OS thread, if any
void fiber_main();

// One OS thread's state: runs blocks one at a time; each thread of the block runs on a
// fiber until it exits (then that fiber starts the next unstarted thread) or waits at a
// barrier / warp collective (then the fiber stays with it and the scheduler moves on).
// The last thread to arrive completes a barrier or collective and marks the others Ready.
struct Worker {
    Kernel kernel;
    unsigned n = 0;           // threads per block
    char* dynamic_shared = nullptr;
    Thread th[kMaxThreads];
    unsigned next = 0, done = 0;                 // next thread to start, threads exited
    unsigned at_barrier = 0, bar_count = 0, bar_result = 0;
    unsigned ready[kMaxThreads], ready_head = 0, ready_len = 0;
    Fiber* fibers[kMaxThreads];
    Fiber* idle[kMaxThreads];
    unsigned n_fibers = 0, n_idle = 0;
    Thread* cur = nullptr;     // the running thread
    Fiber* cur_fiber = nullptr;
    bool went_idle = false;    // the fiber that switched back has no thread left to start
    Ctx sched;                 // the scheduler's context (this OS thread's own stack)
    Msg error;

    unsigned lin(const Thread& t) const { return (unsigned)(&t - th); }

    void enter(Thread& t) {
        cur = &t;
        threadIdx = t.idx;
    }

    // Abandons the running thread's fiber and returns to the scheduler with an error.
    __attribute__((noreturn)) void fail() {
        switch_ctx(&cur_fiber->ctx, &sched);
        __builtin_unreachable(); // a failed block's fibers are never resumed
    }

    void suspend(Thread& t, St why) {
        t.st = why;
        switch_ctx(&t.fiber->ctx, &sched);
        enter(t); // resumed by the scheduler
    }

    void make_ready(unsigned i) {
        th[i].st = St::Ready;
        ready[(ready_head + ready_len++) % kMaxThreads] = i;
    }

    int barrier(int pred) {
        Thread& t = *cur;
        bar_count += pred != 0;
        if (++at_barrier < n) {
            suspend(t, St::Barrier);
            return (int)bar_result;
        }
        // Last to arrive: release everyone. The result stays until the next barrier
        // completes, which needs every thread, so all have read it by then.
        bar_result = bar_count;
        bar_count = at_barrier = 0;
        for (unsigned i = 0; i < n; ++i)
            if (th[i].st == St::Barrier) make_ready(i);
        return (int)bar_result;
    }

    void yield() {
        Thread& t = *cur;
        make_ready(lin(t));
        suspend(t, St::Ready);
    }

    unsigned warp_exists(unsigned base) const { // lanes of the warp at `base` that exist
        const unsigned live = n - base < 32 ? n - base : 32;
        return live == 32 ? ~0u : (1u << live) - 1;
    }

    unsigned active_mask() {
        const unsigned base = lin(*cur) & ~31u;
        unsigned m = 0;
        for (unsigned l = 0; l < 32 && base + l < n; ++l)
            if (th[base + l].st != St::Done) m |= 1u << l;
        return m;
    }

    uint64_t warp_op(Kind kind, unsigned mask, uint64_t value, unsigned size, long long arg, int width) {
        Thread& t = *cur;
        const unsigned i = lin(t), base = i & ~31u, lane = i & 31u;
        if (!(mask >> lane & 1)) {
            error.set("thread %s (warp %u, lane %u) calls %s with mask 0x%08x, which does not name its own lane",
                      Tid(t.idx).s, i / 32, lane, kKindName[kind], mask);
            fail();
        }
        t.op = Op{kind, size, mask, width, arg, value, 0};
        const unsigned group = mask & warp_exists(base);
        for (unsigned m = group & ~(1u << lane); m; m &= m - 1) {
            const Thread& u = th[base + __builtin_ctz(m)];
            if (u.st != St::Warp || u.op.mask != mask) { // someone has not arrived yet
                suspend(t, St::Warp);
                return t.op.result;
            }
        }
        complete_warp(base, group, lane);
        return t.op.result;
    }

    // The lane whose value lane `l` reads in a shuffle, or -1 for an invalid width.
    static int shfl_source(const Op& op, unsigned l) {
        const unsigned w = (unsigned)op.width;
        if (op.width < 1 || op.width > 32 || (w & (w - 1))) return -1;
        const unsigned seg = l & ~(w - 1), pos = l & (w - 1);
        const unsigned long long d = (unsigned long long)op.arg;
        switch (op.kind) {
        case kShfl: return (int)(seg + ((unsigned)op.arg & (w - 1)));
        case kShflUp: return d > pos ? (int)l : (int)(l - d);
        case kShflDown: return pos + d >= w ? (int)l : (int)(l + d);
        default: { // xor: lanes may read earlier segments, not later ones
            const unsigned long long s = l ^ (unsigned)op.arg;
            return s >= seg + w ? (int)l : (int)s;
        }
        }
    }

    void complete_warp(unsigned base, unsigned group, unsigned self) {
        Thread* lanes = th + base;
        const Op& first = lanes[self].op;
        for (unsigned m = group; m; m &= m - 1) {
            const Op& o = lanes[__builtin_ctz(m)].op;
            if (o.kind != first.kind || o.size != first.size) {
                error.set("warp %u: lane %u calls %s (%u bytes) while lane %u calls %s (%u bytes) with the same mask 0x%08x",
                          base / 32, self, kKindName[first.kind], first.size, __builtin_ctz(m),
                          kKindName[o.kind], o.size, first.mask);
                fail();
            }
        }
        if (first.kind <= kShflXor) {
            shuffle(base, group);
        } else {
            for (unsigned m = group; m; m &= m - 1) lanes[__builtin_ctz(m)].op.result = reduce(lanes, group, __builtin_ctz(m));
        }
        for (unsigned m = group & ~(1u << self); m; m &= m - 1) make_ready(base + __builtin_ctz(m));
    }

    void shuffle(unsigned base, unsigned group) {
        Thread* lanes = th + base;
        for (unsigned m = group; m; m &= m - 1) {
            const unsigned l = __builtin_ctz(m);
            Op& o = lanes[l].op;
            const int src = shfl_source(o, l);
            const char* why = src < 0 ? "has width %d, not a power of two in [1, 32]"
                              : !(warp_exists(base) >> src & 1) ? "reads lane %d, which does not exist (partial warp)"
                              : !(group >> src & 1) ? "reads lane %d, which is not in the mask" : nullptr;
            if (why) {
                char what[96];
                snprintf(what, sizeof what, why, src < 0 ? o.width : src);
                error.set("thread %s (warp %u, lane %u) in %s (mask 0x%08x) %s", Tid(lanes[l].idx).s,
                          base / 32, l, kKindName[o.kind], o.mask, what);
                fail();
            }
            o.result = lanes[src].op.value;
        }
    }

    // Result of a non-shuffle collective for lane `l`.
    static uint64_t reduce(const Thread* lanes, unsigned group, unsigned l) {
        const Op& me = lanes[l].op;
        uint64_t acc = 0;
        bool first = true;
        unsigned same = 0;
        for (unsigned m = group; m; m &= m - 1) {
            const unsigned j = __builtin_ctz(m);
            const uint64_t v = lanes[j].op.value;
            const uint64_t sv = (uint64_t)(int64_t)(int32_t)v, sa = (uint64_t)(int64_t)(int32_t)acc;
            switch (me.kind) {
            case kBallot: case kAny: case kAll: acc |= (uint64_t)(v != 0) << j; break;
            case kRedAdd: acc = (uint32_t)(acc + v); break;
            case kRedMin: acc = first || (int64_t)sv < (int64_t)sa ? (uint32_t)v : acc; break;
            case kRedMax: acc = first || (int64_t)sv > (int64_t)sa ? (uint32_t)v : acc; break;
            case kRedUmin: acc = first || v < acc ? v : acc; break;
            case kRedUmax: acc = first || v > acc ? v : acc; break;
            case kRedAnd: acc = first ? v : acc & v; break;
            case kRedOr: acc |= v; break;
            case kRedXor: acc ^= v; break;
            default: same |= (unsigned)(v == me.value) << j; break; // match
            }
            first = false;
        }
        switch (me.kind) {
        case kAny: return acc != 0;
        case kAll: return acc == group;
        case kSyncwarp: return 0;
        case kMatchAny: return same;
        case kMatchAll: return same == group ? (uint64_t)group | (1ull << 32) : 0;
        default: return acc;
        }
    }

    // Why the block cannot go on (nothing runnable, not every thread exited).
    void explain_deadlock() {
        for (unsigned i = 0; i < n; ++i) { // a collective waiting for a lane that cannot come
            const Thread& t = th[i];
            if (t.st != St::Warp) continue;
            const unsigned base = i & ~31u, group = t.op.mask & warp_exists(base);
            for (unsigned m = group; m; m &= m - 1) {
                const Thread& u = th[base + __builtin_ctz(m)];
                if (u.st == St::Warp && u.op.mask == t.op.mask) continue;
                char why[96];
                if (u.st == St::Done) snprintf(why, sizeof why, "has exited");
                else if (u.st == St::Barrier) snprintf(why, sizeof why, "waits at __syncthreads");
                else snprintf(why, sizeof why, "waits in %s with mask 0x%08x", kKindName[u.op.kind], u.op.mask);
                error.set("thread %s (warp %u, lane %u) waits in %s (mask 0x%08x) for lane %u, thread %s, which %s",
                          Tid(t.idx).s, i / 32, i & 31, kKindName[t.op.kind], t.op.mask,
                          __builtin_ctz(m), Tid(u.idx).s, why);
                return;
            }
        }
        int waiting = -1, exited = -1;
        unsigned n_waiting = 0;
        for (unsigned i = 0; i < n; ++i) {
            if (th[i].st == St::Barrier && !n_waiting++) waiting = (int)i;
            if (th[i].st == St::Done && exited < 0) exited = (int)i;
        }
        if (waiting >= 0 && exited >= 0) {
            error.set("divergent __syncthreads: %u of %u threads wait at it (first %s) but thread %s exited without reaching it",
                      n_waiting, n, Tid(th[waiting].idx).s, Tid(th[exited].idx).s);
        } else {
            error.set("deadlock: %u of %u threads wait at __syncthreads, none can proceed", n_waiting, n);
        }
    }

    Fiber* take_fiber() {
        if (n_idle) return idle[--n_idle];
        Fiber* f = new (std::nothrow) Fiber;
        if (!f) return nullptr;
        f->stack = g_stacks.get();
        if (!f->stack) {
            delete f;
            return nullptr;
        }
        return fibers[n_fibers++] = f;
    }

    // Runs fiber `f` until it switches back (kept out of run_block's loop: GCC treats
    // swapcontext like setjmp for the variables around it).
    __attribute__((noinline)) void switch_into(Fiber* f) {
        went_idle = false;
        cur_fiber = f;
        switch_ctx(&sched, &f->ctx);
        if (went_idle) idle[n_idle++] = cur_fiber; // fibers never change cur_fiber
    }

    // Runs one block to completion; false (with `error`) if it could not.
    bool run_block(uint3 b) {
        blockIdx = b;
        next = done = at_barrier = bar_count = 0;
        ready_head = ready_len = 0;
        for (unsigned i = 0; i < n; ++i) th[i].st = St::Unstarted;
        while (error.empty()) {
            Fiber* f;
            if (ready_len) {
                f = th[ready[ready_head]].fiber;
                ready_head = (ready_head + 1) % kMaxThreads, --ready_len;
            } else if (next < n) {
                if (!(f = take_fiber())) {
                    error.set("out of memory for fiber stacks (%u in use)", n_fibers);
                    break;
                }
                make_ctx(&f->ctx, f->stack, RNN_EMU_STACK_BYTES, fiber_main, &sched);
            } else {
                break;
            }
            switch_into(f);
        }
        if (error.empty() && done < n) explain_deadlock();
        if (error.empty()) return true;
        n_idle = 0; // abandon the failed block's fibers; each is re-made when next taken
        for (unsigned i = 0; i < n_fibers; ++i) idle[n_idle++] = fibers[i];
        return false;
    }

    ~Worker() {
        for (unsigned i = 0; i < n_fibers; ++i) {
            g_stacks.put(fibers[i]->stack);
            delete fibers[i];
        }
        free(dynamic_shared);
    }
};

// Entry of every fiber: runs unstarted threads of the current block until none is left,
// then goes back to the scheduler for good (a fiber is re-made each time it is taken).
void fiber_main() {
    Worker& w = *tl_worker;
    Fiber* const self = w.cur_fiber;
    while (w.next < w.n) {
        Thread& t = w.th[w.next++];
        t.fiber = self;
        t.st = St::Running;
        w.enter(t);
        bool threw = false;
        try {
            w.kernel.invoke(w.kernel.call);
        } catch (...) {
            threw = true; // leave the handler before abandoning this fiber
        }
        if (threw) {
            w.error.set("thread %s threw a C++ exception", Tid(t.idx).s);
            w.fail();
        }
        t.st = St::Done;
        ++w.done;
    }
    w.went_idle = true;
    switch_ctx(&self->ctx, &w.sched);
    __builtin_unreachable();
}

Worker& current(const char* what) {
    Worker* w = tl_worker;
    if (!w || !w->cur) {
        fprintf(stderr, "rnn_emu: %s called outside a kernel launch\n", what);
        abort();
    }
    return *w;
}

// --- The grid: blocks handed out to OS threads. ---

struct Grid {
    Kernel kernel;
    unsigned g[3], b[3], shared_bytes;
    unsigned long long blocks;
    unsigned long long next = 0; // next linear block index, taken atomically
    int failed = 0;
    int code = 0;
    pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
    unsigned long long error_block = ~0ull; // the lowest failing block is reported
    Msg error;

    void record(unsigned long long blk, int c, const char* msg) {
        pthread_mutex_lock(&mu);
        if (blk < error_block) error_block = blk, code = c, error.set("%s", msg);
        pthread_mutex_unlock(&mu);
        __atomic_store_n(&failed, 1, __ATOMIC_RELAXED);
    }

    void run_worker() {
        Worker* w = new (std::nothrow) Worker;
        if (w && shared_bytes && posix_memalign((void**)&w->dynamic_shared, 256, shared_bytes)) w->dynamic_shared = nullptr;
        if (!w || (shared_bytes && !w->dynamic_shared)) {
            record(0, 3, "out of memory for an emulator worker");
            delete w;
            return;
        }
        w->kernel = kernel;
        w->n = b[0] * b[1] * b[2];
        for (unsigned i = 0; i < w->n; ++i) w->th[i].idx = uint3{i % b[0], i / b[0] % b[1], i / (b[0] * b[1])};
        tl_worker = w;
        blockDim = dim3(b[0], b[1], b[2]);
        gridDim = dim3(g[0], g[1], g[2]);
        for (;;) {
            if (__atomic_load_n(&failed, __ATOMIC_RELAXED)) break;
            const unsigned long long k = __atomic_fetch_add(&next, 1ull, __ATOMIC_RELAXED);
            if (k >= blocks) break;
            const uint3 blk{(unsigned)(k % g[0]), (unsigned)(k / g[0] % g[1]), (unsigned)(k / g[0] / g[1])};
            if (!w->run_block(blk)) {
                Msg m;
                m.set("block %s: %s", Tid(blk).s, w->error.s);
                record(k, 2, m.s);
                break;
            }
        }
        tl_worker = nullptr;
        delete w;
    }

    static void* thread_main(void* self) {
        static_cast<Grid*>(self)->run_worker();
        return nullptr;
    }
};

unsigned cpu_count() {
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) == 0 && CPU_COUNT(&set) > 0) return (unsigned)CPU_COUNT(&set);
    const long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (unsigned)n : 1;
}

__attribute__((format(printf, 3, 4))) int report(char* err, unsigned long cap, const char* f, ...) {
    if (err && cap) {
        va_list a;
        va_start(a, f);
        vsnprintf(err, cap, f, a);
        va_end(a);
    }
    return 1;
}

int check_dims(const LaunchDims& d, char* err, unsigned long cap) {
    const unsigned* g = d.grid;
    const unsigned* b = d.block;
    if (!g[0] || !g[1] || !g[2] || g[0] > 0x7fffffffu || g[1] > 65535 || g[2] > 65535)
        return report(err, cap, "invalid grid (%u,%u,%u): each dim >= 1, x < 2^31, y and z <= 65535", g[0], g[1], g[2]);
    const unsigned long long threads = (unsigned long long)b[0] * b[1] * b[2];
    if (!threads || b[0] > 1024 || b[1] > 1024 || b[2] > 64 || threads > kMaxThreads)
        return report(err, cap, "invalid block (%u,%u,%u): each dim >= 1, z <= 64, at most %u threads",
                      b[0], b[1], b[2], kMaxThreads);
    if (d.shared_bytes > kMaxSharedBytes)
        return report(err, cap, "%u bytes of dynamic shared memory, at most %u", d.shared_bytes, kMaxSharedBytes);
    return 0;
}

int run_grid(Kernel k, const LaunchDims& d, char* err, unsigned long cap) {
    if (check_dims(d, err, cap)) return 1;
    Grid grid;
    grid.kernel = k;
    std::memcpy(grid.g, d.grid, sizeof grid.g);
    std::memcpy(grid.b, d.block, sizeof grid.b);
    grid.shared_bytes = d.shared_bytes;
    grid.blocks = (unsigned long long)d.grid[0] * d.grid[1] * d.grid[2];
    unsigned long long workers = d.os_threads ? d.os_threads : cpu_count();
    if (workers > grid.blocks) workers = grid.blocks;
    if (workers > 1024) workers = 1024;
    pthread_t extra[1023];
    unsigned started = 0;
    for (unsigned i = 1; i < workers; ++i) // this thread is the first worker
        if (pthread_create(&extra[started], nullptr, &Grid::thread_main, &grid) == 0) ++started;
    grid.run_worker();
    for (unsigned i = 0; i < started; ++i) pthread_join(extra[i], nullptr);
    if (!grid.code) return 0;
    report(err, cap, "%s", grid.error.s);
    return grid.code;
}

// The kernel's Info and buffers, and how to call it.
template <class I, class... P> struct Call {
    void (*kernel)(I, P...);
    I info;
    void* buffers[sizeof...(P) + 1];
    template <size_t... N> void run(std::index_sequence<N...>) const { kernel(info, static_cast<P>(buffers[N])...); }
    static void invoke(const void* self) { static_cast<const Call*>(self)->run(std::index_sequence_for<P...>{}); }
};

// Runs `kernel` over the grid of `dims` (see the top of this file). In the unnamed namespace
// too, so that its instantiations (named after rnn_v0::Info, in every batch) stay private.
template <class I, class... P>
int launch(void (*kernel)(const I, P...), const unsigned long long* words, unsigned long n_words,
           void* const* buffers, unsigned long n_buffers, const LaunchDims* dims, char* err,
           unsigned long err_cap) {
    static_assert(std::is_trivially_copyable<I>::value, "the kernel's Info must be trivially copyable");
    static_assert(std::conjunction<std::is_pointer<P>...>::value, "every kernel parameter after Info is a pointer");
    if (err && err_cap) err[0] = 0;
    if (n_words > sizeof(I) / sizeof(unsigned long long))
        return report(err, err_cap, "%lu info words passed, the kernel's Info holds %zu",
                      n_words, sizeof(I) / sizeof(unsigned long long));
    if (n_words && !words) return report(err, err_cap, "info words are null");
    if (n_buffers != sizeof...(P))
        return report(err, err_cap, "the kernel takes %zu buffers, %lu passed", sizeof...(P), n_buffers);
    if (n_buffers && !buffers) return report(err, err_cap, "buffers are null");
    if (!dims) return report(err, err_cap, "launch dims are null");
    Call<I, P...> call;
    call.kernel = kernel;
    std::memset(static_cast<void*>(&call.info), 0, sizeof(I));
    if (n_words) std::memcpy(static_cast<void*>(&call.info), words, n_words * sizeof(unsigned long long));
    for (unsigned long i = 0; i < n_buffers; ++i) call.buffers[i] = buffers[i];
    return run_grid(Kernel{&Call<I, P...>::invoke, &call}, *dims, err, err_cap);
}

// Dynamic shared memory of the running block (`shared_bytes` of LaunchDims, 256-aligned).
template <class T> inline T* dynamic_shared() {
    return reinterpret_cast<T*>(current("dynamic shared memory").dynamic_shared);
}

} // namespace
} // namespace rnn_emu

// `extern __shared__ T name[];` cannot be expressed here; a kernel meant for both worlds
// writes RNN_DYNAMIC_SHARED(T, name) and defines it for CUDA (e.g. in common.cuh):
//     #ifndef RNN_DYNAMIC_SHARED
//     #define RNN_DYNAMIC_SHARED(T, name) extern __shared__ __align__(16) T name[]
//     #endif
#define RNN_DYNAMIC_SHARED(T, name) T* const name = ::rnn_emu::dynamic_shared<T>()

// ---------------------------------------------------------------------------------------
// Barriers and warp collectives.
// ---------------------------------------------------------------------------------------
namespace {

inline void __syncthreads() { rnn_emu::current("__syncthreads").barrier(0); }
inline int __syncthreads_count(int p) { return rnn_emu::current("__syncthreads_count").barrier(p); }
inline int __syncthreads_and(int p) {
    return rnn_emu::current("__syncthreads_and").barrier(p) == (int)rnn_emu::tl_worker->n;
}
inline int __syncthreads_or(int p) { return rnn_emu::current("__syncthreads_or").barrier(p) != 0; }
inline void __syncwarp(unsigned mask = 0xffffffffu) {
    rnn_emu::current("__syncwarp").warp_op(rnn_emu::kSyncwarp, mask, 0, 0, 0, 32);
}
inline unsigned __activemask() { return rnn_emu::current("__activemask").active_mask(); }
inline unsigned __ballot_sync(unsigned mask, int p) {
    return (unsigned)rnn_emu::current("__ballot_sync").warp_op(rnn_emu::kBallot, mask, p != 0, 4, 0, 32);
}
inline int __any_sync(unsigned mask, int p) {
    return (int)rnn_emu::current("__any_sync").warp_op(rnn_emu::kAny, mask, p != 0, 4, 0, 32);
}
inline int __all_sync(unsigned mask, int p) {
    return (int)rnn_emu::current("__all_sync").warp_op(rnn_emu::kAll, mask, p != 0, 4, 0, 32);
}
// A nanosleep lets the other threads of the block run (spin-waits on them can finish).
inline void __nanosleep(unsigned) { rnn_emu::current("__nanosleep").yield(); }
// __trap ends the launch with an error naming the thread.
__attribute__((noreturn)) inline void __trap() {
    rnn_emu::Worker& w = rnn_emu::current("__trap");
    w.error.set("thread %s called __trap()", rnn_emu::Tid(w.cur->idx).s);
    w.fail();
}
__attribute__((noreturn)) inline void __brkpt() { __trap(); }

template <class T> inline T rnn_shfl(rnn_emu::Kind k, unsigned mask, T var, long long arg, int width) {
    static_assert(sizeof(T) <= 8 && std::is_trivially_copyable<T>::value, "shuffled type");
    uint64_t v = 0;
    std::memcpy(&v, &var, sizeof(T));
    v = rnn_emu::current(rnn_emu::kKindName[k]).warp_op(k, mask, v, sizeof(T), arg, width);
    std::memcpy(&var, &v, sizeof(T));
    return var;
}
// The overload set of CUDA's headers (so a u8 argument promotes to int, as with nvcc).
#define RNN_EMU_SHFL(T)                                                                                        \
    inline T __shfl_sync(unsigned mask, T var, int src, int width = warpSize) {                                \
        return rnn_shfl(rnn_emu::kShfl, mask, var, src, width);                                                \
    }                                                                                                          \
    inline T __shfl_up_sync(unsigned mask, T var, unsigned delta, int width = warpSize) {                      \
        return rnn_shfl(rnn_emu::kShflUp, mask, var, delta, width);                                            \
    }                                                                                                          \
    inline T __shfl_down_sync(unsigned mask, T var, unsigned delta, int width = warpSize) {                    \
        return rnn_shfl(rnn_emu::kShflDown, mask, var, delta, width);                                          \
    }                                                                                                          \
    inline T __shfl_xor_sync(unsigned mask, T var, int lane_mask, int width = warpSize) {                      \
        return rnn_shfl(rnn_emu::kShflXor, mask, var, lane_mask, width);                                       \
    }
RNN_EMU_SHFL(int) RNN_EMU_SHFL(unsigned int) RNN_EMU_SHFL(long) RNN_EMU_SHFL(unsigned long)
RNN_EMU_SHFL(long long) RNN_EMU_SHFL(unsigned long long) RNN_EMU_SHFL(float) RNN_EMU_SHFL(double)
RNN_EMU_SHFL(__half) RNN_EMU_SHFL(__half2) RNN_EMU_SHFL(__nv_bfloat16) RNN_EMU_SHFL(__nv_bfloat162)
#undef RNN_EMU_SHFL

#define RNN_EMU_REDUCE(name, K, T) \
    inline T name(unsigned mask, T v) { return (T)rnn_emu::current(#name).warp_op(rnn_emu::K, mask, (uint32_t)v, 4, 0, 32); }
RNN_EMU_REDUCE(__reduce_add_sync, kRedAdd, unsigned) RNN_EMU_REDUCE(__reduce_add_sync, kRedAdd, int)
RNN_EMU_REDUCE(__reduce_min_sync, kRedUmin, unsigned) RNN_EMU_REDUCE(__reduce_min_sync, kRedMin, int)
RNN_EMU_REDUCE(__reduce_max_sync, kRedUmax, unsigned) RNN_EMU_REDUCE(__reduce_max_sync, kRedMax, int)
RNN_EMU_REDUCE(__reduce_and_sync, kRedAnd, unsigned) RNN_EMU_REDUCE(__reduce_or_sync, kRedOr, unsigned)
RNN_EMU_REDUCE(__reduce_xor_sync, kRedXor, unsigned)
#undef RNN_EMU_REDUCE

#define RNN_EMU_MATCH(T)                                                                                     \
    inline unsigned __match_any_sync(unsigned mask, T v) {                                                   \
        uint64_t b = 0;                                                                                      \
        std::memcpy(&b, &v, sizeof v);                                                                       \
        return (unsigned)rnn_emu::current("__match_any_sync").warp_op(rnn_emu::kMatchAny, mask, b, sizeof v, 0, 32); \
    }                                                                                                        \
    inline unsigned __match_all_sync(unsigned mask, T v, int* pred) {                                        \
        uint64_t b = 0;                                                                                      \
        std::memcpy(&b, &v, sizeof v);                                                                       \
        const uint64_t r = rnn_emu::current("__match_all_sync").warp_op(rnn_emu::kMatchAll, mask, b, sizeof v, 0, 32); \
        *pred = (int)(r >> 32);                                                                              \
        return (unsigned)r;                                                                                  \
    }
RNN_EMU_MATCH(int) RNN_EMU_MATCH(unsigned int) RNN_EMU_MATCH(long) RNN_EMU_MATCH(unsigned long)
RNN_EMU_MATCH(long long) RNN_EMU_MATCH(unsigned long long) RNN_EMU_MATCH(float) RNN_EMU_MATCH(double)
#undef RNN_EMU_MATCH

} // namespace

#endif // RNN_EMU_CUDA_SHIM_H
