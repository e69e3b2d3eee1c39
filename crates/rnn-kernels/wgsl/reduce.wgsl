// Reductions: out[o] = the reduction over j < r of x[layout(o * r + j)], where the layout
// views the input with the kept dims first and the reduced dims last.
// info: outer (number of outputs), r (elements per output), base of the layout.
//
// `{{op}}` picks the accumulator: `fsum` (floats, in f32), `isum` (integers, exact in 64
// bits) or `ext` (max / min and its position). `{{finish}}` turns an accumulator `a` into
// the stored output. `{{per_thread}}` picks one thread per output (short reductions) or
// one workgroup per output (a strided loop, then a tree in workgroup memory).
@group(0) @binding(1) var<storage, read> x: array<{{T}}>;
@group(0) @binding(2) var<storage, read_write> out: array<{{O}}>;

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

// The 64-bit sum saturated to an unsigned integer no larger than `max`.
fn sat_unsigned(a: Acc, max: u32) -> u32 {
    return select(min(bitcast<u32>(a.v), max), max, a.w != 0u);
}

// The 64-bit sum saturated to i32.
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

// Element j of output o.
fn element(o: u32, j: u32) -> Acc {
    let v = x[strided_offset(o * info[1] + j, info[2])];
    return {{op}}_element({{C}}(v), j);
}

fn finish(a: Acc) -> {{O}} {
    return {{finish}};
}

fn reduce_thread(o: u32) {
    if (o >= info[0]) { return; }
    var a = {{op}}_identity();
    for (var j = 0u; j < info[1]; j = j + 1u) {
        a = {{op}}_merge(a, element(o, j));
    }
    out[o] = finish(a);
}

var<workgroup> part: array<Acc, WG>;

fn reduce_group(o: u32, lid: u32) {
    if (o >= info[0]) { return; }
    var a = {{op}}_identity();
    for (var j = lid; j < info[1]; j = j + WG) {
        a = {{op}}_merge(a, element(o, j));
    }
    part[lid] = a;
    workgroupBarrier();
    for (var s = WG / 2u; s > 0u; s = s >> 1u) {
        if (lid < s) {
            part[lid] = {{op}}_merge(part[lid], part[lid + s]);
        }
        workgroupBarrier();
    }
    if (lid == 0u) {
        out[o] = finish(part[0]);
    }
}

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
    if ({{per_thread}}) {
        reduce_thread(thread_id(wid, nwg, lid));
    } else {
        reduce_group(group_id(wid, nwg), lid);
    }
}
