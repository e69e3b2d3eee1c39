// Access mode of matmul_unit.wgsl for any layout of b (transposed, narrowed, unaligned) and
// any n: b is read one element at a time through its strides, out written one element at a
// time.

// The element offsets of the four columns of group g within a row of b, each clamped to the
// last column.
fn column_offsets(g: u32) -> vec4<u32> {
    let last = info[1] - 1u;
    let c = vec4<u32>(4u * g) + vec4<u32>(0u, 1u, 2u, 3u);
    return min(c, vec4<u32>(last)) * info[6];
}

// Row `kb` (its element offset) of b at the columns `c`.
fn load_b(kb: u32, c: vec4<u32>) -> vec4<f32> {
    return vec4<f32>(f32(b[kb + c.x]), f32(b[kb + c.y]), f32(b[kb + c.z]), f32(b[kb + c.w]));
}

// Stores the columns of group g of output row `row` that lie inside the matrix.
fn store_group(base: u32, row: u32, g: u32, v: vec4<f32>) {
    let n = info[1];
    if (row >= info[0]) {
        return;
    }
    for (var j = 0u; j < 4u; j = j + 1u) {
        let c = 4u * g + j;
        if (c < n) {
            out[base + row * n + c] = {{T}}(v[j]);
        }
    }
}
