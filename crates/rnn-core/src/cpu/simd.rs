//! Contiguous elementwise loops compiled three times: for the baseline x86-64 target
//! (SSE2), with AVX2 + FMA, and with AVX-512, picked at run time. Ops written branch-free
//! (see `num::exp_f32`) vectorize 8 or 16 lanes wide without the crate being built for a
//! specific CPU (measured: exp 0.74 ns/element with AVX2, 0.40 with AVX-512, on Zen 4).

/// The widest instruction set this CPU offers, detected once.
#[cfg(target_arch = "x86_64")]
#[derive(Clone, Copy, PartialEq, Eq)]
enum Tier {
    Plain,
    Avx2,
    Avx512,
}

#[cfg(target_arch = "x86_64")]
fn tier() -> Tier {
    use std::sync::OnceLock;
    static TIER: OnceLock<Tier> = OnceLock::new();
    *TIER.get_or_init(|| {
        let avx512 = ["avx512f", "avx512vl", "avx512bw", "avx512dq"];
        let has = |f: &str| match f {
            "avx512f" => is_x86_feature_detected!("avx512f"),
            "avx512vl" => is_x86_feature_detected!("avx512vl"),
            "avx512bw" => is_x86_feature_detected!("avx512bw"),
            _ => is_x86_feature_detected!("avx512dq"),
        };
        let avx2 = is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma");
        match (avx2, avx512.iter().all(|f| has(f))) {
            (true, true) => Tier::Avx512,
            (true, false) => Tier::Avx2,
            _ => Tier::Plain,
        }
    })
}

/// Whether this CPU runs the AVX-512 tier (the `gemm` crate then runs its 16-lane kernels).
pub fn has_avx512() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        tier() == Tier::Avx512
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

/// Defines `$name`, which runs `$plain` compiled for the best tier of this CPU. Its generic
/// parameters are written in brackets, `pub fn name[T: Copy, ..](..)`: a macro cannot
/// match them between `<` and `>`.
macro_rules! tiered {
    ($(#[$doc:meta])* pub fn $name:ident [$($gen:tt)*] ($($a:ident: $t:ty),*) -> $r:ty = $plain:ident) => {
        $(#[$doc])*
        #[inline(always)]
        pub fn $name<$($gen)*>($($a: $t),*) -> $r {
            #[cfg(target_arch = "x86_64")]
            {
                #[target_feature(enable = "avx2,fma")]
                unsafe fn avx2<$($gen)*>($($a: $t),*) -> $r {
                    $plain($($a),*)
                }
                #[target_feature(enable = "avx512f,avx512vl,avx512bw,avx512dq,avx2,fma")]
                unsafe fn avx512<$($gen)*>($($a: $t),*) -> $r {
                    $plain($($a),*)
                }
                match tier() {
                    // SAFETY: `tier()` checked that the CPU has the enabled features.
                    Tier::Avx512 => return unsafe { avx512($($a),*) },
                    // SAFETY: as above.
                    Tier::Avx2 => return unsafe { avx2($($a),*) },
                    Tier::Plain => {}
                }
            }
            $plain($($a),*)
        }
    };
}

tiered! {
    /// `dst[i] = f(src[i])`.
    pub fn map_slice[T: Copy, U: Sized, F: Fn(T) -> U](src: &[T], dst: &mut [U], f: &F) -> () = map_slice_plain
}

tiered! {
    /// `dst[i] = f(a[i], b[i])`.
    pub fn zip_slice[T: Copy, U: Copy, V: Sized, F: Fn(T, U) -> V](a: &[T], b: &[U], dst: &mut [V], f: &F) -> () = zip_slice_plain
}

tiered! {
    /// `dst[i] = f(a[i], b[i], c[i])`.
    pub fn zip3_slice[T: Copy, V: Sized, F: Fn(T, T, T) -> V](a: &[T], b: &[T], c: &[T], dst: &mut [V], f: &F) -> () = zip3_slice_plain
}

tiered! {
    /// The two sums of `h(a[i], b[i], c[i]) = (u, v)` over the slices' common length, with
    /// `LANES` independent accumulators each (so the loop vectorizes).
    pub fn fold3_pairs[T: Copy, A: Copy + std::ops::Add<Output = A>, H: Fn(T, T, T) -> (A, A)](a: &[T], b: &[T], c: &[T], zero: A, h: &H) -> (A, A) = fold3_pairs_plain
}

tiered! {
    /// `dst[i] = f(dst[i], src[i])`: an op written into its left operand's buffer.
    pub fn zip_assign[T: Copy, U: Copy, F: Fn(T, U) -> T](dst: &mut [T], src: &[U], f: &F) -> () = zip_assign_plain
}

tiered! {
    /// `p[i] = f(p[i], g[i], state)` with `state` the `K` values `s[..][i]`, which `f` may
    /// change (an optimizer's update of a parameter and its states, in place).
    pub fn update_slices[const K: usize, T: Copy, F: Fn(T, T, &mut [T; K]) -> T](p: &mut [T], g: &[T], s: [&mut [T]; K], f: &F) -> () = update_slices_plain
}

tiered! {
    /// Folds `g(x)` over `xs` with `LANES` independent accumulators (so the loop
    /// vectorizes), then folds those; `f` must be associative for the result not to depend
    /// on the split.
    pub fn fold_lanes[T: Copy, A: Copy, G: Fn(T) -> A, F: Fn(A, A) -> A](xs: &[T], init: A, g: G, f: F) -> A = fold_lanes_plain
}

tiered! {
    /// The sum of `xs` in f64, read in blocks of [`SUM_BLOCK`] values per lane summed in f32
    /// (one f32 add per value, as PyTorch's sum; a conversion to f64 per value made the sum
    /// compute-bound on AVX-512) and folded into f64 lanes after each block: a block adds up
    /// at most 8 values per lane before its partial sum is widened, so the error stays
    /// within a few f32 ulps of the block's magnitudes, far below a plain f32 sum's.
    pub fn sum_f32[](xs: &[f32]) -> f64 = sum_f32_plain
}

/// Values per lane group that [`sum_f32`] sums in f32 before widening: 8 per lane.
const SUM_BLOCK: usize = 8 * LANES;

#[inline(always)]
fn sum_f32_plain(xs: &[f32]) -> f64 {
    let streams = if xs.len() >= STREAM_MIN { STREAMS } else { 1 };
    let part = xs.len() / streams / SUM_BLOCK * SUM_BLOCK;
    let mut wide = [[0f64; LANES]; STREAMS];
    for b in (0..part).step_by(SUM_BLOCK) {
        for (s, wide) in wide.iter_mut().enumerate().take(streams) {
            let mut narrow = [0f32; LANES];
            for chunk in xs[s * part + b..][..SUM_BLOCK].chunks_exact(LANES) {
                narrow.iter_mut().zip(chunk).for_each(|(n, &x)| *n += x);
            }
            wide.iter_mut().zip(narrow).for_each(|(w, n)| *w += n as f64);
        }
    }
    let tail: f64 = xs[streams * part..].iter().map(|&x| x as f64).sum();
    wide.into_iter().flatten().fold(tail, |a, b| a + b)
}

#[inline(always)]
fn map_slice_plain<T: Copy, U, F: Fn(T) -> U>(src: &[T], dst: &mut [U], f: &F) {
    for (o, &x) in dst.iter_mut().zip(src) {
        *o = f(x);
    }
}

#[inline(always)]
fn zip_slice_plain<T: Copy, U: Copy, V, F: Fn(T, U) -> V>(a: &[T], b: &[U], dst: &mut [V], f: &F) {
    for ((o, &x), &y) in dst.iter_mut().zip(a).zip(b) {
        *o = f(x, y);
    }
}

#[inline(always)]
fn zip3_slice_plain<T: Copy, V, F: Fn(T, T, T) -> V>(a: &[T], b: &[T], c: &[T], dst: &mut [V], f: &F) {
    for (((o, &x), &y), &z) in dst.iter_mut().zip(a).zip(b).zip(c) {
        *o = f(x, y, z);
    }
}

#[inline(always)]
fn fold3_pairs_plain<T: Copy, A: Copy + std::ops::Add<Output = A>, H: Fn(T, T, T) -> (A, A)>(
    a: &[T],
    b: &[T],
    c: &[T],
    zero: A,
    h: &H,
) -> (A, A) {
    let n = a.len().min(b.len()).min(c.len());
    let (a, b, c) = (&a[..n], &b[..n], &c[..n]);
    let (mut lu, mut lv) = ([zero; LANES], [zero; LANES]);
    let (ca, cb, cc) = (a.chunks_exact(LANES), b.chunks_exact(LANES), c.chunks_exact(LANES));
    let (mut tu, mut tv) = (zero, zero);
    for ((&x, &y), &z) in ca.remainder().iter().zip(cb.remainder()).zip(cc.remainder()) {
        let (u, v) = h(x, y, z);
        (tu, tv) = (tu + u, tv + v);
    }
    for ((ra, rb), rc) in ca.zip(cb).zip(cc) {
        for (((su, sv), &x), (&y, &z)) in lu.iter_mut().zip(lv.iter_mut()).zip(ra).zip(rb.iter().zip(rc)) {
            let (u, v) = h(x, y, z);
            (*su, *sv) = (*su + u, *sv + v);
        }
    }
    (lu.into_iter().fold(tu, |s, l| s + l), lv.into_iter().fold(tv, |s, l| s + l))
}

#[inline(always)]
fn zip_assign_plain<T: Copy, U: Copy, F: Fn(T, U) -> T>(dst: &mut [T], src: &[U], f: &F) {
    for (o, &y) in dst.iter_mut().zip(src) {
        *o = f(*o, y);
    }
}

#[inline(always)]
fn update_slices_plain<const K: usize, T: Copy, F: Fn(T, T, &mut [T; K]) -> T>(
    p: &mut [T],
    g: &[T],
    s: [&mut [T]; K],
    f: &F,
) {
    let n = p.len();
    let g = &g[..n];
    let mut s = s.map(|s| &mut s[..n]);
    for i in 0..n {
        let mut state: [T; K] = std::array::from_fn(|k| s[k][i]);
        p[i] = f(p[i], g[i], &mut state);
        for (buf, value) in s.iter_mut().zip(state) {
            buf[i] = value;
        }
    }
}

/// Independent accumulators of `fold_lanes`: enough to hide the add latency of 4-wide f64
/// vectors (4 registers) and keep the loop vectorized.
const LANES: usize = 16;

/// Runs of at least this many elements are read as [`STREAMS`] streams at once.
const STREAM_MIN: usize = 1 << 15;

/// Parts of a long run that `fold_lanes` reads side by side. A single sequential stream
/// left this 2-core AMD EPYC VM's memory bandwidth unused: summing 64 MB on 2 threads read
/// 27-33 GB/s as one stream per thread, 38-42 GB/s as four (2 streams: 33-39).
const STREAMS: usize = 4;

#[inline(always)]
fn fold_lanes_plain<T: Copy, A: Copy, G: Fn(T) -> A, F: Fn(A, A) -> A>(xs: &[T], init: A, g: G, f: F) -> A {
    if xs.len() >= STREAM_MIN {
        return fold_streams(xs, init, g, f);
    }
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

/// `fold_lanes` over [`STREAMS`] equal parts of `xs`, each with its own lanes, advanced
/// together one chunk at a time.
#[inline(always)]
fn fold_streams<T: Copy, A: Copy, G: Fn(T) -> A, F: Fn(A, A) -> A>(xs: &[T], init: A, g: G, f: F) -> A {
    let part = xs.len() / STREAMS / LANES * LANES;
    let mut lanes = [[init; LANES]; STREAMS];
    for i in (0..part).step_by(LANES) {
        for (s, lanes) in lanes.iter_mut().enumerate() {
            for (l, &x) in lanes.iter_mut().zip(&xs[s * part + i..][..LANES]) {
                *l = f(*l, g(x));
            }
        }
    }
    let tail = xs[STREAMS * part..].iter().fold(init, |a, &x| f(a, g(x)));
    lanes.into_iter().flatten().fold(tail, f)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `sum_f32` adds every element once (integer values: exact), and on values of mixed
    /// signs and magnitudes stays within its bound (a few f32 ulps of the summed magnitudes)
    /// of the f64 sum; NaN and infinities come through.
    #[test]
    fn sum_f32_counts_every_element_once_and_stays_close() {
        for n in [0, 1, SUM_BLOCK - 1, SUM_BLOCK + 5, STREAM_MIN - 1, STREAM_MIN, 3 * STREAM_MIN + 4 * SUM_BLOCK + 7] {
            let xs: Vec<f32> = (0..n).map(|i| (i % 1000) as f32).collect();
            let want: f64 = xs.iter().map(|&x| x as f64).sum();
            assert_eq!(sum_f32(&xs), want, "n = {n}");
            let mixed: Vec<f32> =
                (0..n).map(|i| ((i * 7919 % 1000) as f32 - 499.5) * 10f32.powi((i % 7) as i32 - 3)).collect();
            let want: f64 = mixed.iter().map(|&x| x as f64).sum();
            let scale: f64 = mixed.iter().map(|&x| x.abs() as f64).sum();
            let err = (sum_f32(&mixed) - want).abs();
            // Each f32 add of a lane's block rounds by at most half an ulp of a partial sum
            // no larger than the block's magnitudes: 8 adds per value's block at most.
            assert!(err <= 4.0 * f32::EPSILON as f64 * scale, "n = {n}: off by {err}");
        }
        assert!(sum_f32(&[1.0, f32::NAN, 2.0]).is_nan());
        assert_eq!(sum_f32(&vec![f32::INFINITY; SUM_BLOCK * 2]), f64::INFINITY);
    }

    /// Every element is folded exactly once, whether the run is short, read as streams, or
    /// ends in a remainder after the streams: integer-valued sums are exact in f64.
    #[test]
    fn fold_lanes_counts_every_element_once() {
        for n in [0, 1, LANES + 3, STREAM_MIN - 1, STREAM_MIN, STREAM_MIN + 1, 3 * STREAM_MIN + 4 * LANES + 7] {
            let xs: Vec<f32> = (0..n).map(|i| (i % 1000) as f32).collect();
            let want: f64 = xs.iter().map(|&x| x as f64).sum();
            assert_eq!(fold_lanes(&xs, 0.0, |x: f32| x as f64, |a, b| a + b), want, "n = {n}");
            let max = fold_lanes(&xs, f32::NEG_INFINITY, |x| x, f32::max);
            assert_eq!(max, xs.iter().copied().fold(f32::NEG_INFINITY, f32::max), "n = {n}");
        }
    }
}
