// Attention on tensor cores (f16 / bf16, sm_80+; MMA in attention.cu, whose helpers these
// kernels use). Warps own row tiles of 16 rows: one each, or two in the forward and in the dq
// pass at DMAX <= 64 (every K / V fragment then serves both); the tile products run as
// mma.m16n8k16 with f32 accumulators (mma.cuh, whose fragment layouts these kernels follow: a
// thread holds rows g and g + 8 of each 16-row tile, and columns 2t, 2t + 1 of each 8-column
// tile). Operand tiles are staged in shared memory in T, in rows of DMAX + 8 values, so that
// the 8 rows one ldmatrix reads start on distinct banks; fragments of a block's own rows are
// loaded once into registers, but for the forward's queries at DMAX 128 (Q_SHARED), which
// stay in shared memory (dynamic: SHARED_BYTES) and are read at every key step. Scores are
// kept in base 2 (times log2(e)), so that every exponential is one ex2.approx (exp2_approx)
// and every max one max.NaN (max_nan); the score loops are compiled twice (with_mask), so
// that tiles no mask reaches run them without a branch; masking, NaN and fully masked rows
// follow the scalar kernels.
//   PASS 0, forward: ROWS queries per block, key tiles of COLS; the online softmax runs on the
//     score fragments; the row sums are reduced across the row's 4 threads once, at the end.
//   PASS 1, backward dq (and delta = rowsum(dO * O)): ROWS queries, key tiles of COLS:
//     S = Q K^T, P from the saved lse, dP = dO V^T, dS = P (dP - delta), dQ += dS K.
//   PASS 2, backward dk / dv (and the bias gradient): ROWS keys, query tiles of COLS:
//     S^T = K Q^T, dV += P^T dO, dP^T = V dO^T, dS^T = P^T (dP^T - delta), dK += dS^T Q.
//   Atomic dq (PASS 3, 4; `set_attention_atomic_dq`): FlashAttention-2's one pass over the
//     scores. PASS 3 writes delta and zeroes an f32 dq accumulator; PASS 4 is PASS 2 that also
//     writes its dS tile to shared memory and adds scale * dS K to the accumulator with
//     atomics; the plan's copy then rounds the accumulator into dq. Five tile products instead
//     of the two passes' seven, at the price of an f32 scratch buffer and a dq whose rounding
//     depends on the order of the atomic adds.
// P and dS are rounded to T for their products, as FlashAttention does. The column tiles
// are double-buffered: cp.async copies of tile t + 1 run while tile t is multiplied. Tiles
// that no mask reaches skip the per-element checks; under the causal mask, a warp skips the
// key tiles past its last row (forward and dq).
#if MMA
#define LDS (DMAX + 8)
#define KSTEPS (DMAX / 16)
#define FTILES (DMAX / 8)
#define LOG2E 1.4426950408889634f
// A warp owns WARP_ROWS of its block's rows, MT row tiles of 16: every fragment of the other
// operand it loads from shared memory serves all MT (FlashAttention-2's warps own 32 or more
// rows for the same reason).
#define WARP_ROWS (ROWS * 32 / THREADS)
#define MT (WARP_ROWS / 16)
#if PASS != 3
static_assert(WARP_ROWS % 16 == 0 && ROWS % WARP_ROWS == 0, "whole 16-row tiles per warp");
#endif

typedef unsigned short h16;

template <typename X> struct is_bf16 { static const bool value = false; };
template <> struct is_bf16<__nv_bfloat16> { static const bool value = true; };
#define BF16 (is_bf16<T>::value)

__device__ __forceinline__ h16 bits16(__half x) { return __half_as_ushort(x); }
__device__ __forceinline__ h16 bits16(__nv_bfloat16 x) { return __bfloat16_as_ushort(x); }
__device__ __forceinline__ float value16(h16 x) { return load(*(const T*)&x); }

// Two floats rounded to T, packed as a fragment word (`lo` in the low half).
__device__ __forceinline__ u32 pack2(float lo, float hi) {
    return (u32)bits16(store<T, float>(lo)) | (u32)bits16(store<T, float>(hi)) << 16;
}

// Whether rows of `v` can be read 16 bytes (8 values) at a time: unit feature stride, every
// row start a multiple of 8 values, and `f` features a multiple of 8.
__device__ __forceinline__ bool vector_rows(const View& v, u64 f) {
    return v.s3 == 1 && ((v.off | v.s0 | v.s1 | v.s2 | f) & 7) == 0;
}

// The rows of a view for one (batch, head) pair: the address of its row 0, the row and
// feature strides, the features to copy (`f`) and whether rows can be read 16 bytes at a
// time (vector_rows). Built once per block: the copies inside the tile loops then hold one
// pointer, not the batch and head index arithmetic (registers the DMAX 128 forward lacks).
struct Rows {
    const T* x;
    u64 s2, s3, f;
    bool vector;
};

__device__ __forceinline__ Rows rows_of(const T* x, const View& v, u64 b, u64 h, u64 f) {
    return Rows{x + row_at(v, b, h, 0), v.s2, v.s3, f, vector_rows(v, f)};
}

// Starts copying rows [n0, n0 + COUNT) of `x` into a zero-padded [COUNT][LDS] tile of T's
// bits (features < x.f, rows < n_end): cp.async for rows of 16-byte pieces, plain loads
// otherwise. The caller commits the copies and waits for them.
template <int COUNT>
__device__ __forceinline__ void stage_async(h16 (*tile)[LDS], const Rows& x, u64 n0, u64 n_end) {
    if (x.vector) {
        // A thread copies the same 8 features of every RSTEP-th row: its source address is
        // computed once, then advanced by RSTEP rows (no 64-bit index products per piece).
        constexpr u32 PIECES = DMAX / 8, RSTEP = THREADS / PIECES;
        static_assert(THREADS % PIECES == 0, "whole rows of pieces per pass");
        const u32 c = threadIdx.x % PIECES * 8, rows = n0 < n_end ? (u32)min(n_end - n0, (u64)COUNT) : 0;
        u32 r = threadIdx.x / PIECES;
        const T* src = x.x + (n0 + r) * x.s2 + c;
#pragma unroll
        for (; r < COUNT; r += RSTEP, src += RSTEP * x.s2) {
            if (r < rows && c < x.f)
                cp_async_16(&tile[r][c], src);
            else
                *(uint4*)&tile[r][c] = make_uint4(0, 0, 0, 0);
        }
    } else {
        for (u32 e = threadIdx.x; e < COUNT * DMAX; e += THREADS) {
            const u32 r = e / DMAX, c = e % DMAX;
            const u64 n = n0 + r;
            tile[r][c] = (n < n_end && c < x.f) ? bits16(x.x[n * x.s2 + c * x.s3]) : (h16)0;
        }
    }
}

// The same, waited for (by this thread: a barrier must follow).
template <int COUNT> __device__ __forceinline__ void stage_bits(h16 (*tile)[LDS], const Rows& x, u64 n0, u64 n_end) {
    stage_async<COUNT>(tile, x, n0, n_end);
    cp_async_commit();
    cp_async_wait<0>();
}

// Whether the scores of queries [i0, i0 + ni) and keys [j0, j0 + nj) need the per-element
// masks: a bias, keys past `end`, the causal diagonal, or queries past the last.
__device__ __forceinline__ bool needs_mask(const Problem& p, u64 i0, u64 ni, u64 j0, u64 nj, u64 end) {
    return (p.flags & HAS_BIAS) || j0 + nj > end || ((p.flags & CAUSAL) && j0 + nj - 1 > i0) || i0 + ni > p.nq;
}

__device__ __forceinline__ float quad_max(float x) {
    x = max_nan(x, __shfl_xor_sync(0xffffffffu, x, 1));
    return max_nan(x, __shfl_xor_sync(0xffffffffu, x, 2));
}

// A compile-time flag, for `with_mask`.
template <bool B> struct Flag {
    static const bool value = B;
};

// Runs `f(Flag<masked>())`: the score loops are compiled twice, the masks' per-element
// checks only in the copy for the tiles that need them (see needs_mask), so that the other
// tiles' loops have no branches.
template <typename F> __device__ __forceinline__ void with_mask(bool masked, F&& f) {
    if (masked)
        f(Flag<true>());
    else
        f(Flag<false>());
}

__device__ __forceinline__ float quad_sum(float x) {
    x += __shfl_xor_sync(0xffffffffu, x, 1);
    return x + __shfl_xor_sync(0xffffffffu, x, 2);
}

// The A fragment of rows [row0, row0 + 16) and features [16 s, 16 s + 16) of `tile`.
__device__ __forceinline__ void a_frag(u32 (&a)[4], h16 (*tile)[LDS], u32 row0, int s) {
    const u32 lane = threadIdx.x % 32;
    ldsm_x4(a, &tile[row0 + lane / 8 % 2 * 8 + lane % 8][16 * s + lane / 16 * 8]);
}

// A fragments of rows [row0, row0 + 16) of `tile` over all DMAX features.
__device__ __forceinline__ void a_frags(u32 (&a)[KSTEPS][4], h16 (*tile)[LDS], u32 row0) {
#pragma unroll
    for (int s = 0; s < KSTEPS; ++s) a_frag(a[s], tile, row0, s);
}

// acc[m][n] += A[m] x^T for RT row tiles A[m] (16 rows each) and the NT 8-row tiles of `tile`
// from row0: products over the features. Each fragment of `tile` is loaded once for all RT
// row tiles, so a warp owning more rows reads less shared memory per product.
template <int RT, int NT>
__device__ __forceinline__ void mma_rows_m(float (&acc)[RT][NT][4], const u32 (&a)[RT][KSTEPS][4], h16 (*tile)[LDS],
                                           u32 row0) {
    const u32 lane = threadIdx.x % 32;
#pragma unroll
    for (int n = 0; n < NT; ++n)
#pragma unroll
        for (int kp = 0; kp < KSTEPS / 2; ++kp) {
            u32 x[4];
            ldsm_x4(x, &tile[row0 + 8 * n + lane % 8][32 * kp + lane / 8 * 8]);
            const u32 b0[2] = {x[0], x[1]}, b1[2] = {x[2], x[3]};
#pragma unroll
            for (int m = 0; m < RT; ++m) {
                mma_16816<BF16>(acc[m][n], a[m][2 * kp], b0);
                mma_16816<BF16>(acc[m][n], a[m][2 * kp + 1], b1);
            }
        }
}

// mma_rows_m with the A fragments read from `a_tile` (the RT row tiles from a_row0) one
// feature step at a time, as the products need them (FlashAttention-2's way at head
// dimension 128, where holding them would take 64 registers more for two row tiles); each
// ldmatrix of `tile` then brings two 8-row tiles of one step. NT is even.
template <int RT, int NT>
__device__ __forceinline__ void mma_rows_shared_m(float (&acc)[RT][NT][4], h16 (*a_tile)[LDS], u32 a_row0,
                                                  h16 (*tile)[LDS], u32 row0) {
    static_assert(NT % 2 == 0, "8-row tiles in pairs");
    const u32 lane = threadIdx.x % 32;
#pragma unroll
    for (int s = 0; s < KSTEPS; ++s) {
        u32 a[RT][4];
#pragma unroll
        for (int m = 0; m < RT; ++m) a_frag(a[m], a_tile, a_row0 + 16 * m, s);
#pragma unroll
        for (int n = 0; n < NT; n += 2) {
            u32 x[4];
            ldsm_x4(x, &tile[row0 + 8 * n + lane / 16 * 8 + lane % 8][16 * s + lane / 8 % 2 * 8]);
            const u32 b0[2] = {x[0], x[1]}, b1[2] = {x[2], x[3]};
#pragma unroll
            for (int m = 0; m < RT; ++m) {
                mma_16816<BF16>(acc[m][n], a[m], b0);
                mma_16816<BF16>(acc[m][n + 1], a[m], b1);
            }
        }
    }
}

// mma_rows_m for one row tile.
template <int NT>
__device__ __forceinline__ void mma_rows(float (&acc)[NT][4], const u32 (&a)[KSTEPS][4], h16 (*tile)[LDS], u32 row0) {
    mma_rows_m<1, NT>(*reinterpret_cast<float(*)[1][NT][4]>(&acc), *reinterpret_cast<const u32(*)[1][KSTEPS][4]>(&a),
                      tile, row0);
}

// acc[m] += P[m] x for RT row tiles P[m] (A fragments) and the 16 rows [row0, row0 + 16) of
// `tile` (P's columns) over its features; each fragment of `tile` loaded once for all RT.
template <int RT>
__device__ __forceinline__ void mma_features_m(float (&acc)[RT][FTILES][4], const u32 (&pa)[RT][4], h16 (*tile)[LDS],
                                               u32 row0) {
    const u32 lane = threadIdx.x % 32;
#pragma unroll
    for (int f = 0; f < FTILES; f += 2) {
        u32 x[4];
        ldsm_x4_trans(x, &tile[row0 + lane / 8 % 2 * 8 + lane % 8][8 * f + lane / 16 * 8]);
        const u32 b0[2] = {x[0], x[1]}, b1[2] = {x[2], x[3]};
#pragma unroll
        for (int m = 0; m < RT; ++m) {
            mma_16816<BF16>(acc[m][f], pa[m], b0);
            mma_16816<BF16>(acc[m][f + 1], pa[m], b1);
        }
    }
}

// The A fragment of 16 columns [16 kk, 16 kk + 16) of a fragment tile set (P or dS).
template <int NT> __device__ __forceinline__ void pack_a(u32 (&pa)[4], const float (&x)[NT][4], int kk) {
    pa[0] = pack2(x[2 * kk][0], x[2 * kk][1]);
    pa[1] = pack2(x[2 * kk][2], x[2 * kk][3]);
    pa[2] = pack2(x[2 * kk + 1][0], x[2 * kk + 1][1]);
    pa[3] = pack2(x[2 * kk + 1][2], x[2 * kk + 1][3]);
}

// acc[m] += X[m] tile for RT fragment sets X[m] (P or dS: 16 rows, 8 NT columns each) and the
// 8 NT rows of `tile` from 0: each 16 columns of X packed to 16 bits, then mma_features_m.
template <int RT, int NT>
__device__ __forceinline__ void mma_fragments_m(float (&acc)[RT][FTILES][4], const float (&x)[RT][NT][4],
                                                h16 (*tile)[LDS]) {
#pragma unroll
    for (int kk = 0; kk < NT / 2; ++kk) {
        u32 pa[RT][4];
#pragma unroll
        for (int m = 0; m < RT; ++m) pack_a(pa[m], x[m], kk);
        mma_features_m<RT>(acc, pa, tile, 16 * kk);
    }
}

// mma_fragments_m for one fragment set.
template <int NT>
__device__ __forceinline__ void mma_fragments(float (&acc)[FTILES][4], const float (&x)[NT][4], h16 (*tile)[LDS]) {
    mma_fragments_m<1, NT>(*reinterpret_cast<float(*)[1][FTILES][4]>(&acc),
                           *reinterpret_cast<const float(*)[1][NT][4]>(&x), tile);
}

template <int NT> __device__ __forceinline__ void zero(float (&x)[NT][4]) {
#pragma unroll
    for (int n = 0; n < NT; ++n) x[n][0] = x[n][1] = x[n][2] = x[n][3] = 0.0f;
}

// The base-2 score of query i and key j from the product `dot`, -inf where masked.
__device__ __forceinline__ float score2(const Problem& p, float dot, float scale2, u64 i, u64 j, u64 end,
                                        const T* bias, const View& bv, u64 b, u64 h) {
    if (i >= p.nq || j >= end || ((p.flags & CAUSAL) && j > i)) return neg_inf();
    float x = dot * scale2;
    if (p.flags & HAS_BIAS) x += (float)load(bias[row_at(bv, b, h, i) + j * bv.s3]) * LOG2E;
    return x;
}

// The base-2 score, through the masks only where the tile needs them (see needs_mask).
template <bool MASKED>
__device__ __forceinline__ float tile_score2(const Problem& p, float dot, float scale2, u64 i, u64 j, u64 end,
                                             const T* bias, const View& bv, u64 b, u64 h) {
    return MASKED ? score2(p, dot, scale2, i, j, end, bias, bv, b, h) : dot * scale2;
}

// Issues the copies of the key tile at `j0` (K into `ks`, V into `vs`) as one group.
__device__ __forceinline__ void issue_keys(h16 (*ks)[LDS], h16 (*vs)[LDS], const Rows& kr, const Rows& vr, u64 nk,
                                           u64 j0) {
    stage_async<COLS>(ks, kr, j0, nk);
    stage_async<COLS>(vs, vr, j0, nk);
    cp_async_commit();
}

// Waits for the current tile's copies (one later group may stay in flight when `more` were
// issued after it), then makes them visible to the block.
__device__ __forceinline__ void wait_tile(bool more) {
    if (more)
        cp_async_wait<1>();
    else
        cp_async_wait<0>();
    __syncthreads();
}

// Writes rows [row0, row0 + 16) of a fragment set (times `scale`) to the contiguous
// [rows][cols] output at `out` (rows < n, columns < cols).
__device__ __forceinline__ void store_rows(T* out, const float (&x)[FTILES][4], float scale, u64 row0, u64 n,
                                           u64 cols) {
    const u32 lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
#pragma unroll
    for (int r = 0; r < 2; ++r) {
        const u64 i = row0 + g + 8 * r;
        if (i >= n) continue;
#pragma unroll
        for (int f = 0; f < FTILES; ++f)
#pragma unroll
            for (int e = 0; e < 2; ++e) {
                const u64 c = 8 * f + 2 * t + e;
                if (c < cols) out[i * cols + c] = store<T, float>(x[f][2 * r + e] * scale);
            }
    }
}
#endif

#if PASS == 0 && MMA
#define STILES (COLS / 8)
// K and V tiles are double-buffered: the copies of tile t + 1 run while tile t is multiplied.
#define KV_ROWS (4 * COLS)

// How far (base 2) a row's max may rise above the shift its probabilities are taken against
// before the shift follows it: the probabilities stay below 2^8, and most key tiles leave
// the shift, the row sums and the output as they are (FlashAttention-4's lazy rescaling).
// The result is the same: the output is divided by its row sum, and lse = shift + log(sum).
#define RESCALE_SLACK 8.0f

// The online-softmax step of one key tile for the 16 rows of a row tile (this thread's rows
// row0 and row0 + 8): the products in `s` become base-2 scores (masked if MASKED), then
// probabilities against the shift, which follows the running max when some row's max rose
// more than RESCALE_SLACK above it (or had none yet); `o` and the row sums `l` are then
// rescaled to it.
template <bool MASKED>
__device__ __forceinline__ void softmax_tile(float (&s)[STILES][4], float (&o)[FTILES][4], float (&m)[2],
                                             float (&shift)[2], float (&l)[2], const Problem& p, float scale2,
                                             u64 row0, u64 j0, u64 end, const T* bias, const View& bv, u64 b, u64 h) {
    const u32 t = threadIdx.x % 4;
    float tile_max[2] = {neg_inf(), neg_inf()};
#pragma unroll
    for (int n = 0; n < STILES; ++n)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
            const u64 i = row0 + e / 2 * 8, j = j0 + 8 * n + 2 * t + e % 2;
            s[n][e] = tile_score2<MASKED>(p, s[n][e], scale2, i, j, end, bias, bv, b, h);
            tile_max[e / 2] = max_nan(tile_max[e / 2], s[n][e]);
        }
    bool rescale = false;
#pragma unroll
    for (int r = 0; r < 2; ++r) {
        const float m_new = max_nan(m[r], quad_max(tile_max[r]));
        // A row whose max is still -inf has nothing to rescale (its probabilities are 0); a
        // NaN max compares false: the row's sum and output become NaN through the exponentials.
        rescale |= m_new != neg_inf() && (m[r] == neg_inf() || m_new - shift[r] > RESCALE_SLACK);
        m[r] = m_new;
    }
    // Decided for the whole warp, so that its lanes do not diverge.
    if (__any_sync(0xffffffffu, rescale)) {
        float alpha[2];
#pragma unroll
        for (int r = 0; r < 2; ++r) {
            const float shift_new = m[r] == neg_inf() ? 0.0f : m[r];
            // The shift only rises, but from its start at 0 (a row without a finite score
            // yet, whose sum and output are 0) it may fall far: exp2 of the fall is inf
            // there, and 0 * inf NaN. So alpha <= 1 (fminf keeps 1 for a NaN shift, which
            // makes the row NaN through its probabilities).
            alpha[r] = fminf(exp2_approx(shift[r] - shift_new), 1.0f);
            shift[r] = shift_new;
            l[r] *= alpha[r];
        }
#pragma unroll
        for (int f = 0; f < FTILES; ++f)
#pragma unroll
            for (int e = 0; e < 4; ++e) o[f][e] *= alpha[e / 2];
    }
#pragma unroll
    for (int n = 0; n < STILES; ++n)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
            s[n][e] = exp2_approx(s[n][e] - shift[e / 2]);
            l[e / 2] += s[n][e];
        }
}

// The end of a row tile: o divided by the row sums and stored, the log-sum-exp saved.
__device__ __forceinline__ void finish_rows(float (&o)[FTILES][4], const float (&shift)[2], const float (&l)[2],
                                            const Problem& p, u64 bh, u64 tile_row0, T* out, C* lse) {
    const u32 lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
    float inv[2];
#pragma unroll
    for (int r = 0; r < 2; ++r) {
        const float sum = quad_sum(l[r]);
        inv[r] = sum == 0.0f ? 0.0f : 1.0f / sum;
        const u64 i = tile_row0 + g + 8 * r;
        if (t == 0 && i < p.nq) lse[bh * p.nq + i] = shift[r] / LOG2E + logf(sum);
    }
#pragma unroll
    for (int f = 0; f < FTILES; ++f)
#pragma unroll
        for (int e = 0; e < 4; ++e) o[f][e] *= inv[e / 2];
    store_rows(out + bh * p.nq * p.dv, o, 1.0f, tile_row0, p.nq, p.dv);
}

extern "C" __global__ void __launch_bounds__(THREADS)
    kernel(const Info info, const T* __restrict__ q, const T* __restrict__ k, const T* __restrict__ v,
           const u32* __restrict__ lengths, const T* __restrict__ bias, T* __restrict__ out, C* __restrict__ lse) {
#if Q_SHARED
    // The query rows, then two buffers of COLS rows each for K and two for V: more than the
    // 48 KiB of static shared memory a block may declare at DMAX 128, so dynamic.
    static_assert(SHARED_BYTES >= (ROWS + KV_ROWS) * LDS * sizeof(h16), "the plan's shared memory holds the tiles");
    RNN_DYNAMIC_SHARED(h16, shared_bits);
    h16(*qs)[LDS] = reinterpret_cast<h16(*)[LDS]>(shared_bits);
    h16(*kbuf)[LDS] = qs + ROWS;
#else
    // Two buffers of COLS rows each for K, then two for V; the query rows are staged in the
    // same space before the tiles (their fragments then live in registers).
    __shared__ __align__(16) h16 tiles_smem[(KV_ROWS > ROWS ? KV_ROWS : ROWS)][LDS];
    h16(*qs)[LDS] = tiles_smem;
    h16(*kbuf)[LDS] = tiles_smem;
#endif
    h16(*vbuf)[LDS] = kbuf + 2 * COLS;
    const Problem p = problem(info);
    const float scale2 = (float)p.scale * LOG2E;
    const View qv = view(info, 0), kv = view(info, 1), vv = view(info, 2), bv = view(info, 3);
    const u32 lane = threadIdx.x % 32, warp = threadIdx.x / 32, g = lane / 4;
    const u64 tiles = (p.nq + ROWS - 1) / ROWS;
    for (u64 blk = blockIdx.x; blk < p.bh_count * tiles; blk += gridDim.x) {
        // Causal tiles late in the sequence have the most keys: start them first.
        const u64 tile = (p.flags & CAUSAL) ? tiles - 1 - blk % tiles : blk % tiles;
        const u64 bh = blk / tiles, b = bh / p.heads, h = bh % p.heads, i0 = tile * ROWS;
        const u64 warp_row0 = i0 + WARP_ROWS * warp; // row tile m: WARP_ROWS * warp + 16 m
        const u64 end = key_end(p, lengths, b);
        const Rows kr = rows_of(k, kv, b, h, p.d), vr = rows_of(v, vv, b, h, p.dv);
        const u64 stop = (p.flags & CAUSAL) && i0 + ROWS < end ? i0 + ROWS : end;
        // 32 bits: 2^32 key tiles would not fit a device's memory (fewer loop registers).
        const u32 steps = (u32)((stop + COLS - 1) / COLS);
        // Under the causal mask, key tiles past this warp's last row add nothing to its rows
        // (every score there is masked): the warp skips their products.
        const u64 warp_stop = (p.flags & CAUSAL) ? warp_row0 + WARP_ROWS : stop;
        __syncthreads();
#if Q_SHARED
        // The queries have their own space: the first key tile's copies run beside theirs.
        if (steps > 0) issue_keys(kbuf, vbuf, kr, vr, p.nk, 0);
#endif
        stage_bits<ROWS>(qs, rows_of(q, qv, b, h, p.d), i0, p.nq);
        __syncthreads();
#if !Q_SHARED
        u32 qa[MT][KSTEPS][4];
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) a_frags(qa[mt], qs, WARP_ROWS * warp + 16 * mt);
        __syncthreads();
        if (steps > 0) issue_keys(kbuf, vbuf, kr, vr, p.nk, 0);
#endif
        float o[MT][FTILES][4], m[MT][2], shift[MT][2], l[MT][2];
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) {
            zero(o[mt]);
            m[mt][0] = m[mt][1] = neg_inf();
            shift[mt][0] = shift[mt][1] = l[mt][0] = l[mt][1] = 0.0f;
        }
        for (u32 step = 0; step < steps; ++step) {
            const u64 j0 = (u64)step * COLS;
            h16(*ks)[LDS] = kbuf + step % 2 * COLS;
            h16(*vs)[LDS] = vbuf + step % 2 * COLS;
            const bool prefetch = step + 1 < steps;
            if (prefetch)
                issue_keys(kbuf + (step + 1) % 2 * COLS, vbuf + (step + 1) % 2 * COLS, kr, vr, p.nk, j0 + COLS);
            wait_tile(prefetch);
            if (j0 < warp_stop) {
                float s[MT][STILES][4];
#pragma unroll
                for (int mt = 0; mt < MT; ++mt) zero(s[mt]);
#if Q_SHARED
                mma_rows_shared_m(s, qs, WARP_ROWS * warp, ks, 0);
#else
                mma_rows_m(s, qa, ks, 0);
#endif
#pragma unroll
                for (int mt = 0; mt < MT; ++mt) {
                    const u64 tile_row0 = warp_row0 + 16 * mt;
                    with_mask(needs_mask(p, tile_row0, 16, j0, COLS, end), [&](auto masked) {
                        softmax_tile<decltype(masked)::value>(s[mt], o[mt], m[mt], shift[mt], l[mt], p, scale2,
                                                              tile_row0 + g, j0, end, bias, bv, b, h);
                    });
                }
                mma_fragments_m(o, s, vs);
            }
            __syncthreads();
        }
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) finish_rows(o[mt], shift[mt], l[mt], p, bh, warp_row0 + 16 * mt, out, lse);
    }
}
#endif

#if PASS == 1 && MMA
#define STILES (COLS / 8)
#define SMEM_ROWS (2 * ROWS > 4 * COLS ? 2 * ROWS : 4 * COLS)

// dS = P (dP - delta) of one key tile for the 16 rows of a row tile (this thread's rows row0
// and row0 + 8), written over the products S in `s`; dP in `dp`.
template <bool MASKED>
__device__ __forceinline__ void ds_tile(float (&s)[STILES][4], const float (&dp)[STILES][4], const float (&shift)[2],
                                        const float (&dl)[2], const Problem& p, float scale2, u64 row0, u64 j0,
                                        u64 end, const T* bias, const View& bv, u64 b, u64 h) {
    const u32 t = threadIdx.x % 4;
#pragma unroll
    for (int n = 0; n < STILES; ++n)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
            const u64 i = row0 + e / 2 * 8, j = j0 + 8 * n + 2 * t + e % 2;
            const float x = tile_score2<MASKED>(p, s[n][e], scale2, i, j, end, bias, bv, b, h);
            const float pr = exp2_approx(x - shift[e / 2]);
            s[n][e] = !MASKED || (i < p.nq && j < p.nk) ? pr * (dp[n][e] - dl[e / 2]) : 0.0f;
        }
}

extern "C" __global__ void __launch_bounds__(THREADS)
    kernel(const Info info, const T* __restrict__ q, const T* __restrict__ k, const T* __restrict__ v,
           const T* __restrict__ o, const T* __restrict__ d_o, const C* __restrict__ lse,
           const u32* __restrict__ lengths, const T* __restrict__ bias, T* __restrict__ dq, C* __restrict__ delta) {
    // First the Q and dO rows (2 ROWS rows), then two buffers of a K and a V tile (4 COLS rows)
    // in the same space: buffer s holds K at rows 2 s COLS, V COLS rows further.
    __shared__ __align__(16) h16 tiles_smem[SMEM_ROWS][LDS];
    __shared__ float deltas[ROWS];
    const Problem p = problem(info);
    const float scale2 = (float)p.scale * LOG2E;
    const View qv = view(info, 0), kv = view(info, 1), vv = view(info, 2), ov = view(info, 3), dov = view(info, 4),
               bv = view(info, 5);
    const u32 lane = threadIdx.x % 32, warp = threadIdx.x / 32, g = lane / 4;
    const u64 tiles = (p.nq + ROWS - 1) / ROWS;
    for (u64 blk = blockIdx.x; blk < p.bh_count * tiles; blk += gridDim.x) {
        const u64 tile = (p.flags & CAUSAL) ? tiles - 1 - blk % tiles : blk % tiles;
        const u64 bh = blk / tiles, b = bh / p.heads, h = bh % p.heads, i0 = tile * ROWS;
        const u64 warp_row0 = i0 + WARP_ROWS * warp; // row tile m: WARP_ROWS * warp + 16 m
        const u64 end = key_end(p, lengths, b);
        const Rows kr = rows_of(k, kv, b, h, p.d), vr = rows_of(v, vv, b, h, p.dv);
        const u64 stop = (p.flags & CAUSAL) && i0 + ROWS < end ? i0 + ROWS : end;
        const u64 steps = (stop + COLS - 1) / COLS;
        const u64 warp_stop = (p.flags & CAUSAL) ? warp_row0 + WARP_ROWS : stop; // as in the forward
        __syncthreads();
        stage_bits<ROWS>(tiles_smem, rows_of(q, qv, b, h, p.d), i0, p.nq);
        stage_bits<ROWS>(tiles_smem + ROWS, rows_of(d_o, dov, b, h, p.dv), i0, p.nq);
        __syncthreads();
        // delta = rowsum(dO * O): two threads per row, in float as the scalar kernel.
        for (u32 r = threadIdx.x / 2; r < ROWS; r += THREADS / 2) {
            const u64 i = i0 + r;
            float dl = 0.0f;
            if (i < p.nq)
                for (u64 c = threadIdx.x % 2; c < p.dv; c += 2)
                    dl += value16(tiles_smem[ROWS + r][c]) * (float)load(o[row_at(ov, b, h, i) + c * ov.s3]);
            dl += __shfl_xor_sync(0xffffffffu, dl, 1);
            if (threadIdx.x % 2 == 0) {
                deltas[r] = dl;
                if (i < p.nq) delta[bh * p.nq + i] = dl;
            }
        }
        u32 qa[MT][KSTEPS][4], da[MT][KSTEPS][4];
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) {
            a_frags(qa[mt], tiles_smem, WARP_ROWS * warp + 16 * mt);
            a_frags(da[mt], tiles_smem, ROWS + WARP_ROWS * warp + 16 * mt);
        }
        __syncthreads();
        float shift[MT][2], dl[MT][2];
#pragma unroll
        for (int mt = 0; mt < MT; ++mt)
#pragma unroll
            for (int r = 0; r < 2; ++r) {
                const u64 i = warp_row0 + 16 * mt + g + 8 * r;
                shift[mt][r] = i < p.nq ? lse_shift(lse[bh * p.nq + i]) * LOG2E : 0.0f;
                dl[mt][r] = deltas[WARP_ROWS * warp + 16 * mt + g + 8 * r];
            }
        if (steps > 0) {
            issue_keys(tiles_smem, tiles_smem + COLS, kr, vr, p.nk, 0);
        }
        float acc[MT][FTILES][4];
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) zero(acc[mt]);
        for (u64 step = 0; step < steps; ++step) {
            const u64 j0 = step * COLS;
            h16(*ks)[LDS] = tiles_smem + step % 2 * 2 * COLS;
            h16(*vs)[LDS] = ks + COLS;
            if (step + 1 < steps) {
                h16(*next)[LDS] = tiles_smem + (step + 1) % 2 * 2 * COLS;
                issue_keys(next, next + COLS, kr, vr, p.nk, j0 + COLS);
            }
            wait_tile(step + 1 < steps);
            if (j0 < warp_stop) {
                float s[MT][STILES][4], dp[MT][STILES][4];
#pragma unroll
                for (int mt = 0; mt < MT; ++mt) {
                    zero(s[mt]);
                    zero(dp[mt]);
                }
                mma_rows_m(s, qa, ks, 0);
                mma_rows_m(dp, da, vs, 0);
#pragma unroll
                for (int mt = 0; mt < MT; ++mt) {
                    const u64 tile_row0 = warp_row0 + 16 * mt;
                    with_mask(needs_mask(p, tile_row0, 16, j0, COLS, end), [&](auto masked) {
                        ds_tile<decltype(masked)::value>(s[mt], dp[mt], shift[mt], dl[mt], p, scale2, tile_row0 + g, j0,
                                                         end, bias, bv, b, h);
                    });
                }
                mma_fragments_m(acc, s, ks);
            }
            __syncthreads();
        }
#pragma unroll
        for (int mt = 0; mt < MT; ++mt)
            store_rows(dq + bh * p.nq * p.d, acc[mt], (float)p.scale, warp_row0 + 16 * mt, p.nq, p.d);
    }
}
#endif

#if (PASS == 2 || PASS == 4) && MMA
#define STILES (COLS / 8)
#define DQ_ATOMIC (PASS == 4)
// Whether the warp's K and V fragments stay in registers for the whole query loop (at
// DMAX 128 they would spill beside dK's and dV's accumulators).
#define HOLD_KV (DMAX <= 64)
#if DQ_ATOMIC
// The dq product's split of the work: warp w takes the 16 queries of group w % QGROUPS and
// the PART_TILES feature tiles of part w / QGROUPS, CHUNK tiles at a time (fewer live
// accumulators beside dK's and dV's).
#define QGROUPS (COLS / 16)
#define FPARTS (THREADS / 32 / QGROUPS)
#define PART_TILES (FTILES / FPARTS)
#define CHUNK 2
#define DS_LD (ROWS + 8)
static_assert(COLS % 16 == 0 && (THREADS / 32) % QGROUPS == 0, "query groups of 16 rows, whole per warp");
static_assert(FTILES % FPARTS == 0 && PART_TILES % CHUNK == 0 && CHUNK % 2 == 0, "feature parts of tile pairs");

// Adds scale * dS K for the query tile at i0 (dS in `ds` as [COLS queries][ROWS keys] of T's
// bits, K the block's key tile) to the f32 accumulator rows `acc_out` (rows < nq, features < d).
__device__ __forceinline__ void add_dq_tile(float* acc_out, h16 (*ds)[DS_LD], h16 (*ks)[LDS], u64 i0,
                                            const Problem& p) {
    const u32 lane = threadIdx.x % 32, warp = threadIdx.x / 32, g = lane / 4, t = lane % 4;
    const u32 qrow = warp % QGROUPS * 16, first_tile = warp / QGROUPS * PART_TILES;
#pragma unroll
    for (int f0 = 0; f0 < PART_TILES; f0 += CHUNK) {
        float acc[CHUNK][4];
        zero(acc);
        // One 16-key step of dS at a time (its fragment reloaded per chunk: fewer live
        // registers beside dK's and dV's accumulators).
#pragma unroll
        for (int s = 0; s < ROWS / 16; ++s) {
            u32 a[4];
            ldsm_x4(a, &ds[qrow + lane / 8 % 2 * 8 + lane % 8][16 * s + lane / 16 * 8]);
#pragma unroll
            for (int f = 0; f < CHUNK; f += 2) {
                u32 x[4];
                ldsm_x4_trans(x, &ks[16 * s + lane / 8 % 2 * 8 + lane % 8][8 * (first_tile + f0 + f) + lane / 16 * 8]);
                const u32 b0[2] = {x[0], x[1]}, b1[2] = {x[2], x[3]};
                mma_16816<BF16>(acc[f], a, b0);
                mma_16816<BF16>(acc[f + 1], a, b1);
            }
        }
#pragma unroll
        for (int f = 0; f < CHUNK; ++f)
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                const u64 i = i0 + qrow + g + 8 * (e / 2), c = 8 * (first_tile + f0 + f) + 2 * t + e % 2;
                if (i < p.nq && c < p.d) atomicAdd(&acc_out[i * p.d + c], acc[f][e] * (float)p.scale);
            }
    }
}
#endif
// Issues the copies of query tile `i0` (Q, then dO COLS rows further) into `tile`, and writes
// the tile's lse shifts and deltas (ordinary stores: a barrier must come before their use).
__device__ __forceinline__ void issue_queries(h16 (*tile)[LDS], float* shifts, float* deltas, const Rows& qr,
                                              const Rows& dor, const C* lse, const C* delta, const Problem& p, u64 bh,
                                              u64 i0) {
    stage_async<COLS>(tile, qr, i0, p.nq);
    stage_async<COLS>(tile + COLS, dor, i0, p.nq);
    for (u32 e = threadIdx.x; e < COLS; e += THREADS) {
        const bool in = i0 + e < p.nq;
        shifts[e] = in ? lse_shift(lse[bh * p.nq + i0 + e]) * LOG2E : 0.0f;
        deltas[e] = in ? delta[bh * p.nq + i0 + e] : 0.0f;
    }
    cp_async_commit();
}
// Q and dO tiles (and their lse shifts and deltas) are double-buffered.
extern "C" __global__ void __launch_bounds__(THREADS)
    kernel(const Info info, const T* __restrict__ q, const T* __restrict__ k, const T* __restrict__ v,
           const T* __restrict__ d_o, const C* __restrict__ lse, const C* __restrict__ delta,
           const u32* __restrict__ lengths, const T* __restrict__ bias, T* __restrict__ dk, T* __restrict__ dv,
           T* __restrict__ dbias
#if DQ_ATOMIC
           ,
           float* __restrict__ dq_acc
#endif
    ) {
    __shared__ __align__(16) h16 ks[ROWS][LDS];
#if DQ_ATOMIC
    __shared__ __align__(16) h16 ds_tile[COLS][DS_LD];
#endif
    __shared__ __align__(16) h16 vs[ROWS][LDS];
    // Buffer s: Q at rows 2 s COLS, dO COLS rows further.
    __shared__ __align__(16) h16 qdo[4 * COLS][LDS];
    __shared__ float shifts[2][COLS];
    __shared__ float deltas[2][COLS];
    const Problem p = problem(info);
    const float scale2 = (float)p.scale * LOG2E;
    const View qv = view(info, 0), kv = view(info, 1), vv = view(info, 2), dov = view(info, 4), bv = view(info, 5);
    const u32 lane = threadIdx.x % 32, warp = threadIdx.x / 32, g = lane / 4, t = lane % 4;
    const bool bias_grad = p.flags & BIAS_GRAD;
    const u64 tiles = (p.nk + ROWS - 1) / ROWS;
    for (u64 blk = blockIdx.x; blk < p.bh_count * tiles; blk += gridDim.x) {
        const u64 bh = blk / tiles, b = bh / p.heads, h = bh % p.heads, j0 = blk % tiles * ROWS;
        const u64 col0 = j0 + 16 * warp + g; // this thread's keys: col0 and col0 + 8
        const u64 end = key_end(p, lengths, b);
        // Queries before the tile's first key, or every query when the keys are cut off by
        // the lengths, see none of its keys; the bias gradient is still written there.
        const u64 first = bias_grad ? 0 : ((p.flags & CAUSAL) ? j0 / COLS * COLS : 0);
        const u64 last = bias_grad || j0 < end ? p.nq : 0;
        const u64 steps = last > first ? (last - first + COLS - 1) / COLS : 0;
        cp_async_wait<0>(); // the key tile of a block that had no query tiles
        __syncthreads();
        stage_async<ROWS>(ks, rows_of(k, kv, b, h, p.d), j0, p.nk);
        stage_async<ROWS>(vs, rows_of(v, vv, b, h, p.dv), j0, p.nk);
        cp_async_commit();
        const Rows qr = rows_of(q, qv, b, h, p.d), dor = rows_of(d_o, dov, b, h, p.dv);
        if (steps > 0) issue_queries(qdo, shifts[0], deltas[0], qr, dor, lse, delta, p, bh, first);
        float dk_acc[FTILES][4], dv_acc[FTILES][4];
        zero(dk_acc);
        zero(dv_acc);
        // The A fragments of the warp's K and V rows: loaded once where the registers hold
        // them beside the accumulators (HOLD_KV), else again at every step.
        u32 ka[KSTEPS][4], va[KSTEPS][4];
        if (HOLD_KV && steps > 0) {
            cp_async_wait<1>(); // the K / V group; the first query tile's may stay in flight
            __syncthreads();
            a_frags(ka, ks, 16 * warp);
            a_frags(va, vs, 16 * warp);
        }
        for (u64 step = 0; step < steps; ++step) {
            const u64 i0 = first + step * COLS, buf = step % 2;
            h16(*qs)[LDS] = qdo + buf * 2 * COLS;
            h16(*dos)[LDS] = qs + COLS;
            if (step + 1 < steps)
                issue_queries(qdo + (buf ^ 1) * 2 * COLS, shifts[buf ^ 1], deltas[buf ^ 1], qr, dor, lse, delta, p, bh,
                              i0 + COLS);
            wait_tile(step + 1 < steps);
            float s[STILES][4], dp[STILES][4];
            zero(s);
            zero(dp);
            if (!HOLD_KV) a_frags(ka, ks, 16 * warp);
            mma_rows(s, ka, qs, 0);
            if (!HOLD_KV) a_frags(va, vs, 16 * warp);
            mma_rows(dp, va, dos, 0);
            // P^T over S^T and dS^T over dP^T; the bias gradient (a bias masks every tile, see
            // needs_mask) and the atomic pass's dS tile written on the way.
            with_mask(needs_mask(p, i0, COLS, j0, ROWS, end), [&](auto masked) {
                constexpr bool MASKED = decltype(masked)::value;
#pragma unroll
                for (int n = 0; n < STILES; ++n)
#pragma unroll
                    for (int e = 0; e < 4; ++e) {
                        const u32 ii = 8 * n + 2 * t + e % 2;
                        const u64 j = col0 + e / 2 * 8, i = i0 + ii;
                        const bool in = !MASKED || (i < p.nq && j < p.nk);
                        const float x = tile_score2<MASKED>(p, s[n][e], scale2, i, j, end, bias, bv, b, h);
                        const float pr = in ? exp2_approx(x - shifts[buf][ii]) : 0.0f;
                        const float ds = in ? pr * (dp[n][e] - deltas[buf][ii]) : 0.0f;
                        if (MASKED && bias_grad && in) dbias[(bh * p.nq + i) * p.nk + j] = store<T, float>(ds);
                        s[n][e] = pr;
                        dp[n][e] = ds;
#if DQ_ATOMIC
                        ds_tile[ii][16 * warp + g + 8 * (e / 2)] = bits16(store<T, float>(ds));
#endif
                    }
            });
            mma_fragments(dv_acc, s, dos);
            mma_fragments(dk_acc, dp, qs);
#if DQ_ATOMIC
            __syncthreads(); // the whole dS tile is written
            add_dq_tile(dq_acc + bh * p.nq * p.d, ds_tile, ks, i0, p);
#endif
            __syncthreads();
        }
        store_rows(dk + bh * p.nk * p.d, dk_acc, (float)p.scale, j0 + 16 * warp, p.nk, p.d);
        store_rows(dv + bh * p.nk * p.dv, dv_acc, 1.0f, j0 + 16 * warp, p.nk, p.dv);
    }
}
#endif

#if PASS == 3 && MMA
// The atomic backward's first launch: delta = rowsum(dO * O) of every query row (in float,
// as the dq pass), and the row's f32 dq accumulator zeroed. A warp per row.
extern "C" __global__ void __launch_bounds__(THREADS)
    kernel(const Info info, const T* __restrict__ o, const T* __restrict__ d_o, C* __restrict__ delta,
           float* __restrict__ dq_acc) {
    const Problem p = problem(info);
    const View ov = view(info, 3), dov = view(info, 4);
    const u32 lane = threadIdx.x % 32, warps = THREADS / 32;
    const u64 rows = p.bh_count * p.nq;
    for (u64 r = (u64)blockIdx.x * warps + threadIdx.x / 32; r < rows; r += (u64)gridDim.x * warps) {
        const u64 bh = r / p.nq, i = r % p.nq, b = bh / p.heads, h = bh % p.heads;
        float dl = 0.0f;
        for (u64 c = lane; c < p.dv; c += 32)
            dl += (float)load(d_o[row_at(dov, b, h, i) + c * dov.s3]) * (float)load(o[row_at(ov, b, h, i) + c * ov.s3]);
#pragma unroll
        for (int m = 16; m > 0; m /= 2) dl += __shfl_xor_sync(0xffffffffu, dl, m);
        if (lane == 0) delta[r] = dl;
        for (u64 c = lane; c < p.d; c += 32) dq_acc[r * p.d + c] = 0.0f;
    }
}
#endif

