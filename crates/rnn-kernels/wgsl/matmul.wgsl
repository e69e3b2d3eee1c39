// Batched out[z] = a[z] @ b[z]: a is m x k, b is k x n, out is m x n row-major, contiguous
// over the batch. Each workgroup of 16 x 16 threads computes a 64 x 64 tile of one product,
// each thread a 4 x 4 block of it (rows ty + 16 i, columns tx + 16 j), stepping over k in
// slices of BK: the A (64 x BK) and B (BK x 64) slices are staged in workgroup memory as f32,
// with zeros past the matrix edges so that any m, n and k work.
//
// The operands are read through their row and column strides, so transposed views need no
// copy; the first element of product z comes from `strided_offset(z, base)` over a layout
// of the batch dims alone (broadcast batch dims have stride 0).
//
// info: m, n, k, a row stride, a col stride, b row stride, b col stride, first tile column,
// first tile row, first batch (offsets of this launch within a larger grid), then the bases
// of the batch layouts of a and b.
@group(0) @binding(1) var<storage, read> a: array<{{T}}>;
@group(0) @binding(2) var<storage, read> b: array<{{T}}>;
@group(0) @binding(3) var<storage, read_write> out: array<{{T}}>;

const TILE: u32 = 64u;
const BK: u32 = 16u;

// The staged slices, packed by the threads that read them: a_tile[kk * 16 + ty] holds
// a[row0 + ty + 16 i, k0 + kk] for i = 0..4, and b_tile[kk * 16 + tx] holds
// b[k0 + kk, col0 + tx + 16 j] for j = 0..4, so that each step of the product reads one
// vector of each.
var<workgroup> a_tile: array<vec4<f32>, 256>; // BK * 16
var<workgroup> b_tile: array<vec4<f32>, 256>;

struct Operand {
    offset: u32,
    row_stride: u32,
    col_stride: u32,
}

// Element (r, c) of `x`, or 0 outside rows x cols.
fn a_at(x: Operand, r: u32, c: u32, rows: u32, cols: u32) -> f32 {
    if (r >= rows || c >= cols) { return 0.0; }
    return f32(a[x.offset + r * x.row_stride + c * x.col_stride]);
}

fn b_at(x: Operand, r: u32, c: u32, rows: u32, cols: u32) -> f32 {
    if (r >= rows || c >= cols) { return 0.0; }
    return f32(b[x.offset + r * x.row_stride + c * x.col_stride]);
}

// Position (tile index, k index) of staged element `t` of a TILE x BK slice. Consecutive
// threads take consecutive elements along the operand's smaller stride, so that their
// global reads are adjacent.
fn slice_pos(t: u32, k_fast: bool) -> vec2<u32> {
    if (k_fast) {
        return vec2<u32>(t / BK, t % BK);
    }
    return vec2<u32>(t % TILE, t / TILE);
}

// Stages the k-slice starting at k0 of a's rows row0.. and b's columns col0...
fn stage(pa: Operand, pb: Operand, row0: u32, col0: u32, k0: u32, lid: u32) {
    let m = info[0];
    let n = info[1];
    let k = info[2];
    let a_k_fast = pa.col_stride <= pa.row_stride;
    let b_k_fast = pb.row_stride < pb.col_stride;
    for (var t = lid; t < TILE * BK; t = t + WG) {
        let p = slice_pos(t, a_k_fast);
        a_tile[p.y * 16u + p.x % 16u][p.x / 16u] = a_at(pa, row0 + p.x, k0 + p.y, m, k);
        let q = slice_pos(t, b_k_fast);
        b_tile[q.y * 16u + q.x % 16u][q.x / 16u] = b_at(pb, k0 + q.y, col0 + q.x, k, n);
    }
}

@compute @workgroup_size(16, 16, 1)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_id) lid3: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
    let m = info[0];
    let n = info[1];
    let k = info[2];
    let z = wid.z + info[9];
    let row0 = (wid.y + info[8]) * TILE;
    let col0 = (wid.x + info[7]) * TILE;
    let pa = Operand(strided_offset(z, info[10]), info[3], info[4]);
    let pb = Operand(strided_offset(z, info[11]), info[5], info[6]);
    let tx = lid3.x;
    let ty = lid3.y;
    var acc0 = vec4<f32>(0.0);
    var acc1 = vec4<f32>(0.0);
    var acc2 = vec4<f32>(0.0);
    var acc3 = vec4<f32>(0.0);
    for (var k0 = 0u; k0 < k; k0 = k0 + BK) {
        stage(pa, pb, row0, col0, k0, lid);
        workgroupBarrier();
        for (var kk = 0u; kk < BK; kk = kk + 1u) {
            let av = a_tile[kk * 16u + ty];
            let bv = b_tile[kk * 16u + tx];
            acc0 = acc0 + av.x * bv;
            acc1 = acc1 + av.y * bv;
            acc2 = acc2 + av.z * bv;
            acc3 = acc3 + av.w * bv;
        }
        workgroupBarrier();
    }
    let base = z * m * n;
    store_row(base, row0 + ty, col0 + tx, acc0);
    store_row(base, row0 + ty + 16u, col0 + tx, acc1);
    store_row(base, row0 + ty + 32u, col0 + tx, acc2);
    store_row(base, row0 + ty + 48u, col0 + tx, acc3);
}

// Writes the four outputs (row, col + 16 j) that lie inside the matrix.
fn store_row(base: u32, row: u32, col: u32, v: vec4<f32>) {
    let m = info[0];
    let n = info[1];
    if (row >= m) { return; }
    for (var j = 0u; j < 4u; j = j + 1u) {
        let c = col + 16u * j;
        if (c < n) {
            out[base + row * n + c] = {{T}}(v[j]);
        }
    }
}
