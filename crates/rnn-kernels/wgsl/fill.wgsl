// out[i] = value for i < n. info: n, the value's bits (`{{value}}` reads them).
@group(0) @binding(1) var<storage, read_write> out: array<{{T}}>;

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
    for (var i = thread_start(wid, lid); i < info[0]; i = i + grid_step(nwg)) {
        out[i] = {{value}};
    }
}
