// Attention backward, dk / dv pass (see attention_common.wgsl): rows are keys here and
// columns queries: one workgroup per (batch * head, tile of ROWS keys) walking tiles of COLS
// queries; writes dk, dv and, when asked, the bias gradient (every (query, key) pair of its
// keys).
@group(0) @binding(1) var<storage, read> q: array<{{T}}>;
@group(0) @binding(2) var<storage, read> k: array<{{T}}>;
@group(0) @binding(3) var<storage, read> v: array<{{T}}>;
@group(0) @binding(4) var<storage, read> d_o: array<{{T}}>;
@group(0) @binding(5) var<storage, read> lse: array<f32>;
@group(0) @binding(6) var<storage, read> delta: array<f32>;
@group(0) @binding(7) var<storage, read> lengths: array<u32>;
@group(0) @binding(8) var<storage, read> bias: array<{{T}}>;
@group(0) @binding(9) var<storage, read_write> dk: array<{{T}}>;
@group(0) @binding(10) var<storage, read_write> dv: array<{{T}}>;
@group(0) @binding(11) var<storage, read_write> dbias: array<{{T}}>;

var<workgroup> ks: array<f32, {{rows}} * ({{dmax}} + 1u)>;
var<workgroup> vs: array<f32, {{rows}} * ({{dmax}} + 1u)>;
var<workgroup> qs: array<f32, {{cols}} * ({{dmax}} + 1u)>;
var<workgroup> dos: array<f32, {{cols}} * ({{dmax}} + 1u)>;
var<workgroup> ps: array<f32, {{rows}} * {{cols}}>;
var<workgroup> ds: array<f32, {{rows}} * {{cols}}>;
var<workgroup> shifts: array<f32, {{cols}}>;
var<workgroup> deltas: array<f32, {{cols}}>;

fn stage_keys(p: Problem, kv: View, vv: View, b: u32, h: u32, j0: u32, lid: u32) {
    for (var e = lid; e < ROWS * DMAX; e = e + THREADS) {
        let j = j0 + e / DMAX;
        let c = e % DMAX;
        var x = 0.0;
        var y = 0.0;
        if (j < p.nk && c < p.d) { x = f32(k[row_at(kv, b, h, j) + c * kv.s3]); }
        if (j < p.nk && c < p.dv) { y = f32(v[row_at(vv, b, h, j) + c * vv.s3]); }
        ks[e / DMAX * LD + c] = x;
        vs[e / DMAX * LD + c] = y;
    }
}

fn stage_queries(p: Problem, qv: View, dov: View, b: u32, h: u32, bh: u32, i0: u32, lid: u32) {
    for (var e = lid; e < COLS * DMAX; e = e + THREADS) {
        let n = i0 + e / DMAX;
        let c = e % DMAX;
        var x = 0.0;
        var y = 0.0;
        if (n < p.nq && c < p.d) { x = f32(q[row_at(qv, b, h, n) + c * qv.s3]); }
        if (n < p.nq && c < p.dv) { y = f32(d_o[row_at(dov, b, h, n) + c * dov.s3]); }
        qs[e / DMAX * LD + c] = x;
        dos[e / DMAX * LD + c] = y;
    }
    for (var e = lid; e < COLS; e = e + THREADS) {
        var s = 0.0;
        var dl = 0.0;
        if (i0 + e < p.nq) {
            s = lse_shift(lse[bh * p.nq + i0 + e]);
            dl = delta[bh * p.nq + i0 + e];
        }
        shifts[e] = s;
        deltas[e] = dl;
    }
}

// P and dS of key row r against the staged queries (this invocation's columns).
fn probs(p: Problem, bv: View, b: u32, h: u32, bh: u32, j: u32, i0: u32, end: u32, r: u32, sub: u32) {
    for (var t = 0u; t < PER_THREAD; t = t + 1u) {
        let ii = sub + TPR * t;
        let i = i0 + ii;
        var dot = 0.0;
        var dp = 0.0;
        for (var c = 0u; c < DMAX; c = c + 1u) {
            dot = dot + qs[ii * LD + c] * ks[r * LD + c];
            dp = dp + dos[ii * LD + c] * vs[r * LD + c];
        }
        let inside = i < p.nq && j < p.nk;
        let pr = select(0.0, exp(score(p, dot, i, j, end, bv, b, h) - shifts[ii]), inside);
        let g = select(0.0, pr * (dp - deltas[ii]), inside);
        ps[r * COLS + ii] = pr;
        ds[r * COLS + ii] = g;
        if ((p.flags & BIAS_GRAD) != 0u && inside) {
            dbias[(bh * p.nq + i) * p.nk + j] = {{T}}(g);
        }
    }
}

@compute @workgroup_size({{threads}})
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
    let p = problem();
    let qv = view(0u);
    let kv = view(1u);
    let vv = view(2u);
    let dov = view(4u);
    let bv = view(5u);
    let r = lid / TPR;
    let sub = lid % TPR;
    let bias_grad = (p.flags & BIAS_GRAD) != 0u;
    let tiles = (p.nk + ROWS - 1u) / ROWS;
    for (var blk = wid.x; blk < p.bh_count * tiles; blk = blk + nwg.x) {
        let bh = blk / tiles;
        let b = bh / p.heads;
        let h = bh % p.heads;
        let j0 = (blk % tiles) * ROWS;
        let j = j0 + r;
        let end = key_end(p, b);
        // Queries before the tile's first key (causal), or all when the lengths cut its keys
        // off, see none of them; with a bias gradient every query is still visited.
        var first = 0u;
        if (!bias_grad && (p.flags & CAUSAL) != 0u) { first = j0 / COLS * COLS; }
        var last = p.nq;
        if (!bias_grad && j0 >= end) { last = 0u; }
        workgroupBarrier();
        stage_keys(p, kv, vv, b, h, j0, lid);
        var dk_acc: array<f32, FEATS>;
        var dv_acc: array<f32, FEATS>;
        for (var i0 = first; i0 < last; i0 = i0 + COLS) {
            workgroupBarrier();
            stage_queries(p, qv, dov, b, h, bh, i0, lid);
            workgroupBarrier();
            probs(p, bv, b, h, bh, j, i0, end, r, sub);
            workgroupBarrier();
            for (var ii = 0u; ii < COLS; ii = ii + 1u) {
                let pr = ps[r * COLS + ii];
                let g = ds[r * COLS + ii];
                for (var f = 0u; f < FEATS; f = f + 1u) {
                    dv_acc[f] = dv_acc[f] + pr * dos[ii * LD + sub + TPR * f];
                    dk_acc[f] = dk_acc[f] + g * qs[ii * LD + sub + TPR * f];
                }
            }
        }
        if (j < p.nk) {
            for (var f = 0u; f < FEATS; f = f + 1u) {
                let c = sub + TPR * f;
                if (c < p.d) {
                    dk[(bh * p.nk + j) * p.d + c] = {{T}}(dk_acc[f] * p.scale);
                }
                if (c < p.dv) {
                    dv[(bh * p.nk + j) * p.dv + c] = {{T}}(dv_acc[f]);
                }
            }
        }
    }
}
