// Softmax (or log-softmax when `{{log}}`) of each row of n elements, one workgroup per row:
// the row's max, the sum of exp(x - max), then the outputs, all computed in f32.
// Element k of row `row` is x[layout(row * n + k)]; the output is contiguous.
// info: rows, n, base of the layout.
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

fn load(row: u32, k: u32) -> f32 {
    return f32(x[strided_offset(row * info[1] + k, info[2])]);
}

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
    let row = group_id(wid, nwg);
    let n = info[1];
    if (row >= info[0]) { return; }
    var m = bitcast<f32>(0xff800000u);
    for (var k = lid; k < n; k = k + WG) {
        let v = load(row, k);
        m = select(m, v, v > m);
    }
    m = combine(m, lid, true);
    var s = 0.0;
    for (var k = lid; k < n; k = k + WG) {
        s = s + exp(load(row, k) - m);
    }
    s = combine(s, lid, false);
    let log_sum = log(s);
    let inv = 1.0 / s;
    for (var k = lid; k < n; k = k + WG) {
        let e = load(row, k) - m;
        out[row * n + k] = {{T}}(select(exp(e) * inv, e - log_sum, {{log}}));
    }
}
