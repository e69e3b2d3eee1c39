//! The f32 tile products of the CPU attention on x86-64 with AVX2 + FMA: a register-blocked
//! micro-kernel that keeps a `6 x 16` block of the result in twelve registers while it walks
//! the shared dimension, reading the left operand one broadcast element at a time (any row
//! and column strides, so `Pᵀ` and `dSᵀ` need no copy) and the right operand as row-major
//! rows of 16 floats. Unlike a general matrix product it packs nothing: the attention tiles
//! are small (`64 x 64 x 64`) and their right operands are already row-major (V, dO, Q, K),
//! or transposed once per key tile by the caller (`Kᵀ`, `Vᵀ`), so packing per product would
//! cost as much as the product's arithmetic saved.
//!
//! [`available`] says whether this CPU has the instructions (detected once at run time);
//! without them, or for f64, `cpu.rs` uses the `gemm` crate instead.

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

/// `c = alpha · a b + (c if accumulate)`, with `a` `m x k` (any strides), `b` `k x n` with
/// unit column stride and `n` a multiple of [`NR`], `c` `m x n` with row stride `ldc`.
///
/// Panics if an operand does not hold its elements, if `b`'s columns are not contiguous or
/// `n` is not a multiple of [`NR`], or if the CPU lacks AVX2 / FMA (callers check
/// [`available`]).
pub(super) fn product(
    (m, n, k): (usize, usize, usize),
    a: Strided,
    b: Strided,
    c: &mut [f32],
    ldc: usize,
    (alpha, accumulate): (f32, bool),
) {
    assert!(available(), "the attention tile kernel needs AVX2 and FMA");
    assert!(n % NR == 0 && b.cs == 1, "the attention tile kernel needs whole 16-column blocks");
    assert!(a.fits(m, k) && b.fits(k, n), "attention tile operand out of bounds");
    assert!(m == 0 || n == 0 || (m - 1) * ldc + n <= c.len(), "attention tile result out of bounds");
    if m == 0 || n == 0 {
        return;
    }
    #[cfg(target_arch = "x86_64")]
    // SAFETY: the CPU has AVX2 and FMA (asserted); every element the kernel reads or writes
    // lies inside its slice (asserted above), and `c` does not overlap `a` or `b` (it is
    // borrowed mutably).
    unsafe {
        avx2::product(
            (m, n, k),
            avx2::Operand { ptr: a.data.as_ptr(), rs: a.rs, cs: a.cs },
            (b.data.as_ptr(), b.rs),
            (c.as_mut_ptr(), ldc),
            (alpha, accumulate),
        )
    };
}

#[cfg(target_arch = "x86_64")]
mod avx2 {
    use std::arch::x86_64::*;

    use super::NR;

    /// Rows of the result per micro-kernel call: 6 rows x 2 registers = 12 accumulators,
    /// plus 2 for the right operand's row and 1 for the broadcast, of the 16 registers.
    const MR: usize = 6;

    #[derive(Clone, Copy)]
    pub(super) struct Operand {
        pub ptr: *const f32,
        pub rs: usize,
        pub cs: usize,
    }

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
}

#[cfg(test)]
mod tests {
    use super::*;

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

    /// Odd row counts (every remainder of 6), transposed and strided left operands, padded
    /// result rows, both epilogues: the kernel against a plain loop.
    #[test]
    fn matches_plain_loop() {
        if !available() {
            return;
        }
        let vals = |n: usize, seed: usize| -> Vec<f32> {
            (0..n).map(|i| (((i * 7919 + seed * 104_729) % 1000) as f32 / 500.0) - 1.0).collect()
        };
        for (m, n, k) in [(1, 16, 1), (5, 32, 7), (13, 16, 64), (64, 64, 64), (7, 48, 0)] {
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
                    product((m, n, k), a, b, &mut got, ldc, epilogue);
                    naive((m, n, k), a, b, &mut want, ldc, epilogue);
                    for (g, w) in got.iter().zip(&want) {
                        assert!((g - w).abs() <= 1e-4 * (1.0 + w.abs()), "{m}x{n}x{k} {a_rs},{a_cs}: {g} vs {w}");
                    }
                }
            }
        }
    }
}
