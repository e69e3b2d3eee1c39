// Reductions: out[o] = the reduction over j < r of x[kept(o) + reduced(j)], where `kept` is
// the layout of the dims that stay (with the input's start offset) and `reduced` the layout
// of the reduced dims (start 0), both with adjacent dims merged (the same plan as CUDA's).
// info: outer (number of outputs), r (elements per output), mode, chunk, base of the kept
// layout, base of the reduced layout.
//
// `{{op}}` picks the accumulator: `fsum` (floats, in f32), `isum` (integers, exact in 64
// bits) or `ext` (max / min and its position). `{{finish}}` turns an accumulator `a` into
// the stored output. `mode` picks the work split:
//   0: one thread per output (short reductions, or outputs adjacent in memory);
//   2: one workgroup per output (a strided loop, then a tree in workgroup memory);
//   3: one workgroup per `chunk` elements of an output, writing partial results to `part`
//      (outer * ceil(r / chunk) of them, output-major), which mode 4 then reduces;
//   4: one workgroup per output over its parts in `part`.
// (Mode 1, a warp per output, exists on CUDA only.) Partial results carry positions, so the
// merge order never changes max / min / arg results.
@group(0) @binding(1) var<storage, read> x: array<{{T}}>;
@group(0) @binding(2) var<storage, read_write> out: array<{{O}}>;
@group(0) @binding(3) var<storage, read_write> part: array<Acc>;

const NONE: u32 = 0xffffffffu;

// A partial result. Float sums keep the sum in `v`; integer sums keep the low word of a
// 64-bit sum in `v` (its bits) and the high word in `w`; max / min keep the best value in
// `v` and its position in `w` (NONE before the first element).
struct Acc {
    v: {{C}},
    w: u32,
}

fn fsum_identity() -> Acc {
    return Acc({{C}}(0), 0u);
}

fn fsum_element(v: {{C}}, j: u32) -> Acc {
    return Acc(v, 0u);
}

fn fsum_merge(a: Acc, b: Acc) -> Acc {
    return Acc(a.v + b.v, 0u);
}

fn isum_identity() -> Acc {
    return Acc({{C}}(0), 0u);
}

// The element sign-extended to 64 bits.
fn isum_element(v: {{C}}, j: u32) -> Acc {
    return Acc(v, select(0u, NONE, v < {{C}}(0)));
}

fn isum_merge(a: Acc, b: Acc) -> Acc {
    let lo = bitcast<u32>(a.v) + bitcast<u32>(b.v);
    let carry = select(0u, 1u, lo < bitcast<u32>(a.v));
    return Acc(bitcast<{{C}}>(lo), a.w + b.w + carry);
}

// The 64-bit sum saturated to i32 (integer sums are i64, stored as i32 on wgpu).
fn sat_signed(a: Acc) -> i32 {
    let lo = bitcast<i32>(a.v);
    let fits = (a.w == 0u && lo >= 0) || (a.w == NONE && lo < 0);
    let saturated = select(2147483647, -2147483647 - 1, (a.w & 0x80000000u) != 0u);
    return select(saturated, lo, fits);
}

fn ext_identity() -> Acc {
    return Acc({{worst}}, NONE);
}

fn ext_element(v: {{C}}, j: u32) -> Acc {
    return Acc(v, j);
}

// Whether `b` beats `a`: any element beats none, NaN beats numbers, a better value beats a
// worse one, and among equals (or NaNs) the first position wins, as on the CPU.
fn ext_beats(a: Acc, b: Acc) -> bool {
    if (b.w == NONE) { return false; }
    if (a.w == NONE) { return true; }
    let a_nan = is_nan(f32(a.v));
    let b_nan = is_nan(f32(b.v));
    if (a_nan || b_nan) {
        return b_nan && (!a_nan || b.w < a.w);
    }
    return b.v {{cmp}} a.v || (b.v == a.v && b.w < a.w);
}

fn ext_merge(a: Acc, b: Acc) -> Acc {
    if (ext_beats(a, b)) { return b; }
    return a;
}

// Element j of the output whose kept position is `base`.
fn element(base: u32, j: u32) -> Acc {
    let v = x[base + strided_offset(j, info[5])];
    return {{op}}_element({{C}}(v), j);
}

fn finish(a: Acc) -> {{O}} {
    return {{finish}};
}

var<workgroup> tree: array<Acc, WG>;

// The merge of every thread's `a` in the workgroup, returned to all of them.
fn group_merge(a: Acc, lid: u32) -> Acc {
    tree[lid] = a;
    workgroupBarrier();
    for (var s = WG / 2u; s > 0u; s = s >> 1u) {
        if (lid < s) {
            tree[lid] = {{op}}_merge(tree[lid], tree[lid + s]);
        }
        workgroupBarrier();
    }
    let total = tree[0];
    workgroupBarrier();
    return total;
}

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
    let outer = info[0];
    let r = info[1];
    let mode = info[2];
    let chunk = info[3];
    if (mode == 0u) {
        for (var o = thread_start(wid, lid); o < outer; o = o + grid_step(nwg)) {
            let base = strided_offset(o, info[4]);
            var a = {{op}}_identity();
            for (var j = 0u; j < r; j = j + 1u) {
                a = {{op}}_merge(a, element(base, j));
            }
            out[o] = finish(a);
        }
        return;
    }
    let parts = select(1u, (r + chunk - 1u) / chunk, mode != 2u);
    if (mode == 4u) {
        for (var o = wid.x; o < outer; o = o + nwg.x) {
            var a = {{op}}_identity();
            for (var k = lid; k < parts; k = k + WG) {
                a = {{op}}_merge(a, part[o * parts + k]);
            }
            a = group_merge(a, lid);
            if (lid == 0u) { out[o] = finish(a); }
        }
        return;
    }
    // Modes 2 and 3: workgroup b reduces elements [c * len, (c + 1) * len) of output
    // b / parts, c = b % parts (one part of all r elements in mode 2).
    let len = select(r, chunk, mode == 3u);
    for (var b = wid.x; b < outer * parts; b = b + nwg.x) {
        let o = b / parts;
        let first = (b % parts) * len;
        let end = min(first + len, r);
        let base = strided_offset(o, info[4]);
        var a = {{op}}_identity();
        for (var j = first + lid; j < end; j = j + WG) {
            a = {{op}}_merge(a, element(base, j));
        }
        a = group_merge(a, lid);
        if (lid == 0u) {
            if (mode == 3u) {
                part[b] = a;
            } else {
                out[o] = finish(a);
            }
        }
    }
}
