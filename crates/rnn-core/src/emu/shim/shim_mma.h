// shim_mma.h (a part of cuda_shim.h, see there): the warp-level tensor-core primitives of
// rnn-kernels' cuda/mma.cuh, which on a GPU are inline PTX (mma.sync.m16n8k16 on bf16 / f16
// with f32 accumulators, ldmatrix.x4 and its .trans form, cp.async), modelled with PTX's fragment
// layouts (mma.cuh's header states them). Each lane deposits its operands in a per-warp
// scratch area, the warp meets at a __syncwarp (which also fails a warp whose lanes do not
// all come), every lane computes its own results from the deposits, and the warp meets again
// before the area is reused. Products of 16-bit values are exact in float; they are summed in
// float, in order over k, onto the accumulator (the hardware's order and internal precision
// are unspecified, so the last bits of a sum may differ from a GPU's).
#ifndef RNN_EMU_CUDA_SHIM_H
#error "shim_mma.h is a part of cuda_shim.h: include that"
#endif

namespace rnn_emu {
namespace mma {

struct Deposit {
    unsigned a[4], b[2];
    const void* row;
};

// Blocks run on one OS thread each, so a thread-local area per warp of the block suffices.
inline Deposit* warp_scratch() {
    static thread_local Deposit area[32][32]; // [warp][lane], up to 1024 threads per block
    const unsigned lin = threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
    return area[lin / 32 % 32];
}

inline unsigned lane() {
    return (threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z)) % 32;
}

// The 16-bit value `half` (0 low, 1 high) of a fragment word, as float.
template <bool bf16> inline float value(unsigned word, int half) {
    const unsigned short bits = (unsigned short)(word >> (16 * half));
    return bf16 ? rnn_emu::fp::bf16_to_float(bits) : rnn_emu::fp::half_to_float(bits);
}

// A[row][k] of the 16 x 16 A fragment spread over `w`.
template <bool bf16> inline float a_at(const Deposit* w, int row, int k) {
    const int reg = (row >= 8 ? 1 : 0) + (k >= 8 ? 2 : 0);
    const int l = (row % 8) * 4 + (k % 8) / 2;
    return value<bf16>(w[l].a[reg], k % 2);
}

// B[k][n] of the 16 x 8 B fragment spread over `w`.
template <bool bf16> inline float b_at(const Deposit* w, int k, int n) {
    const int l = n * 4 + (k % 8) / 2;
    return value<bf16>(w[l].b[k >= 8 ? 1 : 0], k % 2);
}

} // namespace mma
} // namespace rnn_emu

template <bool bf16> inline void mma_16816(float (&d)[4], const unsigned (&a)[4], const unsigned (&b)[2]) {
    using namespace rnn_emu::mma;
    Deposit* w = warp_scratch();
    const unsigned l = lane();
    std::memcpy(w[l].a, a, sizeof w[l].a);
    std::memcpy(w[l].b, b, sizeof w[l].b);
    __syncwarp();
    const int g = (int)l / 4, t = (int)l % 4;
    for (int i = 0; i < 4; ++i) {
        const int row = g + (i >= 2 ? 8 : 0), col = 2 * t + i % 2;
        float s = d[i];
        for (int k = 0; k < 16; ++k) s += a_at<bf16>(w, row, k) * b_at<bf16>(w, k, col);
        d[i] = s;
    }
    __syncwarp();
}

// Lane l receives, from matrix i, word t of row g (or, transposed, the pair of rows 2t and
// 2t + 1 at column g); matrix i's rows are at the addresses lanes 8i .. 8i + 7 gave.
inline void rnn_emu_ldsm(unsigned (&r)[4], const void* row, bool trans) {
    using namespace rnn_emu::mma;
    Deposit* w = warp_scratch();
    const unsigned l = lane();
    w[l].row = row;
    __syncwarp();
    const unsigned g = l / 4, t = l % 4;
    for (int i = 0; i < 4; ++i) {
        const unsigned short* m[8];
        for (int k = 0; k < 8; ++k) m[k] = (const unsigned short*)w[8 * i + k].row;
        const unsigned short lo = trans ? m[2 * t][g] : m[g][2 * t];
        const unsigned short hi = trans ? m[2 * t + 1][g] : m[g][2 * t + 1];
        r[i] = (unsigned)lo | (unsigned)hi << 16;
    }
    __syncwarp();
}

inline void ldsm_x4(unsigned (&r)[4], const void* row) { rnn_emu_ldsm(r, row, false); }
inline void ldsm_x4_trans(unsigned (&r)[4], const void* row) { rnn_emu_ldsm(r, row, true); }

// cp.async: a copy lands as late as PTX allows, when cp.async.wait_group retires its group,
// so a kernel that reads shared memory before waiting for the copy reads stale data and fails
// its test. Each emulated thread queues its copies (tagged with the group they were issued
// in, i.e. the commits before them); a queue left by a thread that exited without waiting is
// dropped when another block's thread takes its slot. A full queue lands its oldest copy at
// once, which is also legal.
struct PendingCopy {
    void* dst;
    const void* src;
    unsigned group;
};

struct CopyQueue {
    static const unsigned kMax = 64;
    const void* call; // the launch and block the queue belongs to
    uint3 block;
    unsigned commits, n;
    PendingCopy c[kMax];
};

// The queues of one OS thread (one per thread of the block it runs), freed when it exits:
// launches of more than two blocks start OS threads of their own.
struct CopyQueues {
    CopyQueue* q = nullptr;
    ~CopyQueues() { free(q); }
};

inline CopyQueue& copy_queue() {
    static thread_local CopyQueues queues;
    if (!queues.q) {
        queues.q = (CopyQueue*)calloc(rnn_emu::kMaxThreads, sizeof(CopyQueue));
        if (!queues.q) abort();
    }
    const unsigned lin = threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
    CopyQueue& q = queues.q[lin % rnn_emu::kMaxThreads];
    const void* call = rnn_emu::tl_worker ? rnn_emu::tl_worker->kernel.call : nullptr;
    if (q.call != call || q.block.x != blockIdx.x || q.block.y != blockIdx.y || q.block.z != blockIdx.z) {
        q.call = call;
        q.block = blockIdx;
        q.commits = q.n = 0;
    }
    return q;
}

// Lands the queued copies that `keep` says not to keep, in issue order.
template <typename Keep> inline void land(CopyQueue& q, Keep keep) {
    unsigned kept = 0;
    for (unsigned i = 0; i < q.n; ++i) {
        if (keep(q.c[i]))
            q.c[kept++] = q.c[i];
        else
            std::memcpy(q.c[i].dst, q.c[i].src, 16);
    }
    q.n = kept;
}

inline void cp_async_16(void* smem, const void* gmem) {
    CopyQueue& q = copy_queue();
    if (q.n == CopyQueue::kMax) {
        std::memcpy(q.c[0].dst, q.c[0].src, 16);
        std::memmove(&q.c[0], &q.c[1], (q.n - 1) * sizeof(PendingCopy));
        --q.n;
    }
    q.c[q.n++] = PendingCopy{smem, gmem, q.commits};
}
inline void cp_async_commit() { ++copy_queue().commits; }
// All but the N most recently committed groups land; copies not yet committed stay queued.
template <int N> inline void cp_async_wait() {
    CopyQueue& q = copy_queue();
    const unsigned oldest_kept = q.commits > (unsigned)N ? q.commits - N : 0;
    land(q, [&](const PendingCopy& c) { return c.group >= oldest_kept; });
}

// mma.cuh's max_nan (PTX max.NaN.f32) and exp2_approx (ex2.approx.ftz.f32): the NaN-propagating
// max, and 2^x with results below the smallest normal flushed to zero (the hardware's
// approximation error, about 2 ulp, is not modelled: exp2f is exact to 1 ulp).
inline float max_nan(float a, float b) { return (a != a || b != b) ? NAN : (b > a ? b : a); }
inline float exp2_approx(float x) {
    const float r = ::exp2f(x);
    return r < FLT_MIN ? 0.0f : r;
}
