// The input gradient of LayerNorm (RMSNorm when {{rms}}), one workgroup per contiguous row of
// n elements: with gw = g * w and xhat = (x - mean) * rstd (mean = 0 for RMSNorm),
// dx = rstd * (gw - mean(gw) - xhat * mean(gw * xhat)), the mean(gw) term for LayerNorm only.
// Both sums come from one pass over the row; a second pass writes dx. Computed in f32.
// info: rows, n, x start, g start, w start, has w, mean start, rstd start.
// Without a weight `w` is bound to x and not read; RMSNorm does not read `mean`.
@group(0) @binding(1) var<storage, read> x: array<{{T}}>;
@group(0) @binding(2) var<storage, read> g: array<{{T}}>;
@group(0) @binding(3) var<storage, read> w: array<{{T}}>;
@group(0) @binding(4) var<storage, read> mean: array<f32>;
@group(0) @binding(5) var<storage, read> rstd: array<f32>;
@group(0) @binding(6) var<storage, read_write> dx: array<{{T}}>;

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

fn weight_at(k: u32) -> f32 {
    if (info[5] != 0u) {
        return f32(w[info[4] + k]);
    }
    return 1.0;
}

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
    let n = info[1];
    for (var row = wid.x; row < info[0]; row = row + nwg.x) {
        let xs = info[2] + row * n;
        let gs = info[3] + row * n;
        var m = 0.0;
        if (!{{rms}}) { m = mean[info[6] + row]; }
        let r = rstd[info[7] + row];
        var sum_gw = 0.0;
        var sum_gw_xhat = 0.0;
        for (var k = lid; k < n; k = k + WG) {
            let gw = f32(g[gs + k]) * weight_at(k);
            sum_gw = sum_gw + gw;
            sum_gw_xhat = sum_gw_xhat + gw * ((f32(x[xs + k]) - m) * r);
        }
        var shift = 0.0;
        if (!{{rms}}) { shift = block_sum(sum_gw, lid) / f32(n); }
        let slope = block_sum(sum_gw_xhat, lid) / f32(n);
        for (var k = lid; k < n; k = k + WG) {
            let gw = f32(g[gs + k]) * weight_at(k);
            let xhat = (f32(x[xs + k]) - m) * r;
            dx[row * n + k] = {{T}}(r * (gw - shift - xhat * slope));
        }
    }
}
