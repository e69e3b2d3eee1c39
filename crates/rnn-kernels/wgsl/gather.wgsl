// out[i] = x[o, ids(i), k] for each output position i = (o, j, k) of [outer, m, inner], with
// x seen as [outer, size, inner] through its layout and `ids(i)` read through the `read`
// layout (the ids' own layout for gather, the 1-D ids broadcast for index_select).
// The p-th index of the `check` layout (the ids as the CPU walks them, p < count) is
// range-checked: the first position out of range is recorded in `bad` (NONE while none
// is). When `same` is set, `check` is `read` (gather) and each thread checks the index it
// reads. An index out of range reads nothing, so no thread reads out of bounds.
// info: n, m, size, inner, count, same, base of x's layout, base of `read`, base of `check`.
@group(0) @binding(1) var<storage, read> x: array<{{T}}>;
@group(0) @binding(2) var<storage, read> ids: array<{{K}}>;
@group(0) @binding(3) var<storage, read_write> out: array<{{T}}>;
@group(0) @binding(4) var<storage, read_write> bad: atomic<u32>;

fn in_range(id: {{K}}, size: u32) -> bool {
    return id >= {{K}}(0) && u32(id) < size;
}

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
    let n = info[0];
    let m = info[1];
    let size = info[2];
    let inner = info[3];
    let count = info[4];
    let same = info[5] != 0u;
    for (var i = thread_start(wid, lid); i < max(n, count); i = i + grid_step(nwg)) {
        if (!same && i < count && !in_range(ids[strided_offset(i, info[8])], size)) {
            atomicMin(&bad, i);
        }
        if (i >= n) { continue; }
        let id = ids[strided_offset(i, info[7])];
        if (!in_range(id, size)) {
            if (same) { atomicMin(&bad, i); }
            continue;
        }
        let o = i / (inner * m);
        out[i] = x[strided_offset((o * size + u32(id)) * inner + i % inner, info[6])];
    }
}
