// Self-test of cuda_shim.h: kernels in the library's form (namespaces, `kernel(const Info,
// pointers...)`), launched through rnn_emu::launch, checked against host computations,
// plus the error cases and exact 16-bit conversions. The test `emu::selftest` builds and runs
// it (cargo test -p rnn-core --features cuda-emu --lib emu::selftest); by hand, from the repo
// root (add -fsanitize=address,undefined to check the shim itself):
//   g++ -std=c++17 -O1 -fno-strict-aliasing -pthread -I crates/rnn-core/src/emu/shim
//       -o selftest crates/rnn-core/src/emu/shim/selftest.cpp && ./selftest
#include "cuda_shim.h"

#include <random>
#include <string>
#include <vector>

typedef unsigned long long u64;
typedef unsigned int u32;
#define FULL_MASK 0xffffffffu

// --- Kernels, one namespace each, as the library generates them. ---

namespace k_reduce { // block sum: warp shuffles in a loop, shared memory, __syncthreads
#include <cuda_fp16.h>
struct Info { u64 w[96]; };
__device__ __forceinline__ double warp_sum(double v) {
    for (int d = 16; d > 0; d >>= 1) v += __shfl_down_sync(FULL_MASK, v, d);
    return v;
}
__global__ void kernel(const Info info, const float* __restrict__ x, double* __restrict__ out) {
    __shared__ double part[32];
    const u64 n = info.w[0];
    const u32 t = threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
    const u32 threads = blockDim.x * blockDim.y * blockDim.z;
    double v = 0;
    for (u64 i = blockIdx.x * (u64)threads + t; i < n; i += (u64)gridDim.x * threads) v += x[i];
    v = warp_sum(v);
    if (t % 32 == 0) part[t / 32] = v;
    __syncthreads();
    if (t < 32) {
        v = t < threads / 32 ? part[t] : 0.0;
        v = warp_sum(v);
        if (t == 0) out[blockIdx.x] = v;
    }
}
} // namespace k_reduce

namespace k_stride { // grid-stride loop, reads every index variable
struct Info { u64 w[96]; };
__global__ void kernel(const Info info, const float* __restrict__ x, float* __restrict__ y, u32* __restrict__ seen) {
    const u64 n = info.w[0];
    for (u64 i = (u64)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (u64)gridDim.x * blockDim.x) {
        y[i] = 2.0f * x[i] + (float)info.w[1];
        seen[i] = blockIdx.x * 1000 + threadIdx.x;
    }
    // Info words past those passed are zero.
    if (blockIdx.x == 0 && threadIdx.x == 0)
        for (int k = 2; k < 96; ++k)
            if (info.w[k]) seen[n] = 1;
}
} // namespace k_stride

namespace k_atomic { // device-wide atomics from many blocks on several OS threads
struct Info { u64 w[96]; };
__global__ void kernel(const Info info, int* ints, unsigned* uints, u64* u64s, float* f, double* d, long long* lls) {
    const u32 g = blockIdx.x * blockDim.x + threadIdx.x;
    atomicAdd(&ints[0], 1);
    atomicSub(&ints[1], 2);
    atomicMax(&ints[2], (int)g);
    atomicMin(&ints[3], -(int)g);
    atomicAdd(&uints[0], 3u);
    atomicInc(&uints[1], 99u);
    atomicOr(&uints[2], 1u << (g % 32));
    atomicXor(&uints[3], g);
    atomicAnd(&uints[4], ~(1u << (g % 16)));
    atomicAdd(&u64s[0], (u64)g);
    atomicMin(&u64s[1], (u64)g + 7);
    atomicMax(&u64s[2], (u64)g * 3);
    atomicMin(&lls[0], -(long long)g);
    atomicMax(&lls[1], (long long)g);
    atomicAdd(f, 1.0f);
    atomicAdd(d, 0.5);
    // A lock built from atomicCAS / atomicExch protecting a non-atomic counter.
    while (atomicCAS(&uints[5], 0u, 1u) != 0u) {
    }
    ints[4] += 1;
    __threadfence();
    atomicExch(&uints[5], 0u);
    (void)info;
}
} // namespace k_atomic

namespace k_atomic16 { // 16-bit float atomicAdd; neighbouring halves share a 32-bit word
#define RNN_HALF
#include <cuda_fp16.h>
#include <cuda_bf16.h>
struct Info { u64 w[96]; };
__global__ void kernel(const Info info, __half* h, __nv_bfloat16* b) {
    atomicAdd(&h[0], __float2half(1.0f));       // stops at 2048: 2048 + 1 ties to even
    atomicAdd(&h[1], __float2half(0.25f));      // stops at 512 (ulp 0.5 there)
    atomicAdd(&b[0], __float2bfloat16(1.0f));   // stops at 256
    atomicAdd(&b[1], __float2bfloat16(-0.5f));  // stops at -128 (ulp 1 there)
    (void)info;
}
} // namespace k_atomic16

namespace k_warp { // collectives, checked per lane on the host
struct Info { u64 w[96]; };
__global__ void kernel(const Info info, u32* out) {
    const u32 t = threadIdx.x, lane = t % 32;
    u32* o = out + (blockIdx.x * blockDim.x + t) * 16;
    o[0] = __ballot_sync(FULL_MASK, lane % 3 == 0);
    o[1] = __any_sync(FULL_MASK, lane == 7);
    o[2] = __all_sync(FULL_MASK, lane < 31);
    o[3] = __shfl_sync(FULL_MASK, t * 10, 5);
    o[4] = __shfl_up_sync(FULL_MASK, t, 3, 8);
    o[5] = __shfl_down_sync(FULL_MASK, t, 3, 8);
    o[6] = __shfl_xor_sync(FULL_MASK, t, 9);
    o[7] = __reduce_add_sync(FULL_MASK, lane);
    o[8] = __match_any_sync(FULL_MASK, lane / 4);
    o[9] = (u32)__reduce_min_sync(FULL_MASK, (int)lane - 5);
    o[10] = __syncthreads_count(t % 2);
    o[11] = __syncthreads_or(t == 3);
    if (lane < 16) o[12] = __shfl_down_sync(0xffffu, lane, 4, 16); // half the warp
    __syncwarp();
    o[13] = __float_as_uint(__shfl_xor_sync(FULL_MASK, (float)lane * 0.5f, 1));
    o[14] = __half_as_ushort(__shfl_sync(FULL_MASK, __float2half((float)lane), 31 - (int)lane));
    o[15] = __activemask() >> lane & 1; // which other lanes count depends on the schedule
    (void)info;
}
} // namespace k_warp

namespace k_order { // a race between warps: each reads the other's flag, then sets its own
struct Info { u64 w[96]; };
__global__ void kernel(const Info info, u32* __restrict__ out) {
    __shared__ u32 flag[2];
    if (threadIdx.x < 2) flag[threadIdx.x] = 0;
    __syncthreads();
    const u32 warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const u32 seen = __shfl_sync(FULL_MASK, flag[warp ^ 1], 0); // no barrier before this read
    if (lane == 0) {
        flag[warp] = 1;
        out[blockIdx.x * 2 + warp] = seen;
    }
}
} // namespace k_order

namespace k_grid { // 3-D grid and block: every index variable, __syncthreads_and
struct Info { u64 w[96]; };
__global__ void kernel(const Info info, u32* out) {
    const u32 block = blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z);
    const u32 t = threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
    const u32 threads = blockDim.x * blockDim.y * blockDim.z;
    const int all_small = __syncthreads_and(threadIdx.z < blockDim.z);
    const int all_x0 = __syncthreads_and(threadIdx.x == 0);
    out[block * threads + t] = blockIdx.x | blockIdx.y << 4 | blockIdx.z << 8 | threadIdx.x << 12 |
                               threadIdx.y << 16 | threadIdx.z << 20 | all_small << 24 | all_x0 << 25;
    (void)info;
}
} // namespace k_grid

namespace k_dyn { // dynamic shared memory
struct Info { u64 w[96]; };
__global__ void kernel(const Info info, float* out) {
    RNN_DYNAMIC_SHARED(float, buf);
    buf[threadIdx.x] = (float)(threadIdx.x * blockIdx.x);
    __syncthreads();
    out[blockIdx.x * blockDim.x + threadIdx.x] = buf[blockDim.x - 1 - threadIdx.x];
    (void)info;
}
} // namespace k_dyn

namespace k_cpasync { // cp.async lands at the wait that retires its group, not before
struct Info { u64 w[96]; };
// Each thread copies its 4 floats of `x` into shared memory (pre-filled with -1) twice: group
// 0 into `a`, group 1 into `b`, then 70 more copies of its piece (more than a queue holds) in
// one group into `c`. What it sees at each stage goes to `out`, 6 values per thread.
__global__ void kernel(const Info info, const float* __restrict__ x, float* __restrict__ out) {
    __shared__ __align__(16) float a[64][4], b[64][4], c[64][4];
    const u32 t = threadIdx.x, i = blockIdx.x * blockDim.x + t;
    for (int e = 0; e < 4; ++e) a[t][e] = b[t][e] = c[t][e] = -1.0f;
    cp_async_16(a[t], x + 4 * i);
    cp_async_commit();
    cp_async_16(b[t], x + 4 * i);
    cp_async_commit();
    float* o = out + 6 * i;
    o[0] = a[t][0]; // not waited for: still -1
    cp_async_wait<1>();
    o[1] = a[t][1]; // group 0 landed
    o[2] = b[t][2]; // group 1 not yet
    cp_async_wait<0>();
    o[3] = b[t][3];
    for (int r = 0; r < 70; ++r) cp_async_16(c[t], x + 4 * i);
    o[4] = c[t][0]; // the queue overflowed: its oldest copies landed early, as PTX allows
    cp_async_commit();
    cp_async_wait<0>();
    o[5] = c[t][1];
    (void)info;
}
} // namespace k_cpasync

namespace k_bad { // each info.w[0] selects a faulty behaviour
struct Info { u64 w[96]; };
__global__ void kernel(const Info info, u32* out) {
    const u32 t = threadIdx.x;
    switch (info.w[0]) {
    case 0: // divergent barrier
        if (t < 16) __syncthreads();
        break;
    case 1: // shuffle with an exited lane
        if (t == 5) return;
        out[t] = __shfl_down_sync(FULL_MASK, t, 1);
        break;
    case 2: // block of 40 threads: lane 0 of warp 1 reads lane 8, which does not exist
        out[t] = __shfl_down_sync(FULL_MASK, t, 8);
        break;
    case 3: // a lane waits at __syncthreads while its warp shuffles
        if (t == 3) __syncthreads();
        out[t] = __shfl_xor_sync(FULL_MASK, t, 1);
        break;
    case 4: // lanes disagree on the collective
        out[t] = t % 2 ? __ballot_sync(FULL_MASK, 1) : __shfl_sync(FULL_MASK, t, 0);
        break;
    case 5: // a lane missing from its own mask
        out[t] = __shfl_sync(0x1u, t, 0);
        break;
    case 6:
        if (blockIdx.x == 2 && t == 7) __trap();
        break;
    case 7: // reads a lane outside the mask
        if (t < 2) out[t] = __shfl_sync(0x3u, t, 2);
        break;
    case 8: // width not a power of two
        out[t] = __shfl_xor_sync(FULL_MASK, t, 1, 12);
        break;
    }
}
} // namespace k_bad

// --- Checks. ---

static int g_passed = 0, g_failed = 0;
#define CHECK(cond, ...)                                                                     \
    do {                                                                                     \
        if (cond) {                                                                          \
            ++g_passed;                                                                      \
        } else {                                                                             \
            ++g_failed;                                                                      \
            printf("FAIL %s:%d: %s: ", __FILE__, __LINE__, #cond);                           \
            printf(__VA_ARGS__);                                                             \
            printf("\n");                                                                    \
        }                                                                                    \
    } while (0)

static rnn_emu::LaunchDims dims(unsigned gx, unsigned bx, unsigned by = 1, unsigned bz = 1, unsigned shared = 0,
                                unsigned os = 0) {
    return rnn_emu::LaunchDims{{gx, 1, 1}, {bx, by, bz}, shared, os};
}

template <class K, class... B>
static int run(K kernel, std::vector<u64> words, const rnn_emu::LaunchDims& d, std::string* err, B... bufs) {
    void* buffers[] = {(void*)bufs..., nullptr};
    char msg[512];
    const int rc = rnn_emu::launch(kernel, words.data(), words.size(), buffers, sizeof...(B), &d, msg, sizeof msg);
    if (err) *err = msg;
    return rc;
}

static void test_reduce() {
    for (unsigned os : {1u, 3u}) {
        const u64 n = 100003;
        std::vector<float> x(n);
        for (u64 i = 0; i < n; ++i) x[i] = (float)((i * 37) % 101) - 50.0f;
        const unsigned blocks = 7;
        std::vector<double> out(blocks, -1);
        std::string err;
        // 3-D block of 16 x 4 x 2 = 128 threads (4 warps).
        int rc = run(k_reduce::kernel, {n}, rnn_emu::LaunchDims{{blocks, 1, 1}, {16, 4, 2}, 0, os}, &err, x.data(), out.data());
        CHECK(rc == 0, "rc %d: %s", rc, err.c_str());
        double total = 0, want = 0;
        for (double v : out) total += v;
        for (float v : x) want += v;
        CHECK(total == want, "sum %f, want %f", total, want);
        // Each block's partial sum on its own.
        for (unsigned b = 0; b < blocks; ++b) {
            double s = 0;
            for (u64 i = b * 128ull; i < n; i += blocks * 128ull)
                for (u64 j = i; j < i + 128 && j < n; ++j) s += x[j];
            CHECK(out[b] == s, "block %u: %f vs %f", b, out[b], s);
        }
    }
}

static void test_stride() {
    const u64 n = 1000;
    std::vector<float> x(n), y(n, 0);
    std::vector<u32> seen(n + 1, 0xdead);
    for (u64 i = 0; i < n; ++i) x[i] = (float)i * 0.25f;
    seen[n] = 0;
    std::string err;
    int rc = run(k_stride::kernel, {n, 3}, dims(3, 64), &err, x.data(), y.data(), seen.data());
    CHECK(rc == 0, "%s", err.c_str());
    bool ok = true;
    for (u64 i = 0; i < n; ++i) {
        const u64 step = 3 * 64, b = i % step / 64, t = i % 64;
        ok &= y[i] == 2.0f * x[i] + 3.0f && seen[i] == b * 1000 + t;
    }
    CHECK(ok, "grid-stride results");
    CHECK(seen[n] == 0, "info words past n_words must be zero");
}

static void test_atomics() {
    const unsigned blocks = 64, threads = 128, total = blocks * threads;
    int ints[5] = {0, 0, -1, 0, 0};
    unsigned uints[6] = {0, 0, 0, 0, 0xffffffffu, 0};
    u64 u64s[3] = {0, ~0ull, 0};
    long long lls[2] = {0, -5};
    float f = 0;
    double d = 0;
    std::string err;
    int rc = run(k_atomic::kernel, {}, dims(blocks, threads, 1, 1, 0, 4), &err, ints, uints, u64s, &f, &d, lls);
    CHECK(rc == 0, "%s", err.c_str());
    CHECK(ints[0] == (int)total && ints[1] == -2 * (int)total, "add/sub %d %d", ints[0], ints[1]);
    CHECK(ints[2] == (int)total - 1 && ints[3] == -(int)(total - 1), "max/min %d %d", ints[2], ints[3]);
    CHECK(ints[4] == (int)total, "CAS lock counter %d", ints[4]);
    CHECK(uints[0] == 3 * total && uints[1] == total % 100, "uint add %u inc %u", uints[0], uints[1]);
    CHECK(uints[2] == 0xffffffffu && uints[4] == 0xffff0000u, "or %x and %x", uints[2], uints[4]);
    u32 x = 0;
    for (u32 g = 0; g < total; ++g) x ^= g;
    CHECK(uints[3] == x, "xor %x want %x", uints[3], x);
    CHECK(u64s[0] == (u64)total * (total - 1) / 2 && u64s[1] == 7 && u64s[2] == 3ull * (total - 1), "u64 atomics");
    CHECK(lls[0] == -(long long)(total - 1) && lls[1] == (long long)total - 1, "i64 min/max");
    CHECK(f == (float)total && d == total * 0.5, "float %f double %f", f, d);
}

static void test_atomic16() {
    alignas(256) __half h[2] = {__float2half(0.0f), __float2half(0.0f)};
    alignas(256) __nv_bfloat16 b[2] = {__float2bfloat16(0.0f), __float2bfloat16(0.0f)};
    std::string err;
    int rc = run(k_atomic16::kernel, {}, dims(20, 256, 1, 1, 0, 4), &err, h, b); // 5120 adds each
    CHECK(rc == 0, "%s", err.c_str());
    CHECK(__half_as_ushort(h[0]) == 0x6800, "half 1+1+... = %04x, want 2048 (0x6800)", __half_as_ushort(h[0]));
    CHECK(__half2float(h[1]) == 512.0f, "half 0.25 * 5120 = %f, want 512", __half2float(h[1]));
    CHECK(__bfloat16_as_ushort(b[0]) == 0x4380, "bf16 sum %04x, want 256 (0x4380)", __bfloat16_as_ushort(b[0]));
    CHECK(__bfloat162float(b[1]) == -128.0f, "bf16 -0.5 * 5120 = %f, want -128", __bfloat162float(b[1]));
}

static void test_warp() {
    const unsigned threads = 64;
    std::vector<u32> out(threads * 16, 0);
    std::string err;
    int rc = run(k_warp::kernel, {}, dims(1, threads), &err, out.data());
    CHECK(rc == 0, "%s", err.c_str());
    bool ok = true;
    for (u32 t = 0; t < threads; ++t) {
        const u32* o = &out[t * 16];
        const u32 lane = t % 32, base = t - lane;
        u32 ballot = 0;
        for (u32 l = 0; l < 32; l += 3) ballot |= 1u << l;
        const u32 want[16] = {
            ballot, 1, 0, (base + 5) * 10,
            lane % 8 >= 3 ? t - 3 : t, lane % 8 < 5 ? t + 3 : t, base + (lane ^ 9), 496,
            0xfu << (lane / 4 * 4), (u32)-5, threads / 2, 1,
            lane < 16 ? (lane % 16 < 12 ? lane + 4 : lane) : 0, __float_as_uint((float)(lane ^ 1) * 0.5f),
            __half_as_ushort(__float2half((float)(31 - lane))), 1};
        for (int k = 0; k < 16; ++k)
            if (o[k] != want[k]) {
                ok = false;
                printf("  thread %u op %d: %u (0x%x), want %u (0x%x)\n", t, k, o[k], o[k], want[k], want[k]);
            }
    }
    CHECK(ok, "warp collectives");
}

// A warp runs alone from barrier to barrier, warps in ascending order after the first barrier
// of block 0 and descending in block 1: the warp that runs first sees the other's flag unset.
static void test_warp_order() {
    std::vector<u32> out(4, 7);
    std::string err;
    int rc = run(k_order::kernel, {}, dims(2, 64), &err, out.data());
    CHECK(rc == 0, "%s", err.c_str());
    CHECK(out == std::vector<u32>({0, 1, 1, 0}), "flags seen (block 0: warps 0, 1; block 1: warps 0, 1): %u %u %u %u",
          out[0], out[1], out[2], out[3]);
}

static void test_grid() {
    const unsigned gx = 3, gy = 2, gz = 2, bx = 5, by = 3, bz = 4;
    std::vector<u32> out(gx * gy * gz * bx * by * bz, 0xffffffffu);
    std::string err;
    rnn_emu::LaunchDims d{{gx, gy, gz}, {bx, by, bz}, 0, 3};
    int rc = run(k_grid::kernel, {}, d, &err, out.data());
    CHECK(rc == 0, "%s", err.c_str());
    bool ok = true;
    for (u32 z = 0, i = 0; z < gz; ++z)
        for (u32 y = 0; y < gy; ++y)
            for (u32 x = 0; x < gx; ++x)
                for (u32 tz = 0; tz < bz; ++tz)
                    for (u32 ty = 0; ty < by; ++ty)
                        for (u32 tx = 0; tx < bx; ++tx, ++i)
                            ok &= out[i] == (x | y << 4 | z << 8 | tx << 12 | ty << 16 | tz << 20 | 1u << 24);
    CHECK(ok, "3-D grid and block indices");
}

static void test_dynamic_shared() {
    const unsigned blocks = 5, threads = 100;
    std::vector<float> out(blocks * threads);
    std::string err;
    int rc = run(k_dyn::kernel, {}, dims(blocks, threads, 1, 1, threads * sizeof(float), 2), &err, out.data());
    CHECK(rc == 0, "%s", err.c_str());
    bool ok = true;
    for (u32 b = 0; b < blocks; ++b)
        for (u32 t = 0; t < threads; ++t) ok &= out[b * threads + t] == (float)((threads - 1 - t) * b);
    CHECK(ok, "dynamic shared memory");
}

static void test_cp_async() {
    const unsigned blocks = 3, threads = 64, n = blocks * threads;
    std::vector<float> x(4 * n), out(6 * n, 0.0f);
    for (u32 k = 0; k < 4 * n; ++k) x[k] = (float)k;
    std::string err;
    int rc = run(k_cpasync::kernel, {}, dims(blocks, threads, 1, 1, 0, 2), &err, x.data(), out.data());
    CHECK(rc == 0, "%s", err.c_str());
    bool ok = true;
    for (u32 i = 0; i < n; ++i) {
        const float* o = &out[6 * i];
        const float want[6] = {-1.0f, x[4 * i + 1], -1.0f, x[4 * i + 3], x[4 * i], x[4 * i + 1]};
        for (int e = 0; e < 6; ++e) ok &= o[e] == want[e];
    }
    CHECK(ok, "cp.async copies land when their group is waited for");
}

static void expect_error(const char* what, u64 mode, rnn_emu::LaunchDims d, const char* needle1, const char* needle2) {
    std::vector<u32> out(2048, 0);
    std::string err;
    const int rc = run(k_bad::kernel, {mode}, d, &err, out.data());
    const bool ok = rc != 0 && err.find(needle1) != std::string::npos && err.find(needle2) != std::string::npos;
    CHECK(ok, "%s: rc %d, message \"%s\"", what, rc, err.c_str());
    if (getenv("SELFTEST_VERBOSE")) printf("  %s -> %d: %s\n", what, rc, err.c_str());
}

static void test_errors() {
    expect_error("divergent barrier", 0, dims(2, 64), "divergent __syncthreads", "block (0,0,0)");
    expect_error("exited lane", 1, dims(1, 32), "thread (5,0,0), which has exited", "__shfl_down_sync");
    expect_error("missing lane", 2, dims(1, 40), "lane 8, which does not exist", "thread (32,0,0)");
    expect_error("lane at barrier", 3, dims(1, 32), "waits at __syncthreads", "__shfl_xor_sync");
    expect_error("mismatched collectives", 4, dims(1, 32), "__ballot_sync", "__shfl_sync");
    expect_error("lane not in its mask", 5, dims(1, 32), "does not name its own lane", "thread (1,0,0)");
    expect_error("__trap", 6, dims(4, 32, 1, 1, 0, 2), "block (2,0,0): thread (7,0,0) called __trap()", "");
    expect_error("lane outside the mask", 7, dims(1, 32), "reads lane 2, which is not in the mask", "");
    expect_error("bad width", 8, dims(1, 32), "has width 12, not a power of two", "__shfl_xor_sync");
    expect_error("too many threads", 9, dims(1, 1025), "invalid block", "");
    expect_error("zero grid", 9, dims(0, 32), "invalid grid", "");
    std::vector<u32> out(64);
    std::string err;
    void* bufs[] = {out.data(), out.data()};
    std::vector<u64> words(97, 0);
    char msg[256];
    rnn_emu::LaunchDims d = dims(1, 32);
    int rc = rnn_emu::launch(k_bad::kernel, words.data(), 1, bufs, 2, &d, msg, sizeof msg);
    CHECK(rc != 0 && std::string(msg).find("takes 1 buffers, 2 passed") != std::string::npos, "buffer count: %d %s", rc, msg);
    rc = rnn_emu::launch(k_bad::kernel, words.data(), 97, bufs, 1, &d, msg, sizeof msg);
    CHECK(rc != 0 && std::string(msg).find("97 info words") != std::string::npos, "info words: %d %s", rc, msg);
    words[0] = 9; // no fault
    rc = rnn_emu::launch(k_bad::kernel, words.data(), 96, bufs, 1, &d, msg, 8);
    CHECK(rc == 0 && std::strlen(msg) == 0, "96 words are fine: %d %s", rc, msg);
    // A truncated message stays NUL-terminated.
    words[0] = 0;
    rc = rnn_emu::launch(k_bad::kernel, words.data(), 1, bufs, 1, &d, msg, 8);
    CHECK(rc != 0 && std::strlen(msg) == 7, "truncated message \"%s\"", msg);
    // The emulator still works after failed blocks abandoned their fibers.
    test_reduce();
}

// --- Conversions. ---

static double bits_double(u64 b) { return rnn_bit_cast<double>(b); }

static void test_conversions() {
    struct C { double v; unsigned short half, bf16; };
    const C cases[] = {
        {0.0, 0x0000, 0x0000}, {-0.0, 0x8000, 0x8000}, {1.0, 0x3c00, 0x3f80}, {-2.0, 0xc000, 0xc000},
        {0.1f, 0x2e66, 0x3dcd}, {1.0 / 3, 0x3555, 0x3eab}, {65504.0, 0x7bff, 0x4780},
        {65519.99, 0x7bff, 0x4780}, {65520.0, 0x7c00, 0x4780}, {1e10, 0x7c00, 0x5015}, {-1e10, 0xfc00, 0xd015},
        {INFINITY, 0x7c00, 0x7f80}, {-INFINITY, 0xfc00, 0xff80}, {NAN, 0x7fff, 0x7fff}, {-NAN, 0x7fff, 0x7fff},
        // Ties to even: 1 + 2^-11 (half) / 1 + 2^-8 (bf16) lie halfway and go down to 1.0;
        // 1 + 3 * 2^-11 goes up to the even 1 + 2^-9.
        {1.0 + 0x1p-11, 0x3c00, 0x3f80}, {1.0 + 3 * 0x1p-11, 0x3c02, 0x3f80}, {1.0 + 0x1p-8, 0x3c04, 0x3f80},
        {1.0 + 3 * 0x1p-8, 0x3c0c, 0x3f82},
        // Rounded from double directly: just above the tie goes up, where double -> float
        // -> 16 bits would first round to the tie, then to even (down).
        {1.0 + 0x1p-11 + 0x1p-40, 0x3c01, 0x3f80}, {1.0 + 0x1p-8 + 0x1p-40, 0x3c04, 0x3f81},
        // Subnormal halves: 2^-24 is the smallest; 2^-25 is a tie with 0; 3 * 2^-25 rounds to even 2.
        {0x1p-24, 0x0001, 0x3380}, {0x1p-25, 0x0000, 0x3300}, {0x1p-25 + 0x1p-50, 0x0001, 0x3300},
        {3 * 0x1p-25, 0x0002, 0x33c0}, {1023 * 0x1p-24, 0x03ff, 0x3880}, {1023.5 * 0x1p-24, 0x0400, 0x3880},
        {0x1p-14, 0x0400, 0x3880}, {-0x1p-26, 0x8000, 0xb280},
        // Subnormal bf16: 2^-133 smallest, 2^-134 ties to 0, 3 * 2^-134 to 2 * 2^-133.
        {0x1p-133, 0x0000, 0x0001}, {0x1p-134, 0x0000, 0x0000}, {3 * 0x1p-134, 0x0000, 0x0002},
        {0x1p-134 + 0x1p-160, 0x0000, 0x0001}, {0x1p-126, 0x0000, 0x0080},
        // bf16 overflow: FLT_MAX rounds up to inf; the largest finite bf16 stays.
        {(double)FLT_MAX, 0x7c00, 0x7f80}, {bits_double(0x47efe00000000000ull), 0x7c00, 0x7f7f},
        {1e300, 0x7c00, 0x7f80}, {4.9e-324, 0x0000, 0x0000},
    };
    for (const C& c : cases) {
        const unsigned short h = __half_as_ushort(__double2half(c.v));
        const unsigned short b = __bfloat16_as_ushort(__double2bfloat16(c.v));
        CHECK(h == c.half, "__double2half(%a) = %04x, want %04x", c.v, h, c.half);
        CHECK(b == c.bf16, "__double2bfloat16(%a) = %04x, want %04x", c.v, b, c.bf16);
        if ((double)(float)c.v == c.v || c.v != c.v) { // representable as float: same from float
            const unsigned short hf = __half_as_ushort(__float2half((float)c.v));
            const unsigned short bf = __bfloat16_as_ushort(__float2bfloat16_rn((float)c.v));
            CHECK(hf == c.half && bf == c.bf16, "from float %a: %04x %04x, want %04x %04x", c.v, hf, bf, c.half, c.bf16);
        }
    }
    // Constructors and the float conversion.
    CHECK(__half_as_ushort(__half(0.1f)) == 0x2e66 && __half_as_ushort(__half(0.1)) == 0x2e66, "__half(float/double)");
    CHECK((float)__ushort_as_half(0x0001) == 0x1p-24f && __half2float(__ushort_as_half(0xfbff)) == -65504.0f, "half -> float");
    CHECK(__bfloat162float(__ushort_as_bfloat16(0x0001)) == 0x1p-133f, "bf16 subnormal -> float");
    CHECK(__float_as_uint(__half2float(__ushort_as_half(0x7fff))) == 0x7fffe000u, "NaN payload kept");
    // Integers, rounded once (2049 ties to 2048, 2051 to 2052; 2^53 + 1 is not a double).
    CHECK(__half_as_ushort(__int2half_rn(2049)) == 0x6800 && __half_as_ushort(__int2half_rn(2051)) == 0x6802, "int -> half");
    CHECK(__half_as_ushort(__int2half_rn(-65519)) == 0xfbff && __half_as_ushort(__uint2half_rn(70000u)) == 0x7c00, "int -> half range");
    CHECK(__half_as_ushort(__ll2half_rn(LLONG_MIN)) == 0xfc00 && __half_as_ushort(__ull2half_rn(~0ull)) == 0x7c00, "ll -> half");
    CHECK(__bfloat16_as_ushort(__ll2bfloat16_rn((1ll << 40) + (1ll << 32) + 1)) == 0x5381, "ll -> bf16 above a tie");
    CHECK(__bfloat16_as_ushort(__ull2bfloat16_rn((1ull << 63) + (1ull << 55))) == 0x5f00, "ull -> bf16 tie to even");
    CHECK(__bfloat16_as_ushort(__int2bfloat16_rn(257)) == 0x4380 && __bfloat16_as_ushort(__uint2bfloat16_rn(259u)) == 0x4382, "int -> bf16");
    // Arithmetic rounds once; max / min with NaN and signed zeros.
    const __half one = __float2half(1.0f), eps = __ushort_as_half(0x1000); // 2^-11
    CHECK(__half_as_ushort(__hadd(one, eps)) == 0x3c00 && __half_as_ushort(one + eps + eps) == 0x3c00, "half add ties");
    CHECK(__half_as_ushort(__hmul(__float2half(3.0f), __float2half(1.0f / 3))) == 0x3c00, "half mul");
    const __half qnan = __ushort_as_half(0x7e00), nzero = __ushort_as_half(0x8000), pzero = __ushort_as_half(0);
    CHECK(__half_as_ushort(__hmax(qnan, one)) == 0x3c00 && __half_as_ushort(__hmin(one, qnan)) == 0x3c00, "hmax/hmin NaN");
    CHECK(__half_as_ushort(__hmax(qnan, qnan)) == 0x7fff && __half_as_ushort(__hmax_nan(one, qnan)) == 0x7fff, "hmax_nan");
    CHECK(__half_as_ushort(__hmax(nzero, pzero)) == 0 && __half_as_ushort(__hmin(pzero, nzero)) == 0x8000, "signed zeros");
    CHECK(__hisnan(qnan) && !__hisnan(one) && __hlt(eps, one) && !__hlt(qnan, one) && __hgt(one, eps) && __heq(one, one), "compare");
    CHECK(__half_as_ushort(__hneg(one)) == 0xbc00 && __bfloat16_as_ushort(__hneg(__float2bfloat16(2.0f))) == 0xc000, "neg");
    CHECK(__half_as_ushort(__hsub(one, one)) == 0 && __half_as_ushort(__hdiv(one, __float2half(4.0f))) == 0x3400, "sub/div");
    CHECK(__half2int_rz(__float2half(-2.75f)) == -2 && __half2uint_rz(__float2half(-3.0f)) == 0 && (int)__float2half(70.5f) == 70, "half -> int");
    CHECK(__float2int_rn(2.5f) == 2 && __float2int_rn(3.5f) == 4 && __float2int_rz(-2.7f) == -2 && __float2int_rn(NAN) == 0 &&
              __float2int_rn(1e20f) == INT_MAX && __float2uint_rd(-1.0f) == 0u && __double2ll_rn(-1e30) == LLONG_MIN, "float -> int");
    CHECK(__int_as_float(0x3f800000) == 1.0f && __float_as_int(-2.0f) == (int)0xc0000000 &&
              __longlong_as_double(0x3ff0000000000000ll) == 1.0 && __double_as_longlong(2.0) == 0x4000000000000000ll, "bit casts");
}

// Randomized: half against GCC's _Float16 (libgcc rounds correctly), bf16 against a direct
// nearest-candidate computation.
static void test_conversions_random() {
    std::mt19937_64 rng(12345);
    long mismatches = 0, checked = 0;
    auto bf16_ref = [](double v) -> unsigned short {
        if (v != v) return 0x7fff;
        const double a = std::fabs(v);
        unsigned short lo = 0; // largest bf16 magnitude <= a, by bisection on the bits
        for (int bit = 14; bit >= 0; --bit) {
            const unsigned short c = (unsigned short)(lo | (1u << bit));
            if (c <= 0x7f80 && (double)__bfloat162float(__ushort_as_bfloat16(c)) <= a) lo = c;
        }
        unsigned short r = lo;
        if (lo < 0x7f80) {
            const double below = __bfloat162float(__ushort_as_bfloat16(lo));
            const double above = lo + 1 == 0x7f80 ? 0x1p128 : (double)__bfloat162float(__ushort_as_bfloat16(lo + 1));
            const double dl = a - below, du = above - a; // exact: neighbours of a
            if (du < dl || (du == dl && (lo & 1))) r = (unsigned short)(lo + 1);
        }
        return (unsigned short)(r | (v < 0 ? 0x8000 : 0));
    };
    for (int i = 0; i < 400000; ++i) {
        const u64 r = rng();
        const int kind = i % 4;
        double v;
        if (kind == 0) v = (double)rnn_bit_cast<float>((u32)r);                        // any float
        else if (kind == 1) v = bits_double((r & 0x800fffffffffffffull) | ((u64)(1023 - 30 + (r >> 52) % 50) << 52)); // near the range
        else if (kind == 2) v = bits_double(((r >> 1) & 0x000fffffffffffffull) | ((u64)(1023 - 140 + (r >> 56) % 140) << 52)) * ((r & 1) ? -1 : 1);
        else v = (double)(long long)r / (double)(1ull << (r % 64));
        ++checked;
#ifdef __FLT16_MAX__
        {
            const _Float16 ref = (_Float16)v;
            unsigned short rb;
            std::memcpy(&rb, &ref, 2);
            if (v != v) rb = 0x7fff;
            const unsigned short got = __half_as_ushort(__double2half(v));
            if (got != rb && mismatches++ < 5) printf("  half(%a): %04x, _Float16 %04x\n", v, got, rb);
            const long long li = (long long)r >> (r % 64);
            const _Float16 refi = (_Float16)li;
            std::memcpy(&rb, &refi, 2);
            const unsigned short goti = __half_as_ushort(__ll2half_rn(li));
            if (goti != rb && mismatches++ < 5) printf("  half(%lld): %04x, _Float16 %04x\n", li, goti, rb);
        }
#endif
        const unsigned short gb = __bfloat16_as_ushort(__double2bfloat16(v)), rb = bf16_ref(v);
        if (gb != rb && mismatches++ < 5) printf("  bf16(%a): %04x, reference %04x\n", v, gb, rb);
        if (kind == 0) { // float -> bf16 against the classic bit formula
            const u32 f = (u32)r;
            const unsigned short want = (f & 0x7fffffffu) > 0x7f800000u ? 0x7fff : (unsigned short)((f + 0x7fffu + ((f >> 16) & 1)) >> 16);
            const unsigned short got = __bfloat16_as_ushort(__float2bfloat16(rnn_bit_cast<float>(f)));
            if (got != want && mismatches++ < 5) printf("  bf16 bits %08x: %04x, want %04x\n", f, got, want);
        }
    }
    CHECK(mismatches == 0, "%ld mismatches in %ld random conversions", mismatches, checked);
#ifndef __FLT16_MAX__
    printf("note: no _Float16 in this compiler, half conversions checked by the fixed cases only\n");
#endif
}

// CUDA's overload resolution: float in, float out; mixed float / int picks float.
static void test_overloads() {
    static_assert(std::is_same<decltype(exp(1.0f)), float>::value, "exp(float)");
    static_assert(std::is_same<decltype(exp(1.0)), double>::value, "exp(double)");
    static_assert(std::is_same<decltype(fmax(1.0f, 0)), float>::value, "fmax(float, int) is float under NVRTC");
    static_assert(std::is_same<decltype(pow(2.0f, 3)), float>::value, "pow(float, int)");
    static_assert(std::is_same<decltype(tanh(0.5 * 1.0f)), double>::value, "0.5 * float is double");
    static_assert(std::is_same<decltype(min(3u, 5)), unsigned>::value, "min(unsigned, int)");
    static_assert(std::is_same<decltype(max(1ull, 2ull)), unsigned long long>::value, "max(u64, u64)");
    static_assert(std::is_same<decltype(min(1.0f, 2.0)), double>::value, "min(float, double)");
    static_assert(std::is_same<decltype(abs(-1.5f)), float>::value, "abs(float)");
    static_assert(std::is_same<decltype(rsqrt(4.0f)), float>::value, "rsqrt(float)");
    static_assert(std::is_same<decltype(exp(__float2half(1.0f))), float>::value, "exp(__half) via float");
    static_assert(std::is_same<decltype(::exp(1.0f)), float>::value, "qualified ::exp(float), as in CUDA");
    static_assert(std::is_same<decltype(::__hadd(__half(), __half())), __half>::value, "qualified ::__hadd");
    static_assert(std::is_same<decltype(__hadd(1, 2)), int>::value, "__hadd(int, int)");
    CHECK(__expf(1.0f) == expf(1.0f) && __logf(2.0f) == logf(2.0f) && __powf(2.0f, 0.5f) == powf(2.0f, 0.5f) &&
              __fdividef(1.0f, 4.0f) == 0.25f && __saturatef(NAN) == 0.0f && __saturatef(2.0f) == 1.0f, "fast intrinsics");
    CHECK(exp(1.0f) == expf(1.0f) && log1p(0.5f) == log1pf(0.5f) && erf(0.3f) == erff(0.3f), "float math");
    CHECK(rsqrt(4.0f) == 0.5f && rsqrt(16.0) == 0.25 && fabs(-2.0f) == 2.0f && isnan(NAN) && isinf(-INFINITY), "rsqrt etc");
    CHECK(min(-1, 2) == -1 && max(3u, 4u) == 4u && min(2.0f, 1.0f) == 1.0f && max(-0.5, 0.5) == 0.5, "min/max");
    CHECK(std::fabs(erfinv(0.5) - 0.4769362762044699) < 1e-15 && std::fabs(erfinv(-0.999999) + 3.4589107372754988) < 1e-14, "erfinv");
    CHECK(std::fabs(erfcinv(1e-10) - 4.572824967389486) < 1e-13 && std::fabs(normcdfinv(0.975) - 1.959963984540054) < 1e-13, "erfcinv");
    CHECK(sinpi(1.0) == 0.0 && sinpi(-2.5) == -1.0 && cospi(0.5) == 0.0 && cospi(3.0) == -1.0 && sinpif(0.25f) == sinf(0.78539816f) &&
              std::fabs(sinpi(1.0 / 6) - 0.5) < 1e-16, "sinpi / cospi");
    CHECK(__popc(0xf0f0u) == 8 && __clz(1) == 31 && __ffs(8) == 4 && __brev(1u) == 0x80000000u &&
              __umulhi(0x80000000u, 4u) == 2u && __byte_perm(0x33221100u, 0x77665544u, 0x4321u) == 0x44332211u, "int intrinsics");
}

int main() {
    test_overloads();
    test_conversions();
    test_conversions_random();
    test_stride();
    test_reduce();
    test_atomics();
    test_atomic16();
    test_warp();
    test_grid();
    test_warp_order();
    test_dynamic_shared();
    test_cp_async();
    test_errors();
    if (g_failed) {
        printf("selftest: %d of %d checks FAILED\n", g_failed, g_failed + g_passed);
        return 1;
    }
    printf("selftest: %d checks passed\n", g_passed);
    return 0;
}
