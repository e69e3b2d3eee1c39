// The weight and bias gradients of LayerNorm / RMSNorm: for each column c of the contiguous
// [rows, n] input, dw[c] = sum over rows of g * (x - mean) * rstd and db[c] = sum of g, one
// invocation per column walking the rows. Computed in f32.
// info: rows, n, x start, g start, mean start, rstd start, has mean.
// Without a mean (RMSNorm) `mean` is bound to rstd and not read.
@group(0) @binding(1) var<storage, read> x: array<{{T}}>;
@group(0) @binding(2) var<storage, read> g: array<{{T}}>;
@group(0) @binding(3) var<storage, read> mean: array<f32>;
@group(0) @binding(4) var<storage, read> rstd: array<f32>;
@group(0) @binding(5) var<storage, read_write> dw: array<{{T}}>;
@group(0) @binding(6) var<storage, read_write> db: array<{{T}}>;

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
    let rows = info[0];
    let n = info[1];
    let has_mean = info[6] != 0u;
    for (var c = thread_start(wid, lid); c < n; c = c + grid_step(nwg)) {
        var sw = 0.0;
        var sb = 0.0;
        for (var row = 0u; row < rows; row = row + 1u) {
            let gv = f32(g[info[3] + row * n + c]);
            var m = 0.0;
            if (has_mean) { m = mean[info[4] + row]; }
            sw = sw + gv * ((f32(x[info[2] + row * n + c]) - m) * rstd[info[5] + row]);
            sb = sb + gv;
        }
        dw[c] = {{T}}(sw);
        db[c] = {{T}}(sb);
    }
}
