// Softmax cross entropy of each contiguous row of n logits against a class id, one
// workgroup per row, computed in f32: lse = max + log(sum(exp(x - max))) (saved), and the
// loss lse - (1 - s) x[id] - s mean(x) with label smoothing s, 0 for an ignored id. An id out
// of range (and not ignored) gives loss 0 and records its row in `bad` (all ones while none
// is), reported as the CPU reports it; nothing is read out of bounds.
// info: rows, n, x start, has ignore, ignored id (its 32 bits), s (f32 bits), base of the
// ids' layout.
@group(0) @binding(1) var<storage, read> x: array<{{T}}>;
@group(0) @binding(2) var<storage, read> ids: array<{{K}}>;
@group(0) @binding(3) var<storage, read_write> loss: array<{{T}}>;
@group(0) @binding(4) var<storage, read_write> lse_out: array<f32>;
@group(0) @binding(5) var<storage, read_write> bad: atomic<u32>;

var<workgroup> part: array<f32, WG>;

// The max (which skips NaN, as the CPU's does) or the sum of every invocation's `v`,
// returned to all of the workgroup.
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
    let s = bitcast<f32>(info[5]);
    for (var row = wid.x; row < info[0]; row = row + nwg.x) {
        let first = info[2] + row * n;
        let id = ids[strided_offset(row, info[6])];
        let ignored = info[3] != 0u && bitcast<u32>(id) == info[4];
        let valid = id >= {{K}}(0) && u32(id) < n;
        if (!ignored && !valid && lid == 0u) {
            atomicMin(&bad, row);
        }
        var m = bitcast<f32>(0xff800000u);
        for (var k = lid; k < n; k = k + WG) {
            let v = f32(x[first + k]);
            m = select(m, v, v > m);
        }
        m = combine(m, lid, true);
        var e = 0.0;
        var sum = 0.0;
        for (var k = lid; k < n; k = k + WG) {
            let v = f32(x[first + k]);
            e = e + exp(v - m);
            sum = sum + v;
        }
        e = combine(e, lid, false);
        // Without smoothing the mean is not used: 0 * mean would turn an infinite logit into NaN.
        sum = combine(sum, lid, false);
        if (lid == 0u) {
            let lse = m + log(e);
            lse_out[row] = lse;
            var l = 0.0;
            if (!ignored && valid) {
                l = lse - (1.0 - s) * f32(x[first + u32(id)]);
                if (s > 0.0) { l = l - s * sum / f32(n); }
            }
            loss[row] = {{T}}(l);
        }
    }
}
