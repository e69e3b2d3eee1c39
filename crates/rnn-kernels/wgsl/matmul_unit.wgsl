// Batched out[z] = a[z] @ b[z] for adapters that run invocations SIMD-wide on CPU cores
// (lavapipe, WARP, SwiftShader). There every load or store from a buffer or from workgroup
// memory is a loop over the SIMD lanes, as slow as thousands of vector FMAs, while
// arithmetic on registers is cheap. So this kernel has no workgroup memory and no barrier:
// each invocation reads its operands straight from the buffers and keeps a large block of
// outputs (ROWS rows x 4 * GROUPS columns) in registers, which makes every load feed many
// FMAs. The statements over that block are unrolled by the plan builder (matmul_unit.rs),
// which fills the UNROLLED_* placeholders; a GPU would spill such a block, so GPUs get the
// shared-memory kernel of matmul.wgsl instead.
//
// Invocation x of a workgroup owns the column groups (4 adjacent columns each)
// g0 + LANES * j, j = 0..GROUPS, interleaved with its neighbours, and the rows row0..row0+ROWS.
// Rows and columns past the matrix are computed on clamped (valid) indices and not stored,
// so any m and n work without bounds checks in the k loop.
//
// `load_b`, `column_offsets` and `store_group` come from the access mode (MATMUL_UNIT_VEC4 or
// MATMUL_UNIT_STRIDED): vec4 loads and stores of b and out when b's rows are contiguous
// and 4-aligned, else one element at a time through the strides.
//
// info: as matmul.wgsl: m, n, k, a row stride, a col stride, b row stride, b col stride,
// first workgroup x, y, z of this launch, then the bases of the batch layouts of a and b.
@group(0) @binding(1) var<storage, read> a: array<{{T}}>;
@group(0) @binding(2) var<storage, read> b: array<{{BT}}>;
@group(0) @binding(3) var<storage, read_write> out: array<{{BT}}>;

const LANES: u32 = {{LANES}}u;
const ROWS: u32 = {{ROWS}}u;
const GROUPS: u32 = {{GROUPS}}u;

{{ACCESS}}

@compute @workgroup_size({{LANES}}, 1, 1)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>) {
    let m = info[0];
    let n = info[1];
    let k = info[2];
    let a_rs = info[3];
    let a_cs = info[4];
    let b_rs = info[5];
    let z = wid.z + info[9];
    let row0 = (wid.y + info[8]) * ROWS;
    let g0 = (wid.x + info[7]) * GROUPS * LANES + lid.x;
    let a_start = strided_offset(z, info[10]);
    let b_start = strided_offset(z, info[11]);
    // Where this invocation's rows of a start, and the offsets of its columns within a row
    // of b, clamped into the matrix.
{{UNROLLED_SETUP}}
    for (var kk = 0u; kk < k; kk = kk + 1u) {
        let ka = kk * a_cs;
        let kb = b_start + kk * b_rs;
{{UNROLLED_STEP}}
    }
    let base = z * m * n;
{{UNROLLED_STORE}}
}
