// out[i] = lhs[layout_a(i)] {{op}} rhs[layout_b(i)] as 0 / 1 (a u8 tensor stored as u32).
// info: n, base of lhs layout, base of rhs layout.
@group(0) @binding(1) var<storage, read> lhs: array<{{T}}>;
@group(0) @binding(2) var<storage, read> rhs: array<{{T}}>;
@group(0) @binding(3) var<storage, read_write> out: array<u32>;

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
    let i = thread_id(wid, nwg, lid);
    if (i >= info[0]) { return; }
    let a = {{C}}(lhs[{{index_a}}(i, info[1])]);
    let b = {{C}}(rhs[{{index_b}}(i, info[2])]);
    out[i] = select(0u, 1u, a {{op}} b);
}
