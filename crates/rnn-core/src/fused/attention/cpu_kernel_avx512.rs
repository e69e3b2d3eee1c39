//! The AVX-512 twins of `cpu_kernel.rs`'s tile product and exponentials and of
//! `cpu_columns.rs`'s column softmax, for CPUs that have it: 16-float registers do twice
//! the arithmetic per instruction of the AVX2 kernels' 8. Their contracts are those of `cpu_kernel::product` and `exp_sum` and
//! of `cpu_columns::softmax_columns`, and so are their results: each product element adds
//! its terms in the same order (one fused multiply-add per term), each exponential takes
//! the same polynomial steps, each column's sum adds its keys in order. Only `exp_sum`'s row
//! sum groups its terms differently: in 16 lanes instead of 8 (the same sums for rows of up
//! to 8 scores).
//!
//! Built by rustc 1.89 or later (the first with the AVX-512 intrinsics); `cpu_kernel.rs`
//! calls them only where `cpu::runs_avx512_kernels` says they run.

#[cfg(target_arch = "x86_64")]
#[rustversion::since(1.89)]
pub(super) use kernels::{columns, exp_sum, product};

#[cfg(target_arch = "x86_64")]
#[rustversion::since(1.89)]
#[allow(clippy::incompatible_msrv)] // only built by rustc >= 1.89, see the module doc
mod kernels {
    use std::arch::x86_64::*;

    use super::super::cpu_kernel::exp_poly::{COEFFS, LN2_HI, LN2_LO, MIN_NORMAL_LN, ROUND};
    use super::super::cpu_kernel::{sum_lanes8, Operand, NR};

    /// Floats per register.
    const LANES: usize = 16;

    /// Rows of the result per block of 4 registers of columns: 6 rows x 4 registers = 24
    /// accumulators, with 4 registers for the right operand's row and 1 for the broadcast,
    /// of the 32. Each broadcast then feeds 4 multiply-adds (2 in the 8 x 2 blocks below),
    /// and each row of `b` is loaded once per 6 rows of the result. Measured on one core at
    /// 64 x 64 x 64 tiles (the head dimension's products): on a Xeon of family 6 model 207
    /// both shapes ran 168-171 GFLOP/s (an earlier measure); on a model 106 (Ice Lake,
    /// 1.25 MiB L2), the two alternating in one process, 157-168 against the 8 x 2 blocks'
    /// 133-141, and at the forward's tiles of 128 keys (`128 x 64 x 64`, `64 x 64 x 128`)
    /// 118-162 against 105-132.
    const MR_WIDE: usize = 6;

    /// Rows per block of 2 registers (8 x 2 = 16 accumulators) or of 1, where fewer than
    /// 64 columns are left.
    const MR: usize = 8;

    /// See `cpu_kernel::product`. SAFETY: AVX-512 (F) present; `a` covers `m x k`, `b` (row
    /// stride `ldb`) `k x n`, `c` (row stride `ldc`) `m x n`, `n % NR == 0`.
    #[target_feature(enable = "avx512f,avx512vl,avx512bw,avx512dq,avx2,fma")]
    pub unsafe fn product(
        (m, n, k): (usize, usize, usize),
        a: Operand,
        (b, ldb): (*const f32, usize),
        (c, ldc): (*mut f32, usize),
        epilogue: (f32, bool),
    ) {
        debug_assert_eq!(NR, LANES, "blocks of whole registers");
        let mut j = 0;
        while j < n {
            // Four registers of columns while 64 are left, then two, then one for the last
            // 16 of an odd number of 16s.
            let regs = match n - j {
                left if left >= 4 * LANES => 4,
                left if left >= 2 * LANES => 2,
                _ => 1,
            };
            let mr = if regs == 4 { MR_WIDE } else { MR };
            let mut i = 0;
            while i < m {
                let rows = (m - i).min(mr);
                // SAFETY: rows i..i + rows and columns j..j + 16 * regs lie inside the operands.
                unsafe {
                    let a = Operand { ptr: a.ptr.add(i * a.rs), ..a };
                    let (b, c, e) = ((b.add(j), ldb), (c.add(i * ldc + j), ldc), epilogue);
                    macro_rules! by_rows {
                        ($w:literal; $($r:literal)*) => {
                            match rows {
                                $($r => block::<$r, $w>(k, a, b, c, e),)*
                                _ => block::<1, $w>(k, a, b, c, e),
                            }
                        };
                    }
                    match regs {
                        4 => by_rows!(4; 6 5 4 3 2),
                        2 => by_rows!(2; 8 7 6 5 4 3 2),
                        _ => by_rows!(1; 8 7 6 5 4 3 2),
                    }
                }
                i += rows;
            }
            j += regs * LANES;
        }
    }

    /// One `R x 16W` block of the result, its accumulators in registers over all of `k`.
    /// SAFETY: as [`product`], for `R` rows and `16 W` columns.
    #[target_feature(enable = "avx512f,avx512vl,avx512bw,avx512dq,avx2,fma")]
    #[inline]
    unsafe fn block<const R: usize, const W: usize>(
        k: usize,
        a: Operand,
        (b, ldb): (*const f32, usize),
        (c, ldc): (*mut f32, usize),
        (alpha, accumulate): (f32, bool),
    ) {
        let mut acc = [[_mm512_setzero_ps(); W]; R];
        for p in 0..k {
            // SAFETY: row p of b has 16 W columns from here; a(r, p) is inside a for r < R.
            unsafe {
                let row = b.add(p * ldb);
                let bv: [__m512; W] = std::array::from_fn(|h| _mm512_loadu_ps(row.add(LANES * h)));
                for (r, acc) in acc.iter_mut().enumerate() {
                    let x = _mm512_set1_ps(*a.ptr.add(r * a.rs + p * a.cs));
                    for (acc, &bv) in acc.iter_mut().zip(&bv) {
                        *acc = _mm512_fmadd_ps(x, bv, *acc);
                    }
                }
            }
        }
        let alpha = _mm512_set1_ps(alpha);
        for (r, acc) in acc.iter().enumerate() {
            for (h, &sum) in acc.iter().enumerate() {
                // SAFETY: row r of c has 16 W columns from here.
                unsafe {
                    let dst = c.add(r * ldc + LANES * h);
                    let old = if accumulate { _mm512_loadu_ps(dst) } else { _mm512_setzero_ps() };
                    _mm512_storeu_ps(dst, _mm512_fmadd_ps(sum, alpha, old));
                }
            }
        }
    }

    /// See `cpu_kernel::exp_sum`. SAFETY: AVX-512 (F) present, `p.len() == s.len()`.
    #[target_feature(enable = "avx512f,avx512vl,avx512bw,avx512dq,avx2,fma")]
    pub unsafe fn exp_sum(s: &[f32], shift: f32, p: &mut [f32]) -> f32 {
        let (chunks, mut outs) = (s.chunks_exact(LANES), p.chunks_exact_mut(LANES));
        let shift = _mm512_set1_ps(shift);
        let mut sum = _mm512_setzero_ps();
        for (c, o) in chunks.clone().zip(&mut outs) {
            // SAFETY: `c` and `o` hold 16 floats each.
            unsafe {
                let e = exp16(_mm512_sub_ps(_mm512_loadu_ps(c.as_ptr()), shift));
                _mm512_storeu_ps(o.as_mut_ptr(), e);
                sum = _mm512_add_ps(sum, e);
            }
        }
        // The tail through the same lanes, padded with -inf (whose exp adds 0).
        let (tail, tail_out) = (chunks.remainder(), outs.into_remainder());
        if !tail.is_empty() {
            let mut lanes = [f32::NEG_INFINITY; LANES];
            lanes[..tail.len()].copy_from_slice(tail);
            // SAFETY: `lanes` holds 16 floats.
            unsafe {
                let e = exp16(_mm512_sub_ps(_mm512_loadu_ps(lanes.as_ptr()), shift));
                _mm512_storeu_ps(lanes.as_mut_ptr(), e);
                sum = _mm512_add_ps(sum, e);
            }
            tail_out.copy_from_slice(&lanes[..tail.len()]);
        }
        // A tree across the lanes (a 16-add chain per row would stall the next row), the
        // AVX2 kernel's below the first level.
        let halves = _mm256_add_ps(_mm512_castps512_ps256(sum), _mm512_extractf32x8_ps::<1>(sum));
        sum_lanes8(halves)
    }

    /// See `cpu_columns::softmax_columns`: blocks of up to 4 registers of columns.
    /// SAFETY: AVX-512 (F) present; `st` addresses `keys` rows of `ld` floats (row stride
    /// `ld`, a multiple of 16), `m`, `l` and `alpha` `ld` floats each.
    #[target_feature(enable = "avx512f,avx512vl,avx512bw,avx512dq,avx2,fma")]
    pub unsafe fn columns(st: *mut f32, ld: usize, keys: usize, (m, l, alpha): (*mut f32, *mut f32, *mut f32)) {
        debug_assert_eq!(ld % LANES, 0, "whole registers of columns");
        let mut j = 0;
        while j < ld {
            let regs = ((ld - j) / LANES).min(4);
            // SAFETY: columns j..j + 16 regs lie inside every operand.
            unsafe {
                let at = (st.add(j), m.add(j), l.add(j), alpha.add(j));
                match regs {
                    4 => column_block::<4>(at, ld, keys),
                    3 => column_block::<3>(at, ld, keys),
                    2 => column_block::<2>(at, ld, keys),
                    _ => column_block::<1>(at, ld, keys),
                }
            }
            j += regs * LANES;
        }
    }

    /// [`columns`] on `16 W` columns from `st`, `m`, `l` and `alpha` on.
    /// SAFETY: as [`columns`], for `16 W` columns.
    #[target_feature(enable = "avx512f,avx512vl,avx512bw,avx512dq,avx2,fma")]
    #[inline]
    unsafe fn column_block<const W: usize>(
        (st, m, l, alpha): (*mut f32, *mut f32, *mut f32, *mut f32),
        ld: usize,
        keys: usize,
    ) {
        let (zero, one, neg_inf) = (_mm512_setzero_ps(), _mm512_set1_ps(1.0), _mm512_set1_ps(f32::NEG_INFINITY));
        // Column maxima in two chains (alternate keys), NaN skipped: `max_ps` returns its
        // second operand when either is NaN.
        let mut top = [[neg_inf; W]; 2];
        for r in 0..keys {
            for (h, top) in top[r % 2].iter_mut().enumerate() {
                // SAFETY: row r, register h of the block.
                *top = unsafe { _mm512_max_ps(_mm512_loadu_ps(st.add(r * ld + LANES * h)), *top) };
            }
        }
        let (mut shift, mut scale) = ([zero; W], [one; W]);
        for h in 0..W {
            // SAFETY: register h of the block's statistics.
            unsafe {
                let old = _mm512_loadu_ps(m.add(LANES * h));
                let new = _mm512_max_ps(_mm512_max_ps(top[0][h], top[1][h]), old);
                // Columns whose keys so far are all masked: shift 0 (exp keeps -inf at 0
                // and NaN), factor 1.
                let hidden = _mm512_cmp_ps_mask::<_CMP_EQ_OQ>(new, neg_inf);
                shift[h] = _mm512_mask_mov_ps(new, hidden, zero);
                scale[h] = _mm512_mask_mov_ps(exp16(_mm512_sub_ps(old, new)), hidden, one);
                _mm512_storeu_ps(m.add(LANES * h), new);
                _mm512_storeu_ps(alpha.add(LANES * h), scale[h]);
            }
        }
        let mut sum = [zero; W];
        for r in 0..keys {
            for h in 0..W {
                // SAFETY: row r, register h of the block.
                unsafe {
                    let at = st.add(r * ld + LANES * h);
                    let e = exp16(_mm512_sub_ps(_mm512_loadu_ps(at), shift[h]));
                    _mm512_storeu_ps(at, e);
                    sum[h] = _mm512_add_ps(sum[h], e);
                }
            }
        }
        for h in 0..W {
            // SAFETY: register h of the block's sums.
            unsafe {
                let at = l.add(LANES * h);
                _mm512_storeu_ps(at, _mm512_add_ps(_mm512_mul_ps(_mm512_loadu_ps(at), scale[h]), sum[h]));
            }
        }
    }

    /// `avx2::exp8_bounded` on 16 lanes: `exp(x)` for `x <= MAX_EXP_ARG`, `-inf` or NaN,
    /// with results below the normal range flushed to 0.
    #[target_feature(enable = "avx512f,avx512vl,avx512bw,avx512dq,avx2,fma")]
    #[inline]
    fn exp16(x: __m512) -> __m512 {
        let splat = _mm512_set1_ps;
        let shifted = _mm512_fmadd_ps(x, splat(std::f32::consts::LOG2_E), splat(ROUND));
        let n = _mm512_sub_ps(shifted, splat(ROUND));
        let r = _mm512_fnmadd_ps(n, splat(LN2_HI), x);
        let r = _mm512_fnmadd_ps(n, splat(LN2_LO), r);
        let mut p = splat(COEFFS[0]);
        for k in &COEFFS[1..] {
            p = _mm512_fmadd_ps(p, r, splat(*k));
        }
        let y = _mm512_fmadd_ps(_mm512_mul_ps(p, r), r, _mm512_add_ps(r, splat(1.0)));
        // 2^n from the low bits of `shifted`, as in the AVX2 kernel.
        let bits = _mm512_slli_epi32::<23>(_mm512_castps_si512(shifted));
        let pow2 = _mm512_castsi512_ps(_mm512_add_epi32(bits, _mm512_set1_epi32(127 << 23)));
        let y = _mm512_mul_ps(y, pow2);
        // Keep lanes with x >= ln(2^-126) or NaN (unordered compare): -inf and the underflow go to 0.
        _mm512_maskz_mov_ps(_mm512_cmp_ps_mask::<_CMP_NLT_UQ>(x, splat(MIN_NORMAL_LN)), y)
    }
}

/// Never called by builds without the AVX-512 kernels (`cpu_kernel` checks
/// `runs_avx512_kernels`).
#[cfg(target_arch = "x86_64")]
#[rustversion::before(1.89)]
pub(super) unsafe fn product(
    _: (usize, usize, usize),
    _: super::cpu_kernel::Operand,
    _: (*const f32, usize),
    _: (*mut f32, usize),
    _: (f32, bool),
) {
    unreachable!("the AVX-512 attention kernels run only where they were built")
}

/// Never called by builds without the AVX-512 kernels (`cpu_columns` checks
/// `runs_avx512_kernels`).
#[cfg(target_arch = "x86_64")]
#[rustversion::before(1.89)]
pub(super) unsafe fn columns(_: *mut f32, _: usize, _: usize, _: (*mut f32, *mut f32, *mut f32)) {
    unreachable!("the AVX-512 attention kernels run only where they were built")
}

/// Never called by builds without the AVX-512 kernels (`cpu_kernel` checks
/// `runs_avx512_kernels`).
#[cfg(target_arch = "x86_64")]
#[rustversion::before(1.89)]
pub(super) unsafe fn exp_sum(_: &[f32], _: f32, _: &mut [f32]) -> f32 {
    unreachable!("the AVX-512 attention kernels run only where they were built")
}
