// shim_types.h (a part of cuda_shim.h, see there): CUDA's keywords, the vector types,
// dim3 and the built-in index variables.
#ifndef RNN_EMU_CUDA_SHIM_H
#error "shim_types.h is a part of cuda_shim.h: include that"
#endif

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
