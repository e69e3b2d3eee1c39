//! The f32 tile products of the CPU attention on x86-64 with AVX2 + FMA: a register-blocked
//! micro-kernel that keeps a `6 x 16` block of the result in twelve registers while it walks
//! the shared dimension, reading the left operand one broadcast element at a time (any row
//! and column strides, so `Pᵀ` and `dSᵀ` need no copy) and the right operand as row-major
//! rows of 16 floats. Unlike a general matrix product it packs nothing: the attention tiles
//! are small (`64 x 64 x 64`) and their right operands are already row-major (V, dO, Q, K),
//! or transposed once per tile by the caller (`Qᵀ`, `Kᵀ`, `Vᵀ`), so packing per product
//! would cost as much as the product's arithmetic saved.
//!
//! [`available`] says whether this CPU has the instructions (detected once at run time);
//! without them, or for f64, `cpu.rs` uses the `gemm` crate instead. Where the CPU has
//! AVX-512, the product and the exponentials run on its 16-float registers instead
//! (`cpu_kernel_avx512.rs`: twice the arithmetic per instruction, the same values bit for
//! bit, but for the order in which `exp_sum` adds up a row of more than 8 scores). The
//! forward's column softmax is in `cpu_columns.rs`.

/// Columns of the result per micro-kernel call: two 8-float registers.
pub(super) const NR: usize = 16;

/// Whether this CPU runs the kernel (AVX2 and FMA), detected once.
pub(super) fn available() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        use std::sync::OnceLock;
        static AVX2_FMA: OnceLock<bool> = OnceLock::new();
        *AVX2_FMA.get_or_init(|| is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma"))
    }
    #[cfg(not(target_arch = "x86_64"))]
    false
}

/// An operand of [`product`]: element `(i, j)` at `data[i * rs + j * cs]`.
#[derive(Clone, Copy)]
pub(super) struct Strided<'a> {
    pub data: &'a [f32],
    pub rs: usize,
    pub cs: usize,
}

impl Strided<'_> {
    /// Whether `rows x cols` elements lie inside the slice.
    fn fits(&self, rows: usize, cols: usize) -> bool {
        rows == 0 || cols == 0 || (rows - 1) * self.rs + (cols - 1) * self.cs < self.data.len()
    }
}

/// A left operand as the micro-kernels read it: element `(i, p)` at `ptr + i * rs + p * cs`.
#[cfg(target_arch = "x86_64")]
#[derive(Clone, Copy)]
pub(super) struct Operand {
    pub ptr: *const f32,
    pub rs: usize,
    pub cs: usize,
}

/// Whether the kernels run on AVX-512 here (else on AVX2).
pub(super) fn wide() -> bool {
    crate::cpu::runs_avx512_kernels()
}

/// Panics unless this CPU runs the `wide` tier of the attention's `kernels` (AVX2 and FMA,
/// and AVX-512 when `wide`): what makes the `*_on` functions' kernel calls sound.
pub(super) fn assert_tier(wide: bool, kernels: &str) {
    assert!(available() && (!wide || self::wide()), "the attention {kernels} AVX2 and FMA (AVX-512 when wide)");
}

/// `c = alpha · a b + (c if accumulate)`, with `a` `m x k` (any strides), `b` `k x n` with
/// unit column stride and `n` a multiple of [`NR`], `c` `m x n` with row stride `ldc`.
///
/// Panics if an operand does not hold its elements, if `b`'s columns are not contiguous or
/// `n` is not a multiple of [`NR`], or if the CPU lacks AVX2 / FMA (callers check
/// [`available`]).
pub(super) fn product(
    mnk: (usize, usize, usize),
    a: Strided,
    b: Strided,
    c: &mut [f32],
    ldc: usize,
    epilogue: (f32, bool),
) {
    product_on(wide(), mnk, a, b, (c, ldc), epilogue)
}

/// [`product`] on the AVX-512 kernel when `wide`, else on the AVX2 one; panics if `wide`
/// and the AVX-512 kernels do not run here.
fn product_on(
    wide: bool,
    (m, n, k): (usize, usize, usize),
    a: Strided,
    b: Strided,
    (c, ldc): (&mut [f32], usize),
    (alpha, accumulate): (f32, bool),
) {
    assert_tier(wide, "tile kernel needs");
    assert!(n % NR == 0 && b.cs == 1, "the attention tile kernel needs whole 16-column blocks");
    assert!(a.fits(m, k) && b.fits(k, n), "attention tile operand out of bounds");
    assert!(m == 0 || n == 0 || (m - 1) * ldc + n <= c.len(), "attention tile result out of bounds");
    if m == 0 || n == 0 {
        return;
    }
    #[cfg(target_arch = "x86_64")]
    // SAFETY: the CPU has AVX2 and FMA, and AVX-512 when `wide` (asserted); every element
    // the kernel reads or writes lies inside its slice (asserted above), and `c` does not
    // overlap `a` or `b` (it is borrowed mutably).
    unsafe {
        let a = Operand { ptr: a.data.as_ptr(), rs: a.rs, cs: a.cs };
        let (b, c) = ((b.data.as_ptr(), b.rs), (c.as_mut_ptr(), ldc));
        match wide {
            true => super::cpu_kernel_avx512::product((m, n, k), a, b, c, (alpha, accumulate)),
            false => avx2::product((m, n, k), a, b, c, (alpha, accumulate)),
        }
    };
}

/// The largest argument [`exp_sum`] takes: `exp(87)` is finite and `2^126` a normal float.
pub(super) const MAX_EXP_ARG: f32 = 87.0;

/// `p = exp(s - shift)` elementwise, and the sum of `p`, for a `shift` at or near the row's
/// largest element: the row's log-sum-exp in the backward, which its recomputed scores may
/// pass by a rounding error. So every argument is at most [`MAX_EXP_ARG`], `-inf` or NaN.
/// Cephes' polynomial of `num::exp_f32` (within 2 ulp of it); NaN stays NaN; results below
/// the smallest normal float (arguments under -87.34, where `exp` is less than `1.2e-38`)
/// are 0, a change of under `1.2e-38` next to the row maximum's term of 1.
///
/// Panics if the slices differ in length or the CPU lacks AVX2 / FMA. In debug builds,
/// also if an argument exceeds [`MAX_EXP_ARG`].
pub(super) fn exp_sum(s: &[f32], shift: f32, p: &mut [f32]) -> f32 {
    exp_sum_on(wide(), s, shift, p)
}

/// [`exp_sum`] on the AVX-512 kernel when `wide`, else on the AVX2 one; panics if `wide`
/// and the AVX-512 kernels do not run here.
fn exp_sum_on(wide: bool, s: &[f32], shift: f32, p: &mut [f32]) -> f32 {
    assert_tier(wide, "row kernels need");
    assert_eq!(s.len(), p.len(), "exp_sum: rows of different lengths");
    debug_assert!(!s.iter().any(|&x| x - shift > MAX_EXP_ARG), "exp_sum: an argument exceeds {MAX_EXP_ARG}");
    #[cfg(target_arch = "x86_64")]
    // SAFETY: the CPU has AVX2 and FMA, and AVX-512 when `wide` (asserted); both slices
    // hold `s.len()` elements.
    unsafe {
        match wide {
            true => super::cpu_kernel_avx512::exp_sum(s, shift, p),
            false => avx2::exp_sum(s, shift, p),
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    unreachable!()
}

/// The constants of `exp` on lanes (`avx2::exp8_bounded`, `cpu_kernel_avx512::exp16`):
/// Cephes' polynomial of `num::exp_f32`.
pub(super) mod exp_poly {
    /// `1.5 * 2^23`: added to `x log2 e`, it leaves `round(x log2 e)` in the low mantissa bits.
    pub const ROUND: f32 = 12_582_912.0;
    /// `ln 2` in two parts, high and low, for the reduction `r = x - n ln 2`.
    pub const LN2_HI: f32 = 0.693_359_4;
    pub const LN2_LO: f32 = -2.121_944_4e-4;
    /// The polynomial's coefficients, highest degree first.
    pub const COEFFS: [f32; 6] = [1.987_569_1e-4, 1.398_199_9e-3, 8.333_452e-3, 4.166_579_6e-2, 1.666_666_5e-1, 0.5];
    /// `ln(2^-126)`: below it, `exp` is under the smallest normal float.
    pub const MIN_NORMAL_LN: f32 = -87.336_54;
}

/// `dst[x * ld + j] = src[j * rs + x]` for `j < rows`, `x < width`: the transpose of a
/// `rows x width` tile (row stride `rs`), in `8 x 8` blocks of register shuffles (see
/// `cpu::transpose`).
///
/// Panics if a slice is too short or the CPU lacks AVX2 / FMA.
pub(super) fn transpose(src: &[f32], rs: usize, dims: (usize, usize), dst: &mut [f32], ld: usize) {
    assert!(available(), "the attention tile kernel needs AVX2 and FMA");
    crate::cpu::transpose::words(bytemuck::cast_slice(src), rs, dims, bytemuck::cast_slice_mut(dst), ld);
}

/// The sum of a register's 8 lanes in a fixed tree (halves, then quarters, then the last
/// pair) rather than a chain of 8 dependent adds per row. Both tiers' `exp_sum` end with it,
/// the AVX-512 one after adding its register's two halves, so that rows of up to 8 scores
/// (all in the low half) sum bit for bit alike on both.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
#[inline]
pub(super) fn sum_lanes8(v: std::arch::x86_64::__m256) -> f32 {
    use std::arch::x86_64::*;
    let quarters = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps::<1>(v));
    let pairs = _mm_add_ps(quarters, _mm_movehl_ps(quarters, quarters));
    _mm_cvtss_f32(_mm_add_ss(pairs, _mm_movehdup_ps(pairs)))
}

#[cfg(target_arch = "x86_64")]
pub(super) mod avx2 {
    use std::arch::x86_64::*;

    use super::exp_poly::{COEFFS, LN2_HI, LN2_LO, MIN_NORMAL_LN, ROUND};
    use super::{Operand, NR};

    /// Rows of the result per micro-kernel call: 6 rows x 2 registers = 12 accumulators,
    /// plus 2 for the right operand's row and 1 for the broadcast, of the 16 registers.
    const MR: usize = 6;

    /// See [`super::product`]. SAFETY: AVX2 + FMA present; `a` covers `m x k`, `b` (row
    /// stride `ldb`) `k x n`, `c` (row stride `ldc`) `m x n`, `n % NR == 0`.
    #[target_feature(enable = "avx2,fma")]
    pub(super) unsafe fn product(
        (m, n, k): (usize, usize, usize),
        a: Operand,
        (b, ldb): (*const f32, usize),
        (c, ldc): (*mut f32, usize),
        epilogue: (f32, bool),
    ) {
        for j in (0..n).step_by(NR) {
            let mut i = 0;
            while i < m {
                let rows = (m - i).min(MR);
                // SAFETY: rows i..i + rows and columns j..j + NR lie inside the operands.
                unsafe {
                    let a = Operand { ptr: a.ptr.add(i * a.rs), ..a };
                    let (b, c) = ((b.add(j), ldb), (c.add(i * ldc + j), ldc));
                    match rows {
                        6 => block::<6>(k, a, b, c, epilogue),
                        5 => block::<5>(k, a, b, c, epilogue),
                        4 => block::<4>(k, a, b, c, epilogue),
                        3 => block::<3>(k, a, b, c, epilogue),
                        2 => block::<2>(k, a, b, c, epilogue),
                        _ => block::<1>(k, a, b, c, epilogue),
                    }
                }
                i += rows;
            }
        }
    }

    /// One `R x 16` block of the result. SAFETY: as [`product`], for `R` rows and 16 columns.
    #[target_feature(enable = "avx2,fma")]
    #[inline]
    unsafe fn block<const R: usize>(
        k: usize,
        a: Operand,
        (b, ldb): (*const f32, usize),
        (c, ldc): (*mut f32, usize),
        (alpha, accumulate): (f32, bool),
    ) {
        let mut acc = [[_mm256_setzero_ps(); 2]; R];
        for p in 0..k {
            // SAFETY: row p of b has 16 columns from here; a(r, p) is inside a for r < R.
            unsafe {
                let row = b.add(p * ldb);
                let (b0, b1) = (_mm256_loadu_ps(row), _mm256_loadu_ps(row.add(8)));
                for (r, acc) in acc.iter_mut().enumerate() {
                    let x = _mm256_broadcast_ss(&*a.ptr.add(r * a.rs + p * a.cs));
                    acc[0] = _mm256_fmadd_ps(x, b0, acc[0]);
                    acc[1] = _mm256_fmadd_ps(x, b1, acc[1]);
                }
            }
        }
        let alpha = _mm256_set1_ps(alpha);
        for (r, acc) in acc.iter().enumerate() {
            for (h, &sum) in acc.iter().enumerate() {
                // SAFETY: row r of c has 16 columns from here.
                unsafe {
                    let dst = c.add(r * ldc + 8 * h);
                    let old = if accumulate { _mm256_loadu_ps(dst) } else { _mm256_setzero_ps() };
                    _mm256_storeu_ps(dst, _mm256_fmadd_ps(sum, alpha, old));
                }
            }
        }
    }

    /// See [`super::exp_sum`]. SAFETY: AVX2 + FMA present, `p.len() == s.len()`.
    #[target_feature(enable = "avx2,fma")]
    pub(super) unsafe fn exp_sum(s: &[f32], shift: f32, p: &mut [f32]) -> f32 {
        let (chunks, mut outs) = (s.chunks_exact(8), p.chunks_exact_mut(8));
        let shift = _mm256_set1_ps(shift);
        let mut sum = _mm256_setzero_ps();
        for (c, o) in chunks.clone().zip(&mut outs) {
            // SAFETY: `c` and `o` hold 8 floats each.
            unsafe {
                let e = exp8_bounded(_mm256_sub_ps(_mm256_loadu_ps(c.as_ptr()), shift));
                _mm256_storeu_ps(o.as_mut_ptr(), e);
                sum = _mm256_add_ps(sum, e);
            }
        }
        // The tail through the same lanes, padded with -inf (whose exp adds 0).
        let (tail, tail_out) = (chunks.remainder(), outs.into_remainder());
        if !tail.is_empty() {
            let mut lanes = [f32::NEG_INFINITY; 8];
            lanes[..tail.len()].copy_from_slice(tail);
            // SAFETY: `lanes` holds 8 floats.
            unsafe {
                let e = exp8_bounded(_mm256_sub_ps(_mm256_loadu_ps(lanes.as_ptr()), shift));
                _mm256_storeu_ps(lanes.as_mut_ptr(), e);
                sum = _mm256_add_ps(sum, e);
            }
            tail_out.copy_from_slice(&lanes[..tail.len()]);
        }
        super::sum_lanes8(sum)
    }

    /// `exp(x)` on 8 lanes of `x <= MAX_EXP_ARG` (or `-inf`, or NaN): Cephes' polynomial of
    /// `num::exp_f32`, its steps fused multiply-adds. With no large argument, `2^n` needs
    /// no overflow handling and, once results below the normal range are flushed to 0, one
    /// exponent field: 17 vector operations where the general `exp` takes about 30. That is
    /// most of the softmax's cost next to the two tile products.
    #[target_feature(enable = "avx2,fma")]
    #[inline]
    pub(in super::super) fn exp8_bounded(x: __m256) -> __m256 {
        // n = round(x log2 e) by the 1.5 * 2^23 trick: the sum's low mantissa bits are n.
        let shifted = _mm256_fmadd_ps(x, splat(std::f32::consts::LOG2_E), splat(ROUND));
        let n = _mm256_sub_ps(shifted, splat(ROUND));
        let r = _mm256_fnmadd_ps(n, splat(LN2_HI), x);
        let r = _mm256_fnmadd_ps(n, splat(LN2_LO), r);
        let mut p = splat(COEFFS[0]);
        for k in &COEFFS[1..] {
            p = _mm256_fmadd_ps(p, r, splat(*k));
        }
        let y = _mm256_fmadd_ps(_mm256_mul_ps(p, r), r, _mm256_add_ps(r, splat(1.0)));
        // 2^n: the bits of `shifted` are 0x4B40_0000 + n, and 0x4B40_0000 << 23 wraps to 0,
        // so shifting them left by 23 leaves n << 23; n + 127 is a valid exponent for
        // -126 <= n <= 126 (the flush below covers the low end, MAX_EXP_ARG the high one).
        let bits = _mm256_slli_epi32(_mm256_castps_si256(shifted), 23);
        let pow2 = _mm256_castsi256_ps(_mm256_add_epi32(bits, _mm256_set1_epi32(127 << 23)));
        let y = _mm256_mul_ps(y, pow2);
        // Keep lanes with x >= ln(2^-126) or NaN (unordered compare): -inf and the underflow go to 0.
        _mm256_and_ps(y, _mm256_cmp_ps(x, splat(MIN_NORMAL_LN), _CMP_NLT_UQ))
    }


    #[target_feature(enable = "avx2,fma")]
    #[inline]
    fn splat(v: f32) -> __m256 {
        _mm256_set1_ps(v)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The kernels' tiers this CPU runs: AVX2 (false), and AVX-512 (true) where it has it.
    fn tiers() -> Vec<bool> {
        [false, true].into_iter().filter(|&w| !w || wide()).collect()
    }

    fn naive(
        (m, n, k): (usize, usize, usize),
        a: Strided,
        b: Strided,
        c: &mut [f32],
        ldc: usize,
        (alpha, acc): (f32, bool),
    ) {
        for i in 0..m {
            for j in 0..n {
                let dot: f64 = (0..k).map(|p| a.data[i * a.rs + p * a.cs] as f64 * b.data[p * b.rs + j] as f64).sum();
                let old = if acc { c[i * ldc + j] as f64 } else { 0.0 };
                c[i * ldc + j] = (alpha as f64 * dot + old) as f32;
            }
        }
    }

    /// `exp_sum` against `num::exp_f32`, on rows of every length remainder, with NaN,
    /// infinities and values near and past the flush to 0, shifted by values at, above and
    /// below the row's maximum (the backward's log-sum-exp may pass it by a rounding error).
    #[test]
    fn exp_sum_matches_scalar() {
        if !available() {
            return;
        }
        let special = [f32::NAN, f32::NEG_INFINITY, -150.0, -87.0, -87.4, -30.0, f32::INFINITY];
        for n in [0, 1, 7, 8, 9, 16, 63, 64, 65] {
            for with_special in [false, true] {
                let mut s: Vec<f32> = (0..n).map(|i| ((i * 37 % 23) as f32 - 11.0) * 0.7).collect();
                if with_special {
                    for (x, &v) in s.iter_mut().step_by(3).zip(special.iter().cycle()) {
                        *x = v;
                    }
                }
                let want_max = s.iter().fold(f32::NEG_INFINITY, |m, &x| if x > m { x } else { m });
                // The backward's shift may sit a rounding error below the maximum.
                for shift in [want_max, want_max + 2.5, want_max - 0.5, want_max - 80.0] {
                    tiers().into_iter().for_each(|wide| check_exp_sum(wide, &s, shift));
                }
            }
        }
    }

    /// `exp_sum(s, shift)` on the AVX-512 kernel when `wide`, else the AVX2 one, against
    /// `num::exp_f32` lane by lane (within 2 ulp, or 0 where the exact value is below the
    /// normal range) and against the sum of those values.
    fn check_exp_sum(wide: bool, s: &[f32], shift: f32) {
        let mut p = vec![0.0; s.len()];
        let sum = exp_sum_on(wide, s, shift, &mut p);
        let want: Vec<f32> = s.iter().map(|&x| crate::num::exp_f32(x - shift)).collect();
        for (i, (&g, &w)) in p.iter().zip(&want).enumerate() {
            let close = (g.is_nan() && w.is_nan())
                || (g - w).abs() <= 2.0 * f32::EPSILON * w.abs()
                || (g == 0.0 && w < f32::MIN_POSITIVE);
            assert!(close, "exp({} - {shift}): {g} vs {w}", s[i]);
        }
        // Summed in f64: a serial f32 sum of 90k terms is itself off by 4e-5.
        let want_sum: f64 = want.iter().map(|&w| w as f64).sum();
        let close = (sum.is_nan() && want_sum.is_nan()) || (sum as f64 - want_sum).abs() <= 1e-5 * want_sum.abs();
        assert!(close, "sum of {} values: {sum} vs {want_sum}", s.len());
    }

    /// Every argument from 0 down past the flush, 2^-10 apart, against `num::exp_f32`.
    #[test]
    fn exp_is_close_over_its_range() {
        if !available() {
            return;
        }
        let s: Vec<f32> = (0..=90 * 1024).map(|i| -(i as f32) / 1024.0).collect();
        tiers().into_iter().for_each(|wide| check_exp_sum(wide, &s, 0.0));
    }

    /// Both tiers add each product element's terms in the same order, so they agree bit
    /// for bit; their exponentials too (only the row sums of more than 8 scores group
    /// differently).
    #[test]
    fn tiers_agree_bit_for_bit() {
        if !tiers().contains(&true) {
            return;
        }
        // 112 columns: the AVX-512 kernel's blocks of 4, 2 and 1 registers.
        let (m, n, k) = (13, 112, 64);
        let vals = |len: usize, seed: u32| -> Vec<f32> {
            (0..len as u32).map(|i| (((i * 7919 + seed) % 1000) as f32 / 250.0) - 2.0).collect()
        };
        let (a, b) = (vals(m * k, 1), vals(k * n, 2));
        let (a, b) = (Strided { data: &a, rs: k, cs: 1 }, Strided { data: &b, rs: n, cs: 1 });
        let outs: Vec<Vec<f32>> = [false, true]
            .into_iter()
            .map(|wide| {
                let mut c = vals(m * n, 3);
                product_on(wide, (m, n, k), a, b, (&mut c, n), (0.125, true));
                exp_sum_on(wide, &c.clone(), 4.0, &mut c);
                c
            })
            .collect();
        let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        assert_eq!(bits(&outs[0]), bits(&outs[1]));
        // Rows of up to 8 scores: the row sums too.
        for len in 1..=8 {
            let s = vals(len, len as u32);
            let sums: Vec<u32> = [false, true].map(|wide| exp_sum_on(wide, &s, 1.5, &mut vec![0.0; len]).to_bits()).to_vec();
            assert_eq!(sums[0], sums[1], "row sum of {len} scores");
        }
    }

    /// Odd row counts (remainders of 6 and of 8), column counts of an odd number of 16s,
    /// transposed and strided left operands, padded result rows, both epilogues: each
    /// tier's kernel against a plain loop.
    #[test]
    fn matches_plain_loop() {
        if !available() {
            return;
        }
        let vals = |n: usize, seed: usize| -> Vec<f32> {
            (0..n).map(|i| (((i * 7919 + seed * 104_729) % 1000) as f32 / 500.0) - 1.0).collect()
        };
        let shapes = [(1, 16, 1), (5, 32, 7), (13, 16, 64), (64, 64, 64), (7, 48, 0), (9, 80, 5), (23, 128, 3)];
        for ((m, n, k), wide) in shapes.into_iter().flat_map(|s| tiers().into_iter().map(move |w| (s, w))) {
            let a_data = vals(m * k * 2 + 3, 1);
            let b_data = vals(k * (n + 5) + 16, 2);
            for (a_rs, a_cs) in [(k, 1), (1, m), (2 * k + 1, 2)] {
                let a = Strided { data: &a_data[3..], rs: a_rs, cs: a_cs };
                let a = if a.fits(m, k) { a } else { continue };
                let b = Strided { data: &b_data, rs: n + 5, cs: 1 };
                for epilogue in [(0.5, false), (1.0, true)] {
                    let ldc = n + 3;
                    let mut got = vals(m * ldc, 3);
                    let mut want = got.clone();
                    product_on(wide, (m, n, k), a, b, (&mut got, ldc), epilogue);
                    naive((m, n, k), a, b, &mut want, ldc, epilogue);
                    for (g, w) in got.iter().zip(&want) {
                        let what = format!("{m}x{n}x{k} {a_rs},{a_cs}, wide {wide}");
                        assert!((g - w).abs() <= 1e-4 * (1.0 + w.abs()), "{what}: {g} vs {w}");
                    }
                }
            }
        }
    }
}
