// out[o, ids(i), k] += src(i) for each position i = (o, j, k) of the ids' shape
// [outer, m, inner], where out is a contiguous copy of the destination ([outer, size,
// inner]). Elements are updated with a compare-exchange loop on their 32-bit word (two f16
// elements share one); `{{add}}` is the word `old` with `v` added to element `e`.
// A position whose index is out of range adds nothing; the first such position is recorded
// in `bad` (NONE while none is).
// info: n, m, size, inner, base of the ids' layout, base of src's layout.
@group(0) @binding(1) var<storage, read> ids: array<{{K}}>;
@group(0) @binding(2) var<storage, read> src: array<{{T}}>;
@group(0) @binding(3) var<storage, read_write> out: array<atomic<u32>>;
@group(0) @binding(4) var<storage, read_write> bad: atomic<u32>;

fn in_range(id: {{K}}, size: u32) -> bool {
    return id >= {{K}}(0) && u32(id) < size;
}

// The word `old` with `v` added to the f16 element `e` it holds (rounded as the CPU's f16 add).
fn half_added(old: u32, e: u32, v: f32) -> u32 {
    let shift = 16u * (e & 1u);
    let sum = unpack2x16float(old >> shift).x + v;
    let bits = pack2x16float(vec2<f32>(sum, 0.0)) & 0xffffu;
    return (old & ~(0xffffu << shift)) | (bits << shift);
}

fn added(old: u32, e: u32, v: {{T}}) -> u32 {
    return {{add}};
}

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
    let m = info[1];
    let size = info[2];
    let inner = info[3];
    for (var i = thread_start(wid, lid); i < info[0]; i = i + grid_step(nwg)) {
        let id = ids[strided_offset(i, info[4])];
        if (!in_range(id, size)) {
            atomicMin(&bad, i);
            continue;
        }
        let e = (i / (inner * m) * size + u32(id)) * inner + i % inner;
        let v = src[strided_offset(i, info[5])];
        let w = e / {{per_word}};
        var old = atomicLoad(&out[w]);
        loop {
            let r = atomicCompareExchangeWeak(&out[w], old, added(old, e, v));
            if (r.exchanged) { break; }
            old = r.old_value;
        }
    }
}
