// out[i] = lhs[layout_a(i)] {{op}} rhs[layout_b(i)] as 0 / 1 (a u8 tensor stored as u32).
// `{{nan}}` is the result where an operand is NaN (1 for !=, else 0), spelled out because
// WGSL leaves comparisons with NaN to the implementation (lavapipe's != is false there).
// info: n, base of the lhs layout, base of the rhs layout.
@group(0) @binding(1) var<storage, read> lhs: array<{{T}}>;
@group(0) @binding(2) var<storage, read> rhs: array<{{T}}>;
@group(0) @binding(3) var<storage, read_write> out: array<u32>;

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
    for (var i = thread_start(wid, lid); i < info[0]; i = i + grid_step(nwg)) {
        let a = {{C}}(lhs[strided_offset(i, info[1])]);
        let b = {{C}}(rhs[strided_offset(i, info[2])]);
        let unordered = is_nan(f32(a)) || is_nan(f32(b));
        out[i] = select(select(0u, 1u, a {{op}} b), {{nan}}, unordered);
    }
}
