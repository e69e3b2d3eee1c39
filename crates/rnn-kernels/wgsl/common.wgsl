// Shared by every WGSL kernel of the rnn wgpu backend (prepended to each source).
//
// `info` holds a kernel's sizes and operand layouts as u32 words, built on the host by
// `Target::info` (rnn-core, gpu/plan.rs) for CUDA and WGSL alike. A layout stored at
// info[base] is: rank, start offset, dims[rank], strides[rank] (in elements), or
// CONTIGUOUS, start offset.

@group(0) @binding(0) var<storage, read> info: array<u32>;

const WG: u32 = 256u;

// The rank word of a contiguous layout: its element `i` is at `start + i`.
const CONTIGUOUS: u32 = 0xffffffffu;

// Storage position of the row-major linear index `i` of the layout at info[base]. The one
// place where strided indexing is written in WGSL.
fn strided_offset(i: u32, base: u32) -> u32 {
    let rank = info[base];
    if (rank == CONTIGUOUS) {
        return info[base + 1u] + i;
    }
    var offset = info[base + 1u];
    var rest = i;
    for (var d = rank; d > 0u; d = d - 1u) {
        let size = info[base + 1u + d];
        let stride = info[base + 1u + rank + d];
        offset = offset + (rest % size) * stride;
        rest = rest / size;
    }
    return offset;
}

// Kernels loop over their elements with a grid stride: thread `thread_start` handles
// elements thread_start, thread_start + grid_step, ... (the grid is capped by the host).
// Element counts stay below 2^31 (the largest storage binding), so the loops cannot wrap.
fn thread_start(wid: vec3<u32>, lid: u32) -> u32 {
    return wid.x * WG + lid;
}

fn grid_step(nwg: vec3<u32>) -> u32 {
    return nwg.x * WG;
}

// erf to ~1e-7 relative error (Abramowitz-Stegun 7.1.26 is too coarse for gradient checks;
// this is the rational approximation used by many libm implementations, in f32).
fn erf_approx(x: f32) -> f32 {
    let a = abs(x);
    if (a < 0.84375) {
        let z = x * x;
        let r = 0.128379167 + z * (-0.325042108 + z * (-0.0284817495 + z * (-0.00577027029 + z * -0.0000237630166)));
        let s = 1.0 + z * (0.397917224 + z * (0.0650222500 + z * (0.00508130628 + z * (0.000132494738 + z * -0.00000396022827))));
        return x + x * (r / s);
    }
    if (a >= 6.0) {
        return sign(x);
    }
    // erfc(a) = exp(-a^2) * poly(1/a^2) style tail through the complementary function.
    let t = 1.0 / (1.0 + 0.5 * a);
    let y = t * exp(-a * a - 1.26551223 + t * (1.00002368 + t * (0.37409196 + t * (0.09678418 +
        t * (-0.18628806 + t * (0.27886807 + t * (-1.13520398 + t * (1.48851587 +
        t * (-0.82215223 + t * 0.17087277)))))))));
    return sign(x) * (1.0 - y);
}

fn is_nan(x: f32) -> bool {
    return (bitcast<u32>(x) & 0x7fffffffu) > 0x7f800000u;
}

// C's (and so PyTorch's) pow. WGSL's `pow` is undefined for negative bases and for a zero
// base with a non-positive exponent, and computes exp2(b * log2(a)), which is NaN for
// pow(1, inf); the special cases are spelled out, the rest is pow of |a| with a sign.
fn pow_ieee(a: f32, b: f32) -> f32 {
    if (b == 0.0 || a == 1.0) { return 1.0; }
    if (is_nan(a) || is_nan(b)) { return a + b; }
    let inf = bitcast<f32>(0x7f800000u);
    let ax = abs(a);
    let b_is_int = floor(b) == b;
    // |b| >= 2^24 is an even integer in f32.
    let b_is_odd = b_is_int && abs(b) < 16777216.0 && floor(b * 0.5) != b * 0.5;
    var m: f32;
    if (ax == 0.0) {
        m = select(0.0, inf, b < 0.0);
    } else if (ax == inf) {
        m = select(0.0, inf, b > 0.0);
    } else if (abs(b) == inf) {
        m = select(select(0.0, inf, b > 0.0), select(inf, 0.0, b > 0.0), ax < 1.0);
        m = select(m, 1.0, ax == 1.0);
    } else {
        m = pow(ax, b);
    }
    let negative = (bitcast<u32>(a) & 0x80000000u) != 0u;
    // A finite negative base with a fractional exponent has no real power.
    if (negative && a != 0.0 && ax != inf && !b_is_int) { return bitcast<f32>(0x7fc00000u); }
    return select(m, -m, negative && b_is_odd);
}

// Float to integer conversions with Rust's `as` semantics: truncate, saturate, NaN -> 0.
fn f_to_u32(x: f32) -> u32 {
    if (is_nan(x) || x <= 0.0) { return 0u; }
    if (x >= 4294967040.0) { return 4294967295u; }
    return u32(x);
}
fn f_to_u8(x: f32) -> u32 {
    if (is_nan(x) || x <= 0.0) { return 0u; }
    return u32(min(x, 255.0));
}
fn f_to_i32(x: f32) -> i32 {
    if (is_nan(x)) { return 0; }
    if (x >= 2147483520.0) { return 2147483647; }
    if (x <= -2147483648.0) { return -2147483647 - 1; }
    return i32(x);
}

// fmod(x, y) exactly, by long division of the significands as C libraries compute it
// (WGSL's float % is x - y * trunc(x / y), which rounds). NaN for a zero or NaN y and an
// infinite or NaN x; x itself when |x| < |y| (y infinite included).
fn fmod_exact(x: f32, y: f32) -> f32 {
    let ax = bitcast<u32>(x) & 0x7fffffffu;
    let ay = bitcast<u32>(y) & 0x7fffffffu;
    let sign = bitcast<u32>(x) & 0x80000000u;
    if (ay == 0u || ax >= 0x7f800000u || ay > 0x7f800000u) { return bitcast<f32>(0x7fc00000u); }
    if (ax < ay) { return x; }
    if (ax == ay) { return bitcast<f32>(sign); }
    var ex = i32(ax >> 23u);
    var mx = ax & 0x7fffffu;
    if (ex == 0) { ex = 1; } else { mx = mx | 0x800000u; }
    while (mx < 0x800000u) { mx = mx << 1u; ex = ex - 1; }
    var ey = i32(ay >> 23u);
    var my = ay & 0x7fffffu;
    if (ey == 0) { ey = 1; } else { my = my | 0x800000u; }
    while (my < 0x800000u) { my = my << 1u; ey = ey - 1; }
    // mx < 2 my on every pass: subtract when it fits, then shift in the next bit.
    for (; ex > ey; ex = ex - 1) {
        if (mx >= my) { mx = mx - my; }
        if (mx == 0u) { return bitcast<f32>(sign); }
        mx = mx << 1u;
    }
    if (mx >= my) { mx = mx - my; }
    if (mx == 0u) { return bitcast<f32>(sign); }
    while (mx < 0x800000u) { mx = mx << 1u; ex = ex - 1; }
    if (ex > 0) { return bitcast<f32>(sign | (u32(ex) << 23u) | (mx & 0x7fffffu)); }
    return bitcast<f32>(sign | (mx >> u32(1 - ex)));
}

// Python's `//` and `%` on floats, as PyTorch's floor_divide and remainder (see the CUDA
// forms in common.cuh).
fn floor_divide_f32(a: f32, b: f32) -> f32 {
    if (b == 0.0) { return a / b; }
    let m = fmod_exact(a, b);
    var div = (a - m) / b;
    if (m != 0.0 && (b < 0.0) != (m < 0.0)) { div = div - 1.0; }
    if (div == 0.0) { return bitcast<f32>((bitcast<u32>(a) ^ bitcast<u32>(b)) & 0x80000000u); }
    var floor_div = floor(div);
    if (div - floor_div > 0.5) { floor_div = floor_div + 1.0; }
    return floor_div;
}
fn remainder_f32(a: f32, b: f32) -> f32 {
    var m = fmod_exact(a, b);
    if (m != 0.0 && (b < 0.0) != (m < 0.0)) { m = m + b; }
    return m;
}

// The integer forms (i64 is stored as i32): a zero divisor gives 0, as on the CPU.
fn floor_divide_i32(a: i32, b: i32) -> i32 {
    if (b == 0) { return 0; }
    if (b == -1) { return bitcast<i32>(0u - bitcast<u32>(a)); }
    let q = a / b;
    let r = a - q * b;
    return select(q, q - 1, r != 0 && (r > 0) != (b > 0));
}
fn remainder_i32(a: i32, b: i32) -> i32 {
    if (b == 0 || b == -1) { return 0; }
    let r = a - (a / b) * b;
    return select(r, r + b, r != 0 && (r > 0) != (b > 0));
}
fn floor_divide_u32(a: u32, b: u32) -> u32 {
    return select(a / select(b, 1u, b == 0u), 0u, b == 0u);
}
fn remainder_u32(a: u32, b: u32) -> u32 {
    return select(a % select(b, 1u, b == 0u), 0u, b == 0u);
}
