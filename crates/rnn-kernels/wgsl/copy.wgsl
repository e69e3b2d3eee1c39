// out[layout_out(i)] = convert(src[layout_src(i)]) for i < n: strided copies, casts and the
// parts of `cat`. info: n, base of the source layout, base of the output layout.
@group(0) @binding(1) var<storage, read> src: array<{{T}}>;
@group(0) @binding(2) var<storage, read_write> out: array<{{O}}>;

fn convert(x: {{T}}) -> {{O}} {
    return {{convert}};
}

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
    for (var i = thread_start(wid, lid); i < info[0]; i = i + grid_step(nwg)) {
        out[strided_offset(i, info[2])] = convert(src[strided_offset(i, info[1])]);
    }
}
