// Attention forward (see attention_common.wgsl): one workgroup per (batch * head, tile of
// ROWS queries), an online softmax over tiles of COLS keys; writes the output and the
// per-row log-sum-exp.
@group(0) @binding(1) var<storage, read> q: array<{{T}}>;
@group(0) @binding(2) var<storage, read> k: array<{{T}}>;
@group(0) @binding(3) var<storage, read> v: array<{{T}}>;
@group(0) @binding(4) var<storage, read> lengths: array<u32>;
@group(0) @binding(5) var<storage, read> bias: array<{{T}}>;
@group(0) @binding(6) var<storage, read_write> out: array<{{T}}>;
@group(0) @binding(7) var<storage, read_write> lse: array<f32>;

var<workgroup> qs: array<f32, {{rows}} * ({{dmax}} + 1u)>;
var<workgroup> ks: array<f32, {{cols}} * ({{dmax}} + 1u)>;
var<workgroup> vs: array<f32, {{cols}} * ({{dmax}} + 1u)>;
var<workgroup> ss: array<f32, {{rows}} * {{cols}}>;

// Keys and values j0 .. j0 + COLS into ks, vs.
fn stage_keys(p: Problem, kv: View, vv: View, b: u32, h: u32, j0: u32, lid: u32) {
    for (var e = lid; e < COLS * DMAX; e = e + THREADS) {
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

// Row r's scores against the staged keys (this invocation's columns), into ss.
fn scores(p: Problem, bv: View, b: u32, h: u32, i: u32, j0: u32, end: u32, r: u32, sub: u32) {
    for (var t = 0u; t < PER_THREAD; t = t + 1u) {
        let jj = sub + TPR * t;
        var dot = 0.0;
        for (var c = 0u; c < DMAX; c = c + 1u) {
            dot = dot + qs[r * LD + c] * ks[jj * LD + c];
        }
        ss[r * COLS + jj] = score(p, dot, i, j0 + jj, end, bv, b, h);
    }
}

@compute @workgroup_size({{threads}})
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
    let p = problem();
    let qv = view(0u);
    let kv = view(1u);
    let vv = view(2u);
    let bv = view(3u);
    let r = lid / TPR;
    let sub = lid % TPR;
    let tiles = (p.nq + ROWS - 1u) / ROWS;
    for (var blk = wid.x; blk < p.bh_count * tiles; blk = blk + nwg.x) {
        let bh = blk / tiles;
        let b = bh / p.heads;
        let h = bh % p.heads;
        let i0 = (blk % tiles) * ROWS;
        let i = i0 + r;
        let end = key_end(p, b);
        let stop = key_stop(p, end, i0);
        workgroupBarrier();
        for (var e = lid; e < ROWS * DMAX; e = e + THREADS) {
            let n = i0 + e / DMAX;
            let c = e % DMAX;
            var x = 0.0;
            if (n < p.nq && c < p.d) { x = f32(q[row_at(qv, b, h, n) + c * qv.s3]); }
            qs[e / DMAX * LD + c] = x;
        }
        var m = neg_inf();
        var shift = 0.0;
        var l = 0.0;
        var acc: array<f32, FEATS>;
        for (var j0 = 0u; j0 < stop; j0 = j0 + COLS) {
            workgroupBarrier();
            stage_keys(p, kv, vv, b, h, j0, lid);
            workgroupBarrier();
            scores(p, bv, b, h, i, j0, end, r, sub);
            workgroupBarrier();
            var tile_max = neg_inf();
            for (var jj = 0u; jj < COLS; jj = jj + 1u) {
                tile_max = nan_max(tile_max, ss[r * COLS + jj]);
            }
            let m_new = nan_max(m, tile_max);
            let shift_new = select(m_new, 0.0, m_new == neg_inf());
            let alpha = exp(m - shift_new);
            workgroupBarrier();
            for (var t = 0u; t < PER_THREAD; t = t + 1u) {
                let at = r * COLS + sub + TPR * t;
                ss[at] = exp(ss[at] - shift_new);
            }
            workgroupBarrier();
            var row_sum = 0.0;
            for (var f = 0u; f < FEATS; f = f + 1u) {
                acc[f] = acc[f] * alpha;
            }
            for (var jj = 0u; jj < COLS; jj = jj + 1u) {
                let pj = ss[r * COLS + jj];
                row_sum = row_sum + pj;
                for (var f = 0u; f < FEATS; f = f + 1u) {
                    acc[f] = acc[f] + pj * vs[jj * LD + sub + TPR * f];
                }
            }
            l = l * alpha + row_sum;
            m = m_new;
            shift = shift_new;
        }
        if (i < p.nq) {
            let inv = select(1.0 / l, 0.0, l == 0.0);
            for (var f = 0u; f < FEATS; f = f + 1u) {
                let c = sub + TPR * f;
                if (c < p.dv) {
                    out[(bh * p.nq + i) * p.dv + c] = {{T}}(acc[f] * inv);
                }
            }
            if (sub == 0u) {
                lse[bh * p.nq + i] = shift + log(l);
            }
        }
    }
}
