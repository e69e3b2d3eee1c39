//! Contiguous elementwise loops compiled twice: for the baseline x86-64 target (SSE2) and
//! with AVX2 + FMA, picked at run time. Ops written branch-free (see `num::exp_f32`) then
//! vectorize 8 lanes wide without the crate being built for a specific CPU.

/// `dst[i] = f(src[i])`.
#[inline(always)]
pub fn map_slice<T: Copy, U>(src: &[T], dst: &mut [U], f: &impl Fn(T) -> U) {
    #[cfg(target_arch = "x86_64")]
    if has_avx2() {
        // SAFETY: the CPU supports the features the function is compiled for.
        return unsafe { map_slice_avx2(src, dst, f) };
    }
    map_slice_plain(src, dst, f)
}

/// `dst[i] = f(a[i], b[i])`.
#[inline(always)]
pub fn zip_slice<T: Copy, U: Copy, V>(a: &[T], b: &[U], dst: &mut [V], f: &impl Fn(T, U) -> V) {
    #[cfg(target_arch = "x86_64")]
    if has_avx2() {
        // SAFETY: as above.
        return unsafe { zip_slice_avx2(a, b, dst, f) };
    }
    zip_slice_plain(a, b, dst, f)
}

#[inline(always)]
fn map_slice_plain<T: Copy, U>(src: &[T], dst: &mut [U], f: &impl Fn(T) -> U) {
    for (o, &x) in dst.iter_mut().zip(src) {
        *o = f(x);
    }
}

#[inline(always)]
fn zip_slice_plain<T: Copy, U: Copy, V>(a: &[T], b: &[U], dst: &mut [V], f: &impl Fn(T, U) -> V) {
    for ((o, &x), &y) in dst.iter_mut().zip(a).zip(b) {
        *o = f(x, y);
    }
}

#[cfg(target_arch = "x86_64")]
fn has_avx2() -> bool {
    use std::sync::OnceLock;
    static HAS: OnceLock<bool> = OnceLock::new();
    *HAS.get_or_init(|| is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma"))
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn map_slice_avx2<T: Copy, U>(src: &[T], dst: &mut [U], f: &impl Fn(T) -> U) {
    map_slice_plain(src, dst, f)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn zip_slice_avx2<T: Copy, U: Copy, V>(a: &[T], b: &[U], dst: &mut [V], f: &impl Fn(T, U) -> V) {
    zip_slice_plain(a, b, dst, f)
}

/// Independent accumulators of `fold_lanes`: enough to hide the add latency of 4-wide f64
/// vectors (4 registers) and keep the loop vectorized.
const LANES: usize = 16;

/// Folds `g(x)` over `xs` with `LANES` independent accumulators (so the loop vectorizes),
/// then folds those; `f` must be associative for the result to be independent of the split.
#[inline(always)]
pub fn fold_lanes<T: Copy, A: Copy>(xs: &[T], init: A, g: impl Fn(T) -> A + Copy, f: impl Fn(A, A) -> A + Copy) -> A {
    #[cfg(target_arch = "x86_64")]
    if has_avx2() {
        // SAFETY: the CPU supports the features the function is compiled for.
        return unsafe { fold_lanes_avx2(xs, init, g, f) };
    }
    fold_lanes_plain(xs, init, g, f)
}

#[inline(always)]
fn fold_lanes_plain<T: Copy, A: Copy>(xs: &[T], init: A, g: impl Fn(T) -> A + Copy, f: impl Fn(A, A) -> A + Copy) -> A {
    let mut lanes = [init; LANES];
    let chunks = xs.chunks_exact(LANES);
    let tail = chunks.remainder().iter().fold(init, |a, &x| f(a, g(x)));
    for c in chunks {
        for (l, &x) in lanes.iter_mut().zip(c) {
            *l = f(*l, g(x));
        }
    }
    lanes.into_iter().fold(tail, f)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn fold_lanes_avx2<T: Copy, A: Copy>(
    xs: &[T],
    init: A,
    g: impl Fn(T) -> A + Copy,
    f: impl Fn(A, A) -> A + Copy,
) -> A {
    fold_lanes_plain(xs, init, g, f)
}
