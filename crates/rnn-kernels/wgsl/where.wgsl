// out[i] = cond[layout_c(i)] != 0 ? t[layout_t(i)] : f[layout_f(i)].
// info: n, bases of the cond, t and f layouts.
@group(0) @binding(1) var<storage, read> cond: array<{{K}}>;
@group(0) @binding(2) var<storage, read> on_true: array<{{T}}>;
@group(0) @binding(3) var<storage, read> on_false: array<{{T}}>;
@group(0) @binding(4) var<storage, read_write> out: array<{{T}}>;

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
    for (var i = thread_start(wid, lid); i < info[0]; i = i + grid_step(nwg)) {
        let c = cond[strided_offset(i, info[1])] != {{K}}(0);
        out[i] = select(on_false[strided_offset(i, info[3])], on_true[strided_offset(i, info[2])], c);
    }
}
