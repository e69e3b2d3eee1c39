//! The forward's online softmax over a tile of transposed scores: keys by rows, query rows
//! by columns (`Sᵀ = K Qᵀ`, see `cpu_forward.rs`). Each column's running maximum, sum and
//! rescaling factor are then lanes of registers, updated by vertical operations across the
//! tile's rows, with no reduction across the lanes of a register and one vector
//! exponential per 8 or 16 factors.
//!
//! The f32 kernels (AVX2 here, AVX-512 in `cpu_kernel_avx512.rs`) give the same values bit
//! for bit: per column the same maximum, the same polynomial exponentials
//! (`cpu_kernel::exp_sum`'s), and the sum of the column's keys in key order.

use super::cpu::Compute;
use super::cpu_kernel;
use crate::num::as_f32_mut;

/// The running softmax of a tile's query columns: per column the maximum `m` of the scores
/// so far (`-inf` while every one is masked) and the sum `l` of their exponentials
/// relative to it; `alpha` receives the factor by which the column's accumulated output must
/// be scaled.
pub(super) struct ColumnStats<'a, C> {
    pub m: &'a mut [C],
    pub l: &'a mut [C],
    pub alpha: &'a mut [C],
}

/// Folds `keys` rows of transposed scores (`st`, row stride `ld`, `ld` columns) into the
/// columns' running softmax: per column, `m_new = max(m, the column's scores)` (NaN
/// skipped), each score replaced by `p = exp(s - m_new)`, `alpha = exp(m - m_new)`,
/// `l = l · alpha + (the sum of the column's p, in key order)`, `m = m_new`. Where `m_new`
/// is `-inf` (every key so far masked), `p` is 0 (NaN for a NaN score) and `alpha` is 1.
///
/// Panics if `st` holds fewer than `keys` rows of `ld` or a statistic fewer than `ld` values.
pub(super) fn softmax_columns<C: Compute>(st: &mut [C], ld: usize, keys: usize, stats: ColumnStats<C>) {
    let ColumnStats { m, l, alpha } = stats;
    assert_fits((st.len(), ld, keys), [m.len(), l.len(), alpha.len()]);
    if let (Some(st32), Some(m32), Some(l32), Some(a32)) = (as_f32_mut(st), as_f32_mut(m), as_f32_mut(l), as_f32_mut(alpha)) {
        if cpu_kernel::available() && ld % cpu_kernel::NR == 0 {
            return columns_on(cpu_kernel::wide(), (st32, ld, keys), (m32, l32, a32));
        }
    }
    columns_portable((st, ld, keys), (m, l, alpha));
}

/// Panics unless a tile of `len` values holds `keys` rows of `ld` and each statistic (of
/// `stats` values) `ld`: what both paths of [`softmax_columns`] rely on.
fn assert_fits((len, ld, keys): (usize, usize, usize), stats: [usize; 3]) {
    assert!(len >= keys * ld, "column softmax: {keys} rows of {ld} in a tile of {len}");
    assert!(stats.iter().all(|&n| n >= ld), "column softmax: statistics of {stats:?} for {ld} columns");
}

/// Columns per step of the portable path.
const LANES: usize = 16;

/// [`softmax_columns`] in plain loops, [`LANES`] columns at a time.
fn columns_portable<C: Compute>((st, ld, keys): (&mut [C], usize, usize), (m, l, alpha): (&mut [C], &mut [C], &mut [C])) {
    for c0 in (0..ld).step_by(LANES) {
        let r = c0..(c0 + LANES).min(ld);
        portable_block(&mut st[c0..], ld, keys, (&mut m[r.clone()], &mut l[r.clone()], &mut alpha[r]));
    }
}

/// [`columns_portable`] on the first `m.len()` (at most [`LANES`]) columns of `st`.
fn portable_block<C: Compute>(st: &mut [C], ld: usize, keys: usize, (m, l, alpha): (&mut [C], &mut [C], &mut [C])) {
    let width = m.len();
    let rows = || (0..keys).map(|r| r * ld);
    let mut top = [C::neg_infinity(); LANES];
    for at in rows() {
        for (t, &x) in top.iter_mut().zip(&st[at..at + width]) {
            *t = if x > *t { x } else { *t };
        }
    }
    let mut shift = [C::zero(); LANES];
    for j in 0..width {
        let new = if top[j] > m[j] { top[j] } else { m[j] };
        (shift[j], alpha[j]) = if new == C::neg_infinity() { (C::zero(), C::one()) } else { (new, (m[j] - new).vexp()) };
        m[j] = new;
    }
    let mut sum = [C::zero(); LANES];
    for at in rows() {
        for (j, x) in st[at..at + width].iter_mut().enumerate() {
            *x = (*x - shift[j]).vexp();
            sum[j] = sum[j] + *x;
        }
    }
    for j in 0..width {
        l[j] = l[j] * alpha[j] + sum[j];
    }
}

/// [`softmax_columns`] on the AVX-512 kernel when `wide`, else on the AVX2 one (`ld` a
/// multiple of `cpu_kernel::NR`); panics if this CPU does not run that tier.
fn columns_on(wide: bool, (st, ld, keys): (&mut [f32], usize, usize), (m, l, alpha): (&mut [f32], &mut [f32], &mut [f32])) {
    cpu_kernel::assert_tier(wide, "column kernels need");
    assert!(ld % cpu_kernel::NR == 0, "column softmax: {ld} columns, not whole blocks of {}", cpu_kernel::NR);
    assert_fits((st.len(), ld, keys), [m.len(), l.len(), alpha.len()]);
    #[cfg(target_arch = "x86_64")]
    // SAFETY: the CPU runs the tier (asserted); the tile holds `keys` rows of `ld` and each
    // statistic `ld` values (asserted), `ld` a multiple of 16.
    unsafe {
        let stats = (m.as_mut_ptr(), l.as_mut_ptr(), alpha.as_mut_ptr());
        match wide {
            true => super::cpu_kernel_avx512::columns(st.as_mut_ptr(), ld, keys, stats),
            false => avx2::columns(st.as_mut_ptr(), ld, keys, stats),
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    unreachable!()
}

#[cfg(target_arch = "x86_64")]
mod avx2 {
    use std::arch::x86_64::*;

    use super::super::cpu_kernel::avx2::exp8_bounded;

    /// Columns per block: two 8-float registers (the column kernels' `ld` is a multiple).
    const BLOCK: usize = 16;

    /// See [`super::softmax_columns`]. SAFETY: AVX2 + FMA present; `st` addresses `keys`
    /// rows of `ld` floats (a multiple of 16) at stride `ld`, `m`, `l` and `alpha` `ld`
    /// floats each.
    #[target_feature(enable = "avx2,fma")]
    pub(super) unsafe fn columns(st: *mut f32, ld: usize, keys: usize, (m, l, alpha): (*mut f32, *mut f32, *mut f32)) {
        for j in (0..ld).step_by(BLOCK) {
            // SAFETY: columns j..j + 16 lie inside every operand.
            unsafe { block((st.add(j), m.add(j), l.add(j), alpha.add(j)), ld, keys) };
        }
    }

    /// [`columns`] on the 16 columns from `st`, `m`, `l` and `alpha` on.
    /// SAFETY: as [`columns`], for 16 columns.
    #[target_feature(enable = "avx2,fma")]
    #[inline]
    unsafe fn block((st, m, l, alpha): (*mut f32, *mut f32, *mut f32, *mut f32), ld: usize, keys: usize) {
        let (zero, one, neg_inf) = (_mm256_setzero_ps(), _mm256_set1_ps(1.0), _mm256_set1_ps(f32::NEG_INFINITY));
        // Column maxima in two chains (alternate keys), NaN skipped: `max_ps` returns its
        // second operand when either is NaN.
        let mut top = [[neg_inf; 2]; 2];
        for r in 0..keys {
            for (h, top) in top[r % 2].iter_mut().enumerate() {
                // SAFETY: row r, register h of the block.
                *top = unsafe { _mm256_max_ps(_mm256_loadu_ps(st.add(r * ld + 8 * h)), *top) };
            }
        }
        let (mut shift, mut scale) = ([zero; 2], [one; 2]);
        for h in 0..2 {
            // SAFETY: register h of the block's statistics.
            unsafe {
                let old = _mm256_loadu_ps(m.add(8 * h));
                let new = _mm256_max_ps(_mm256_max_ps(top[0][h], top[1][h]), old);
                // Columns whose keys so far are all masked: shift 0 (exp keeps -inf at 0
                // and NaN), factor 1.
                let hidden = _mm256_cmp_ps::<_CMP_EQ_OQ>(new, neg_inf);
                shift[h] = _mm256_blendv_ps(new, zero, hidden);
                scale[h] = _mm256_blendv_ps(exp8_bounded(_mm256_sub_ps(old, new)), one, hidden);
                _mm256_storeu_ps(m.add(8 * h), new);
                _mm256_storeu_ps(alpha.add(8 * h), scale[h]);
            }
        }
        let mut sum = [zero; 2];
        for r in 0..keys {
            for h in 0..2 {
                // SAFETY: row r, register h of the block.
                unsafe {
                    let at = st.add(r * ld + 8 * h);
                    let e = exp8_bounded(_mm256_sub_ps(_mm256_loadu_ps(at), shift[h]));
                    _mm256_storeu_ps(at, e);
                    sum[h] = _mm256_add_ps(sum[h], e);
                }
            }
        }
        for h in 0..2 {
            // SAFETY: register h of the block's sums.
            unsafe {
                let at = l.add(8 * h);
                _mm256_storeu_ps(at, _mm256_add_ps(_mm256_mul_ps(_mm256_loadu_ps(at), scale[h]), sum[h]));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A tile of `keys x ld` scores with every kind of column: finite scores of both signs,
    /// a NaN, `+inf`, columns whose keys are all masked (`-inf`), partly masked, and values
    /// far below the column's maximum (exponentials flushed to 0).
    fn tile(keys: usize, ld: usize, seed: usize) -> Vec<f32> {
        (0..keys * ld)
            .map(|i| {
                let (r, c) = (i / ld, i % ld);
                match (c + seed) % 11 {
                    0 => f32::NEG_INFINITY,
                    1 if r % 3 == 0 => f32::NEG_INFINITY,
                    2 if r == keys / 2 => f32::NAN,
                    3 if r == keys - 1 => f32::INFINITY,
                    4 if r == 0 => -120.0,
                    _ => (((i * 7919 + seed * 31) % 1000) as f32 / 90.0) - 5.0,
                }
            })
            .collect()
    }

    /// Running statistics as they stand before a tile: the first (nothing seen), or later
    /// ones (finite maxima above, below and at the tile's, a column still all masked).
    fn stats(ld: usize, first: bool) -> [Vec<f32>; 3] {
        let m = (0..ld)
            .map(|c| match (first, c % 5) {
                (true, _) | (false, 0) => f32::NEG_INFINITY,
                (false, k) => k as f32 * 2.0 - 3.0,
            })
            .collect::<Vec<_>>();
        let l = m.iter().enumerate().map(|(c, &m)| if m == f32::NEG_INFINITY { 0.0 } else { 1.0 + c as f32 / 7.0 }).collect();
        [m, l, vec![f32::NAN; ld]]
    }

    /// Each column from its definition, the exponentials and sums in f64 (of the
    /// differences rounded to f32 when `f32_differences`, as the f32 paths take them): the
    /// outputs `softmax_columns` should give.
    fn reference(st: &[f32], ld: usize, keys: usize, [m, l, _]: &[Vec<f32>; 3], f32_differences: bool) -> (Vec<f64>, [Vec<f64>; 3]) {
        let mut p = vec![0.0; keys * ld];
        let mut out = [vec![0.0; ld], vec![0.0; ld], vec![0.0; ld]];
        let exp = |x: f32, shift: f32| if f32_differences { ((x - shift) as f64).exp() } else { (x as f64 - shift as f64).exp() };
        for c in 0..ld {
            let col = (0..keys).map(|r| st[r * ld + c]);
            let top = col.clone().fold(m[c], |t, x| if x > t { x } else { t });
            let (shift, alpha) = if top == f32::NEG_INFINITY { (0.0, 1.0) } else { (top, exp(m[c], top)) };
            let mut sum = 0.0;
            for (r, x) in col.enumerate() {
                p[r * ld + c] = exp(x, shift);
                sum += p[r * ld + c];
            }
            out[0][c] = top as f64;
            out[1][c] = l[c] as f64 * alpha + sum;
            out[2][c] = alpha;
        }
        (p, out)
    }

    fn close(got: f64, want: f64, tol: f64) -> bool {
        got.to_bits() == want.to_bits() || (got.is_nan() && want.is_nan()) || (got - want).abs() <= tol * (want.abs() + f64::MIN_POSITIVE)
    }

    /// The f32 kernels (and the portable path) against the f64 definition, on tiles of 1 to
    /// 130 keys and 16 to 80 columns (one to five registers, in blocks of four and less).
    #[test]
    fn columns_match_the_definition() {
        let tiers: Vec<Option<bool>> = [None, Some(false), Some(true)]
            .into_iter()
            .filter(|t| t.is_none_or(|wide| cpu_kernel::available() && (!wide || cpu_kernel::wide())))
            .collect();
        for (keys, ld) in [(1, 16), (7, 32), (64, 48), (130, 64), (33, 80)] {
            for (first, tier) in [true, false].into_iter().flat_map(|f| tiers.iter().map(move |&t| (f, t))) {
                let mut st = tile(keys, ld, keys + ld);
                let [mut m, mut l, mut alpha] = stats(ld, first);
                let (want_p, want) = reference(&st, ld, keys, &[m.clone(), l.clone(), alpha.clone()], true);
                match tier {
                    Some(wide) => columns_on(wide, (&mut st, ld, keys), (&mut m, &mut l, &mut alpha)),
                    None => columns_portable((&mut st, ld, keys), (&mut m, &mut l, &mut alpha)),
                }
                let what = format!("{keys} x {ld}, first {first}, tier {tier:?}");
                for (i, (&g, &w)) in st.iter().zip(&want_p).enumerate() {
                    // Exponentials flushed below the normal range read 0.
                    let flushed = g == 0.0 && w < f32::MIN_POSITIVE as f64;
                    assert!(flushed || close(g as f64, w, 4e-7), "{what}: p[{i}] {g} vs {w}");
                }
                for c in 0..ld {
                    assert_eq!(m[c] as f64, want[0][c], "{what}: m[{c}]");
                    assert!(close(l[c] as f64, want[1][c], 2e-6), "{what}: l[{c}] {} vs {}", l[c], want[1][c]);
                    assert!(close(alpha[c] as f64, want[2][c], 4e-7), "{what}: alpha[{c}] {} vs {}", alpha[c], want[2][c]);
                }
            }
        }
    }

    /// The AVX2 and AVX-512 kernels agree bit for bit, NaN and masked columns included.
    #[test]
    fn column_tiers_agree_bit_for_bit() {
        if !(cpu_kernel::available() && cpu_kernel::wide()) {
            return;
        }
        for (keys, ld) in [(5, 16), (128, 64), (70, 48)] {
            let outs = [false, true].map(|wide| {
                let mut st = tile(keys, ld, 3);
                let [mut m, mut l, mut alpha] = stats(ld, false);
                columns_on(wide, (&mut st, ld, keys), (&mut m, &mut l, &mut alpha));
                [st, m, l, alpha].concat().iter().map(|x| x.to_bits()).collect::<Vec<_>>()
            });
            assert_eq!(outs[0], outs[1], "{keys} x {ld}");
        }
    }

    /// f64 takes the portable path through the public entry.
    #[test]
    fn f64_columns_match_the_definition() {
        let (keys, ld) = (9, 20);
        let st32 = tile(keys, ld, 1);
        let s32 = stats(ld, false);
        let (want_p, want) = reference(&st32, ld, keys, &s32, false);
        let mut st: Vec<f64> = st32.iter().map(|&x| x as f64).collect();
        let [mut m, mut l, mut alpha] = s32.map(|v| v.iter().map(|&x| x as f64).collect::<Vec<f64>>());
        softmax_columns(&mut st, ld, keys, ColumnStats { m: &mut m, l: &mut l, alpha: &mut alpha });
        assert!(st.iter().zip(&want_p).all(|(&g, &w)| close(g, w, 1e-12)));
        for c in 0..ld {
            assert!(m[c] == want[0][c] && close(l[c], want[1][c], 1e-12) && close(alpha[c], want[2][c], 1e-12));
        }
    }
}
