// LayerNorm (RMSNorm when {{rms}}) of each contiguous row of n elements, one workgroup per
// row, computed in f32: the row's mean (0 for RMSNorm), the mean of the centered squares,
// then y = (x - mean) * rstd * w + b with rstd = 1 / sqrt(var + eps). Saves the mean
// (LayerNorm) and rstd of each row.
// info: rows, n, x start, w start, b start, has w, has b, eps (f32 bits).
// Without a weight or bias, `w` / `b` are bound to x and not read; RMSNorm does not write
// `mean_out`.
@group(0) @binding(1) var<storage, read> x: array<{{T}}>;
@group(0) @binding(2) var<storage, read> w: array<{{T}}>;
@group(0) @binding(3) var<storage, read> b: array<{{T}}>;
@group(0) @binding(4) var<storage, read_write> out: array<{{T}}>;
@group(0) @binding(5) var<storage, read_write> mean_out: array<f32>;
@group(0) @binding(6) var<storage, read_write> rstd_out: array<f32>;

var<workgroup> part: array<f32, WG>;

// The sum of every invocation's `v`, returned to all of the workgroup.
fn block_sum(v: f32, lid: u32) -> f32 {
    part[lid] = v;
    workgroupBarrier();
    for (var s = WG / 2u; s > 0u; s = s >> 1u) {
        if (lid < s) {
            part[lid] = part[lid] + part[lid + s];
        }
        workgroupBarrier();
    }
    let total = part[0];
    workgroupBarrier();
    return total;
}

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
    let n = info[1];
    let has_w = info[5] != 0u;
    let has_b = info[6] != 0u;
    let eps = bitcast<f32>(info[7]);
    for (var row = wid.x; row < info[0]; row = row + nwg.x) {
        let first = info[2] + row * n;
        var mean = 0.0;
        if (!{{rms}}) {
            var s = 0.0;
            for (var k = lid; k < n; k = k + WG) {
                s = s + f32(x[first + k]);
            }
            mean = block_sum(s, lid) / f32(n);
        }
        var q = 0.0;
        for (var k = lid; k < n; k = k + WG) {
            let d = f32(x[first + k]) - mean;
            q = q + d * d;
        }
        let rstd = 1.0 / sqrt(block_sum(q, lid) / f32(n) + eps);
        for (var k = lid; k < n; k = k + WG) {
            var v = (f32(x[first + k]) - mean) * rstd;
            if (has_w) { v = v * f32(w[info[3] + k]); }
            if (has_b) { v = v + f32(b[info[4] + k]); }
            out[row * n + k] = {{T}}(v);
        }
        if (lid == 0u) {
            if (!{{rms}}) { mean_out[row] = mean; }
            rstd_out[row] = rstd;
        }
    }
}
