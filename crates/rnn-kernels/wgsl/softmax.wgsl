// Softmax (or log-softmax when `{{log}}`) of each row of n elements, one workgroup per row:
// the row's max, the sum of exp(x - max), then the outputs, all computed in f32. Element k
// of row `row` is x[rows(row) + k * stride], with `rows` the layout of the other dims; the
// output is contiguous.
// info: rows, n, stride of the last dim, base of the rows layout.
@group(0) @binding(1) var<storage, read> x: array<{{T}}>;
@group(0) @binding(2) var<storage, read_write> out: array<{{T}}>;

var<workgroup> part: array<f32, WG>;

// The max (or the sum) of every thread's `v`, returned to all threads of the workgroup.
// The max skips NaN as the CPU's does (a NaN still makes the whole row NaN through the sum).
fn combine(v: f32, lid: u32, is_max: bool) -> f32 {
    part[lid] = v;
    workgroupBarrier();
    for (var s = WG / 2u; s > 0u; s = s >> 1u) {
        if (lid < s) {
            let a = part[lid];
            let b = part[lid + s];
            part[lid] = select(a + b, select(a, b, b > a), is_max);
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
    let stride = info[2];
    for (var row = wid.x; row < info[0]; row = row + nwg.x) {
        let first = strided_offset(row, info[3]);
        var m = bitcast<f32>(0xff800000u);
        for (var k = lid; k < n; k = k + WG) {
            let v = f32(x[first + k * stride]);
            m = select(m, v, v > m);
        }
        m = combine(m, lid, true);
        var s = 0.0;
        for (var k = lid; k < n; k = k + WG) {
            s = s + exp(f32(x[first + k * stride]) - m);
        }
        s = combine(s, lid, false);
        let log_sum = log(s);
        let inv = 1.0 / s;
        for (var k = lid; k < n; k = k + WG) {
            let e = f32(x[first + k * stride]) - m;
            out[row * n + k] = {{T}}(select(exp(e) * inv, e - log_sum, {{log}}));
        }
    }
}
