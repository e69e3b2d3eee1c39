// Scaled dot-product attention, FlashAttention-2 style (the WGSL twin of cuda/attention.cu:
// see there for the algorithm and the semantics). This part is shared by the three passes
// (attention_fwd.wgsl, attention_bwd_dq.wgsl, attention_bwd_dkdv.wgsl), which each declare
// the bindings `lengths` and `bias` it reads, their other buffers and their tiles.
//
// Every row of a tile is handled by TPR invocations: each computes the scores of COLS / TPR
// columns and owns DMAX / TPR output features (feature c = sub + TPR * n). Everything is
// computed in f32; tiles are zero-padded to DMAX features.
//
// info: heads, nq, nk, d, dv, scale (f32 bits), flags (1 causal, 2 lengths, 4 bias, 8 bias
// gradient), batch * heads, then views of 5 words each (start offset, strides of the 4 dims):
// forward: q, k, v, bias; backward: q, k, v, o, do, bias.

const TPR: u32 = 8u;
const DMAX: u32 = {{dmax}}u;
const ROWS: u32 = {{rows}}u;
const COLS: u32 = {{cols}}u;
const THREADS: u32 = {{threads}}u;
// The row stride of workgroup tiles: one more than DMAX, so that the TPR invocations of a
// row, which read TPR different tile rows at the same feature, hit different banks.
const LD: u32 = {{dmax}}u + 1u;
const FEATS: u32 = {{dmax}}u / 8u;
const PER_THREAD: u32 = {{cols}}u / 8u;

const CAUSAL: u32 = 1u;
const LENGTHS: u32 = 2u;
const HAS_BIAS: u32 = 4u;
const BIAS_GRAD: u32 = 8u;

fn neg_inf() -> f32 {
    return bitcast<f32>(0xff800000u);
}

// The max that propagates NaN (as the composition's max_keepdim).
fn nan_max(a: f32, b: f32) -> f32 {
    if (is_nan(a)) { return a; }
    if (is_nan(b)) { return b; }
    return select(a, b, b > a);
}

// A rank-4 view [B, H, N, F]: element (b, h, n, f) is at off + b*s0 + h*s1 + n*s2 + f*s3.
struct View {
    off: u32,
    s0: u32,
    s1: u32,
    s2: u32,
    s3: u32,
}

fn view(which: u32) -> View {
    let w = 8u + 5u * which;
    return View(info[w], info[w + 1u], info[w + 2u], info[w + 3u], info[w + 4u]);
}

fn row_at(v: View, b: u32, h: u32, n: u32) -> u32 {
    return v.off + b * v.s0 + h * v.s1 + n * v.s2;
}

struct Problem {
    heads: u32,
    nq: u32,
    nk: u32,
    d: u32,
    dv: u32,
    flags: u32,
    bh_count: u32,
    scale: f32,
}

fn problem() -> Problem {
    return Problem(info[0], info[1], info[2], info[3], info[4], info[6], info[7], bitcast<f32>(info[5]));
}

// The keys any query may see: [0, end).
fn key_end(p: Problem, b: u32) -> u32 {
    if ((p.flags & LENGTHS) != 0u) {
        return min(p.nk, lengths[b]);
    }
    return p.nk;
}

// The scaled score of query i and key j (plus the bias), -inf where the mask hides it.
fn score(p: Problem, dot: f32, i: u32, j: u32, end: u32, bv: View, b: u32, h: u32) -> f32 {
    if (i >= p.nq || j >= end || ((p.flags & CAUSAL) != 0u && j > i)) {
        return neg_inf();
    }
    var x = dot * p.scale;
    if ((p.flags & HAS_BIAS) != 0u) {
        x = x + f32(bias[row_at(bv, b, h, i) + j * bv.s3]);
    }
    return x;
}

// The lse as a shift: a fully masked row (-inf) shifts by 0, so its probabilities are 0.
fn lse_shift(x: f32) -> f32 {
    return select(x, 0.0, x == neg_inf());
}

// The last key (exclusive) a tile of queries starting at i0 may see.
fn key_stop(p: Problem, end: u32, i0: u32) -> u32 {
    if ((p.flags & CAUSAL) != 0u && i0 + ROWS < end) {
        return i0 + ROWS;
    }
    return end;
}
