// Scaled dot-product attention, FlashAttention-2 style: the Nq x Nk scores are never stored;
// blocks walk tiles of keys (or queries) staged in shared memory. One template, three passes
// selected by PASS:
//   0  forward: one block per (batch * head, tile of ROWS queries); an online softmax over
//      key tiles of COLS keys; writes the output and the per-row log-sum-exp (lse).
//   1  backward, dq: one block per (batch * head, tile of ROWS queries); recomputes the
//      probabilities from lse; writes dq and delta = rowsum(dO * O) for pass 2.
//   2  backward, dk / dv (and the bias gradient): one block per (batch * head, tile of ROWS
//      keys), walking tiles of COLS queries.
// The dq pass is separate from the dk / dv pass (rather than atomic adds of dq from every
// key tile): both passes own their outputs, so results are deterministic and need no f32
// scratch buffer, at the price of recomputing the scores once more. On tensor cores the
// FlashAttention-2 way is there too, as an option (passes 3 and 4 in attention_mma.cu): one pass
// over the scores, dq added with f32 atomics.
//
// Every ROWS-row is handled by TPR threads of one warp: each computes the scores of COLS/TPR
// columns of the tile, and owns DMAX/TPR output features (feature c = sub + TPR * n). Values
// are computed in C (float for f32 / f16 / bf16, double for f64), with scalar FMAs. Tiles
// are zero-padded to DMAX features, so the dot products run over DMAX without checks.
//
// MMA (f16 / bf16, sm_80+): the three passes on tensor cores, in attention_mma.cu (appended to
// this file), with the same semantics and arguments.
//
// Semantics as attention's composition (fused/attention/compose.rs): causal is top-left
// aligned (query i sees keys j <= i); keys j >= lengths[b] are masked; a masked score is
// -inf; a row whose every key is masked has output 0, lse -inf and zero gradients; NaN
// propagates through the row max.
//
// info: heads, nq, nk, d, dv, scale (double bits), flags (1 causal, 2 lengths, 4 bias,
// 8 bias gradient), batch * heads, then views of 5 words each (start offset, strides of the
// 4 dims): pass 0: q, k, v, bias; passes 1, 2: q, k, v, o, do, bias. Outputs and the
// lse / delta vectors are contiguous.

typedef {{T}} T;
typedef {{C}} C;

#define PASS {{pass}}
#define MMA {{mma}}
#define DMAX {{dmax}}
#define ROWS {{rows}}
#define COLS {{cols}}
#define TPR 8
#define THREADS {{threads}}
// A block's dynamic shared memory: only the forward on tensor cores at DMAX 128 has any,
// where it keeps its queries in shared memory (attention_mma.cu); 0 elsewhere.
#define SHARED_BYTES {{shared_bytes}}
#define Q_SHARED (SHARED_BYTES > 0)
#define FEATS (DMAX / TPR)
// The row stride of shared tiles: one more than DMAX, so that the TPR threads of a row,
// which read TPR different tile rows at the same feature, hit different banks.
#define LD (DMAX + 1)
#define PER_THREAD (COLS / TPR)

#define CAUSAL 1ull
#define LENGTHS 2ull
#define HAS_BIAS 4ull
#define BIAS_GRAD 8ull
#define VIEWS 8

__device__ __forceinline__ C neg_inf() { return (C)__int_as_float(0xff800000); }
__device__ __forceinline__ float exp_c(float x) { return expf(x); }
__device__ __forceinline__ double exp_c(double x) { return exp(x); }
__device__ __forceinline__ float log_c(float x) { return logf(x); }
__device__ __forceinline__ double log_c(double x) { return log(x); }

// The max that propagates NaN (as the composition's max_keepdim).
__device__ __forceinline__ C nan_max(C a, C b) {
    if (a != a) return a;
    if (b != b) return b;
    return b > a ? b : a;
}

// A rank-4 view [B, H, N, F]: element (b, h, n, f) is at off + b*s0 + h*s1 + n*s2 + f*s3.
struct View {
    u64 off, s0, s1, s2, s3;
};

__device__ __forceinline__ View view(const Info& info, int which) {
    const u64* w = info.w + VIEWS + 5 * which;
    return View{w[0], w[1], w[2], w[3], w[4]};
}

__device__ __forceinline__ u64 row_at(const View& v, u64 b, u64 h, u64 n) {
    return v.off + b * v.s0 + h * v.s1 + n * v.s2;
}

// The problem and the block's place in it.
struct Problem {
    u64 heads, nq, nk, d, dv, flags, bh_count;
    C scale;
};

__device__ __forceinline__ Problem problem(const Info& info) {
    Problem p;
    p.heads = info.w[0];
    p.nq = info.w[1];
    p.nk = info.w[2];
    p.d = info.w[3];
    p.dv = info.w[4];
    p.scale = (C)__longlong_as_double((long long)info.w[5]);
    p.flags = info.w[6];
    p.bh_count = info.w[7];
    return p;
}

// The keys any query may see: [0, end) (lengths cut it; a later mask is per query).
__device__ __forceinline__ u64 key_end(const Problem& p, const u32* lengths, u64 b) {
    u64 end = p.nk;
    if (p.flags & LENGTHS) end = (u64)lengths[b] < end ? (u64)lengths[b] : end;
    return end;
}

// The scaled score of query i and key j (plus the bias), -inf where the mask hides it.
__device__ __forceinline__ C score(const Problem& p, C dot, u64 i, u64 j, u64 end, const T* bias, const View& bv,
                                   u64 b, u64 h) {
    if (i >= p.nq || j >= end || ((p.flags & CAUSAL) && j > i)) return neg_inf();
    C x = dot * p.scale;
    if (p.flags & HAS_BIAS) x += (C)load(bias[row_at(bv, b, h, i) + j * bv.s3]);
    return x;
}

// rows [n0, n0 + count) of a view into a zero-padded [count][LD] tile (features < f).
template <int COUNT>
__device__ __forceinline__ void stage(C (*tile)[LD], const T* x, const View& v, u64 b, u64 h, u64 n0, u64 n_end,
                                      u64 f) {
    for (u32 e = threadIdx.x; e < COUNT * DMAX; e += THREADS) {
        const u32 r = e / DMAX, c = e % DMAX;
        const u64 n = n0 + r;
        tile[r][c] = (n < n_end && c < f) ? (C)load(x[row_at(v, b, h, n) + c * v.s3]) : (C)0;
    }
}

__device__ __forceinline__ C dot_row(const C* a, const C* b) {
    C s = 0;
#pragma unroll 8
    for (int c = 0; c < DMAX; ++c) s += a[c] * b[c];
    return s;
}

// The lse as a shift: a fully masked row (-inf) shifts by 0, so its probabilities are 0.
__device__ __forceinline__ C lse_shift(C lse) { return lse == neg_inf() ? (C)0 : lse; }

#if PASS == 0 && !MMA
extern "C" __global__ void kernel(const Info info, const T* __restrict__ q, const T* __restrict__ k,
                                  const T* __restrict__ v, const u32* __restrict__ lengths,
                                  const T* __restrict__ bias, T* __restrict__ out, C* __restrict__ lse) {
    __shared__ C qs[ROWS][LD];
    __shared__ C ks[COLS][LD];
    __shared__ C vs[COLS][LD];
    __shared__ C ss[ROWS][COLS];
    const Problem p = problem(info);
    const View qv = view(info, 0), kv = view(info, 1), vv = view(info, 2), bv = view(info, 3);
    const u32 r = threadIdx.x / TPR, sub = threadIdx.x % TPR;
    const u64 tiles = (p.nq + ROWS - 1) / ROWS;
    for (u64 blk = blockIdx.x; blk < p.bh_count * tiles; blk += gridDim.x) {
        const u64 bh = blk / tiles, b = bh / p.heads, h = bh % p.heads, i0 = blk % tiles * ROWS, i = i0 + r;
        const u64 end = key_end(p, lengths, b);
        // Causal: keys after the tile's last query are hidden from all of its rows.
        const u64 stop = (p.flags & CAUSAL) && i0 + ROWS < end ? i0 + ROWS : end;
        __syncthreads();
        stage<ROWS>(qs, q, qv, b, h, i0, p.nq, p.d);
        C m = neg_inf(), shift = 0, l = 0, acc[FEATS];
#pragma unroll
        for (int f = 0; f < FEATS; ++f) acc[f] = 0;
        for (u64 j0 = 0; j0 < stop; j0 += COLS) {
            __syncthreads();
            stage<COLS>(ks, k, kv, b, h, j0, p.nk, p.d);
            stage<COLS>(vs, v, vv, b, h, j0, p.nk, p.dv);
            __syncthreads();
            for (int t = 0; t < PER_THREAD; ++t) {
                const u32 jj = sub + TPR * t;
                ss[r][jj] = score(p, dot_row(qs[r], ks[jj]), i, j0 + jj, end, bias, bv, b, h);
            }
            __syncwarp();
            C tile_max = neg_inf();
            for (int jj = 0; jj < COLS; ++jj) tile_max = nan_max(tile_max, ss[r][jj]);
            const C m_new = nan_max(m, tile_max);
            const C shift_new = m_new == neg_inf() ? (C)0 : m_new;
            const C alpha = exp_c(m - shift_new);
            __syncwarp();
            for (int t = 0; t < PER_THREAD; ++t) {
                const u32 jj = sub + TPR * t;
                ss[r][jj] = exp_c(ss[r][jj] - shift_new);
            }
            __syncwarp();
            C row_sum = 0;
#pragma unroll
            for (int f = 0; f < FEATS; ++f) acc[f] *= alpha;
            for (int jj = 0; jj < COLS; ++jj) {
                const C pj = ss[r][jj];
                row_sum += pj;
#pragma unroll
                for (int f = 0; f < FEATS; ++f) acc[f] += pj * vs[jj][sub + TPR * f];
            }
            l = l * alpha + row_sum;
            m = m_new;
            shift = shift_new;
            __syncwarp();
        }
        if (i < p.nq) {
            const C inv = l == (C)0 ? (C)0 : (C)1 / l;
            for (int f = 0; f < FEATS; ++f) {
                const u64 c = sub + TPR * f;
                if (c < p.dv) out[(bh * p.nq + i) * p.dv + c] = store<T, C>(acc[f] * inv);
            }
            if (sub == 0) lse[bh * p.nq + i] = shift + log_c(l);
        }
    }
}
#endif

#if PASS == 1 && !MMA
extern "C" __global__ void kernel(const Info info, const T* __restrict__ q, const T* __restrict__ k,
                                  const T* __restrict__ v, const T* __restrict__ o, const T* __restrict__ d_o,
                                  const C* __restrict__ lse, const u32* __restrict__ lengths,
                                  const T* __restrict__ bias, T* __restrict__ dq, C* __restrict__ delta) {
    __shared__ C qs[ROWS][LD];
    __shared__ C dos[ROWS][LD];
    __shared__ C ks[COLS][LD];
    __shared__ C vs[COLS][LD];
    __shared__ C ds[ROWS][COLS];
    const Problem p = problem(info);
    const View qv = view(info, 0), kv = view(info, 1), vv = view(info, 2), ov = view(info, 3), dov = view(info, 4),
               bv = view(info, 5);
    const u32 r = threadIdx.x / TPR, sub = threadIdx.x % TPR;
    const u64 tiles = (p.nq + ROWS - 1) / ROWS;
    for (u64 blk = blockIdx.x; blk < p.bh_count * tiles; blk += gridDim.x) {
        const u64 bh = blk / tiles, b = bh / p.heads, h = bh % p.heads, i0 = blk % tiles * ROWS, i = i0 + r;
        const u64 end = key_end(p, lengths, b);
        const u64 stop = (p.flags & CAUSAL) && i0 + ROWS < end ? i0 + ROWS : end;
        __syncthreads();
        stage<ROWS>(qs, q, qv, b, h, i0, p.nq, p.d);
        stage<ROWS>(dos, d_o, dov, b, h, i0, p.nq, p.dv);
        __syncthreads();
        // delta = rowsum(dO * O), every thread of the row alike.
        C dl = 0;
        if (i < p.nq)
            for (u64 c = 0; c < p.dv; ++c) dl += dos[r][c] * (C)load(o[row_at(ov, b, h, i) + c * ov.s3]);
        const C shift = i < p.nq ? lse_shift(lse[bh * p.nq + i]) : (C)0;
        C acc[FEATS];
#pragma unroll
        for (int f = 0; f < FEATS; ++f) acc[f] = 0;
        for (u64 j0 = 0; j0 < stop; j0 += COLS) {
            __syncthreads();
            stage<COLS>(ks, k, kv, b, h, j0, p.nk, p.d);
            stage<COLS>(vs, v, vv, b, h, j0, p.nk, p.dv);
            __syncthreads();
            for (int t = 0; t < PER_THREAD; ++t) {
                const u32 jj = sub + TPR * t;
                const u64 j = j0 + jj;
                const C pr = exp_c(score(p, dot_row(qs[r], ks[jj]), i, j, end, bias, bv, b, h) - shift);
                ds[r][jj] = i < p.nq && j < p.nk ? pr * (dot_row(dos[r], vs[jj]) - dl) : (C)0;
            }
            __syncwarp();
            for (int jj = 0; jj < COLS; ++jj) {
                const C g = ds[r][jj];
#pragma unroll
                for (int f = 0; f < FEATS; ++f) acc[f] += g * ks[jj][sub + TPR * f];
            }
            __syncwarp();
        }
        if (i < p.nq) {
            for (int f = 0; f < FEATS; ++f) {
                const u64 c = sub + TPR * f;
                if (c < p.d) dq[(bh * p.nq + i) * p.d + c] = store<T, C>(acc[f] * p.scale);
            }
            if (sub == 0) delta[bh * p.nq + i] = dl;
        }
    }
}
#endif

#if PASS == 2 && !MMA
// Rows are keys here and columns queries: block tiles of ROWS keys walk tiles of COLS queries.
extern "C" __global__ void kernel(const Info info, const T* __restrict__ q, const T* __restrict__ k,
                                  const T* __restrict__ v, const T* __restrict__ d_o, const C* __restrict__ lse,
                                  const C* __restrict__ delta, const u32* __restrict__ lengths,
                                  const T* __restrict__ bias, T* __restrict__ dk, T* __restrict__ dv,
                                  T* __restrict__ dbias) {
    __shared__ C ks[ROWS][LD];
    __shared__ C vs[ROWS][LD];
    __shared__ C qs[COLS][LD];
    __shared__ C dos[COLS][LD];
    __shared__ C ps[ROWS][COLS];
    __shared__ C ds[ROWS][COLS];
    __shared__ C shifts[COLS];
    __shared__ C deltas[COLS];
    const Problem p = problem(info);
    const View qv = view(info, 0), kv = view(info, 1), vv = view(info, 2), dov = view(info, 4), bv = view(info, 5);
    const u32 r = threadIdx.x / TPR, sub = threadIdx.x % TPR;
    const bool bias_grad = p.flags & BIAS_GRAD;
    const u64 tiles = (p.nk + ROWS - 1) / ROWS;
    for (u64 blk = blockIdx.x; blk < p.bh_count * tiles; blk += gridDim.x) {
        const u64 bh = blk / tiles, b = bh / p.heads, h = bh % p.heads, j0 = blk % tiles * ROWS, j = j0 + r;
        const u64 end = key_end(p, lengths, b);
        // Queries before the tile's first key, or every query when the keys are cut off by
        // the lengths, see none of its keys; the bias gradient is still written there.
        const u64 first = bias_grad ? 0 : ((p.flags & CAUSAL) ? j0 / COLS * COLS : 0);
        const u64 last = bias_grad || j0 < end ? p.nq : 0;
        __syncthreads();
        stage<ROWS>(ks, k, kv, b, h, j0, p.nk, p.d);
        stage<ROWS>(vs, v, vv, b, h, j0, p.nk, p.dv);
        C dk_acc[FEATS], dv_acc[FEATS];
#pragma unroll
        for (int f = 0; f < FEATS; ++f) dk_acc[f] = dv_acc[f] = 0;
        for (u64 i0 = first; i0 < last; i0 += COLS) {
            __syncthreads();
            stage<COLS>(qs, q, qv, b, h, i0, p.nq, p.d);
            stage<COLS>(dos, d_o, dov, b, h, i0, p.nq, p.dv);
            for (u32 e = threadIdx.x; e < COLS; e += THREADS) {
                const bool in = i0 + e < p.nq;
                shifts[e] = in ? lse_shift(lse[bh * p.nq + i0 + e]) : (C)0;
                deltas[e] = in ? delta[bh * p.nq + i0 + e] : (C)0;
            }
            __syncthreads();
            for (int t = 0; t < PER_THREAD; ++t) {
                const u32 ii = sub + TPR * t;
                const u64 i = i0 + ii;
                const bool in = i < p.nq && j < p.nk;
                const C pr = in ? exp_c(score(p, dot_row(qs[ii], ks[r]), i, j, end, bias, bv, b, h) - shifts[ii]) : (C)0;
                const C g = in ? pr * (dot_row(dos[ii], vs[r]) - deltas[ii]) : (C)0;
                ps[r][ii] = pr;
                ds[r][ii] = g;
                if (bias_grad && in) dbias[(bh * p.nq + i) * p.nk + j] = store<T, C>(g);
            }
            __syncwarp();
            for (int ii = 0; ii < COLS; ++ii) {
                const C pr = ps[r][ii], g = ds[r][ii];
#pragma unroll
                for (int f = 0; f < FEATS; ++f) {
                    dv_acc[f] += pr * dos[ii][sub + TPR * f];
                    dk_acc[f] += g * qs[ii][sub + TPR * f];
                }
            }
            __syncwarp();
        }
        if (j < p.nk) {
            for (int f = 0; f < FEATS; ++f) {
                const u64 c = sub + TPR * f;
                if (c < p.d) dk[(bh * p.nk + j) * p.d + c] = store<T, C>(dk_acc[f] * p.scale);
                if (c < p.dv) dv[(bh * p.nk + j) * p.dv + c] = store<T, C>(dv_acc[f]);
            }
        }
    }
}
#endif
