// Access mode of matmul_unit.wgsl when b's rows are contiguous and 4-aligned (column
// stride 1; start, row stride and batch strides multiples of 4; n a multiple of 4): b and
// out are read and written as vec4, one column group per access.

// The element offset of column group g within a row of b (the last group when g is past n).
fn column_offsets(g: u32) -> vec4<u32> {
    return vec4<u32>(min(g, info[1] / 4u - 1u) * 4u);
}

// Row `kb` (its element offset) of b at the columns `c`.
fn load_b(kb: u32, c: vec4<u32>) -> vec4<f32> {
    return vec4<f32>(b[(kb + c.x) / 4u]);
}

// Stores column group g of output row `row` when it lies inside the matrix.
fn store_group(base: u32, row: u32, g: u32, v: vec4<f32>) {
    let n = info[1];
    if (row < info[0] && g < n / 4u) {
        out[(base + row * n) / 4u + g] = vec4<{{T}}>(v);
    }
}
