// The logits' gradient of softmax cross entropy, one invocation per element of the
// contiguous [rows, n] logits: dx = g[row] (exp(x - lse[row]) - (1 - s) [k == id] - s / n),
// 0 in an ignored row (or one whose id is out of range: the forward reported it). In f32.
// info: count, n, x start, has ignore, ignored id (its 32 bits), s (f32 bits), lse start,
// g start, base of the ids' layout.
@group(0) @binding(1) var<storage, read> x: array<{{T}}>;
@group(0) @binding(2) var<storage, read> ids: array<{{K}}>;
@group(0) @binding(3) var<storage, read> lse: array<f32>;
@group(0) @binding(4) var<storage, read> g: array<{{T}}>;
@group(0) @binding(5) var<storage, read_write> dx: array<{{T}}>;

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
    let n = info[1];
    let s = bitcast<f32>(info[5]);
    for (var i = thread_start(wid, lid); i < info[0]; i = i + grid_step(nwg)) {
        let row = i / n;
        let k = i % n;
        let id = ids[strided_offset(row, info[8])];
        let ignored = info[3] != 0u && bitcast<u32>(id) == info[4];
        var d = 0.0;
        if (!ignored && id >= {{K}}(0) && u32(id) < n) {
            let p = exp(f32(x[info[2] + i]) - lse[info[6] + row]);
            d = f32(g[info[7] + row]) * (p - select(0.0, 1.0 - s, u32(id) == k) - s / f32(n));
        }
        dx[i] = {{T}}(d);
    }
}
