// The adjoint of unfold2d, as a gather: out[plane, y, x] is the sum, in kernel-offset order,
// of the window elements cols[plane, i * kw + j, oh * wo + ow] that unfold2d took from
// (y, x), i.e. oh * sh + i * dh - ph = y and ow * sw + j * dw - pw = x. One thread per
// output element; no atomics, so the result is deterministic. Floats sum in f32, integers
// in their stored type (wrapping; `{{store}}` keeps u8 to 8 bits).
// info: count, h, w, ho, wo, kh, kw, sh, sw, ph, pw, dh, dw, base of the cols layout.
@group(0) @binding(1) var<storage, read> cols: array<{{T}}>;
@group(0) @binding(2) var<storage, read_write> out: array<{{T}}>;

// The window position along one dim whose kernel offset `t` reads input index `y` (stride,
// padding, dilation at info[geo], info[geo + 2], info[geo + 4]; `count` positions), or
// `count` when there is none.
fn window_index(y: u32, t: u32, count: u32, geo: u32) -> u32 {
    let stride = info[geo];
    let padded = y + info[geo + 2u];
    let reach = t * info[geo + 4u];
    if (padded < reach || (padded - reach) % stride != 0u) { return count; }
    return min((padded - reach) / stride, count);
}

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
    let h = info[1];
    let w = info[2];
    let ho = info[3];
    let wo = info[4];
    let kh = info[5];
    let kw = info[6];
    for (var i = thread_start(wid, lid); i < info[0]; i = i + grid_step(nwg)) {
        let x = i % w;
        let y = (i / w) % h;
        let plane = i / (h * w);
        let first = plane * kh * kw * ho * wo;
        var sum = {{C}}(0);
        for (var ki = 0u; ki < kh; ki = ki + 1u) {
            let oh = window_index(y, ki, ho, 7u);
            if (oh == ho) { continue; }
            for (var kj = 0u; kj < kw; kj = kj + 1u) {
                let ow = window_index(x, kj, wo, 8u);
                if (ow == wo) { continue; }
                let at = first + ((ki * kw + kj) * ho + oh) * wo + ow;
                sum = sum + {{C}}(cols[strided_offset(at, info[13])]);
            }
        }
        out[i] = {{store}};
    }
}
