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
