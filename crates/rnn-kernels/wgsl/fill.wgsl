// out[i] = value. info: n, value (bits of an f32 for floats, of a u32 / i32 for integers).
@group(0) @binding(1) var<storage, read_write> out: array<{{O}}>;

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
    let i = thread_id(wid, nwg, lid);
    if (i >= info[0]) { return; }
    out[i] = {{value}};
}
