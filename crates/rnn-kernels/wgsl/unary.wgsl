// out[i] = f(src[layout(i)]), computed in {{C}} (f32); f is `{{expr}}` of `x` from the op
// table. info: n, base of the source layout.
@group(0) @binding(1) var<storage, read> src: array<{{T}}>;
@group(0) @binding(2) var<storage, read_write> out: array<{{T}}>;

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
    for (var i = thread_start(wid, lid); i < info[0]; i = i + grid_step(nwg)) {
        let x = {{C}}(src[strided_offset(i, info[1])]);
        out[i] = {{T}}({{expr}});
    }
}
