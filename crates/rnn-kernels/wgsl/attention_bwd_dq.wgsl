// Attention backward, dq pass (see attention_common.wgsl): one workgroup per (batch * head,
// tile of ROWS queries) walking tiles of COLS keys; recomputes the probabilities from the
// log-sum-exp; writes dq and delta = rowsum(dO * O) for the dk / dv pass.
@group(0) @binding(1) var<storage, read> q: array<{{T}}>;
@group(0) @binding(2) var<storage, read> k: array<{{T}}>;
@group(0) @binding(3) var<storage, read> v: array<{{T}}>;
@group(0) @binding(4) var<storage, read> o: array<{{T}}>;
@group(0) @binding(5) var<storage, read> d_o: array<{{T}}>;
@group(0) @binding(6) var<storage, read> lse: array<f32>;
@group(0) @binding(7) var<storage, read> lengths: array<u32>;
@group(0) @binding(8) var<storage, read> bias: array<{{T}}>;
@group(0) @binding(9) var<storage, read_write> dq: array<{{T}}>;
@group(0) @binding(10) var<storage, read_write> delta: array<f32>;

var<workgroup> qs: array<f32, {{rows}} * ({{dmax}} + 1u)>;
var<workgroup> dos: array<f32, {{rows}} * ({{dmax}} + 1u)>;
var<workgroup> ks: array<f32, {{cols}} * ({{dmax}} + 1u)>;
var<workgroup> vs: array<f32, {{cols}} * ({{dmax}} + 1u)>;
var<workgroup> ds: array<f32, {{rows}} * {{cols}}>;

fn stage_queries(p: Problem, qv: View, dov: View, b: u32, h: u32, i0: u32, lid: u32) {
    for (var e = lid; e < ROWS * DMAX; e = e + THREADS) {
        let n = i0 + e / DMAX;
        let c = e % DMAX;
        var x = 0.0;
        var y = 0.0;
        if (n < p.nq && c < p.d) { x = f32(q[row_at(qv, b, h, n) + c * qv.s3]); }
        if (n < p.nq && c < p.dv) { y = f32(d_o[row_at(dov, b, h, n) + c * dov.s3]); }
        qs[e / DMAX * LD + c] = x;
        dos[e / DMAX * LD + c] = y;
    }
}

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

// dS of row r against the staged keys (this invocation's columns), into ds.
fn score_grads(p: Problem, bv: View, b: u32, h: u32, i: u32, j0: u32, end: u32, r: u32, sub: u32, shift: f32, dl: f32) {
    for (var t = 0u; t < PER_THREAD; t = t + 1u) {
        let jj = sub + TPR * t;
        var dot = 0.0;
        var dp = 0.0;
        for (var c = 0u; c < DMAX; c = c + 1u) {
            dot = dot + qs[r * LD + c] * ks[jj * LD + c];
            dp = dp + dos[r * LD + c] * vs[jj * LD + c];
        }
        let pr = exp(score(p, dot, i, j0 + jj, end, bv, b, h) - shift);
        ds[r * COLS + jj] = select(0.0, pr * (dp - dl), i < p.nq && j0 + jj < p.nk);
    }
}

@compute @workgroup_size({{threads}})
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
    let p = problem();
    let qv = view(0u);
    let kv = view(1u);
    let vv = view(2u);
    let ov = view(3u);
    let dov = view(4u);
    let bv = view(5u);
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
        stage_queries(p, qv, dov, b, h, i0, lid);
        workgroupBarrier();
        var dl = 0.0;
        var shift = 0.0;
        if (i < p.nq) {
            for (var c = 0u; c < p.dv; c = c + 1u) {
                dl = dl + dos[r * LD + c] * f32(o[row_at(ov, b, h, i) + c * ov.s3]);
            }
            shift = lse_shift(lse[bh * p.nq + i]);
        }
        var acc: array<f32, FEATS>;
        for (var j0 = 0u; j0 < stop; j0 = j0 + COLS) {
            workgroupBarrier();
            stage_keys(p, kv, vv, b, h, j0, lid);
            workgroupBarrier();
            score_grads(p, bv, b, h, i, j0, end, r, sub, shift, dl);
            workgroupBarrier();
            for (var jj = 0u; jj < COLS; jj = jj + 1u) {
                let g = ds[r * COLS + jj];
                for (var f = 0u; f < FEATS; f = f + 1u) {
                    acc[f] = acc[f] + g * ks[jj * LD + sub + TPR * f];
                }
            }
        }
        if (i < p.nq) {
            for (var f = 0u; f < FEATS; f = f + 1u) {
                let c = sub + TPR * f;
                if (c < p.d) {
                    dq[(bh * p.nq + i) * p.d + c] = {{T}}(acc[f] * p.scale);
                }
            }
            if (sub == 0u) {
                delta[bh * p.nq + i] = dl;
            }
        }
    }
}
