// out[plane, i * kw + j, oh * wo + ow] = x[plane, oh * sh + i * dh - ph, ow * sw + j * dw - pw],
// or the padding value where that position lies outside the h x w input; one thread per
// output element. `x` is read through its [N, C, H, W] layout.
// info: count, h, w, ho, wo, kh, kw, sh, sw, ph, pw, dh, dw, padding value (bits), base of
// the input layout.
@group(0) @binding(1) var<storage, read> x: array<{{T}}>;
@group(0) @binding(2) var<storage, read_write> out: array<{{T}}>;

// The input index along one dim of window position `o`, kernel offset `t` (stride, padding,
// dilation at info[geo], info[geo + 2], info[geo + 4]), or `size` when it is in the padding.
fn source_index(o: u32, t: u32, size: u32, geo: u32) -> u32 {
    let padded = o * info[geo] + t * info[geo + 4u];
    let pad = info[geo + 2u];
    if (padded < pad || padded - pad >= size) { return size; }
    return padded - pad;
}

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
    let h = info[1];
    let w = info[2];
    let wo = info[4];
    let kw = info[6];
    let positions = info[3] * wo;
    let taps = info[5] * kw;
    for (var i = thread_start(wid, lid); i < info[0]; i = i + grid_step(nwg)) {
        let pos = i % positions;
        let tap = (i / positions) % taps;
        let plane = i / (positions * taps);
        let row = source_index(pos / wo, tap / kw, h, 7u);
        let col = source_index(pos % wo, tap % kw, w, 8u);
        if (row == h || col == w) {
            out[i] = {{pad}};
        } else {
            out[i] = x[strided_offset((plane * h + row) * w + col, info[14])];
        }
    }
}
