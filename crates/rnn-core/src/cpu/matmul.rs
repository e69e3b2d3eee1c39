//! Batched matmul. f32 and f64 run the `gemm` crate (runtime-dispatched AVX2 / AVX-512
//! kernels; f32 optionally our packed GEMM, see `f32_gemm_is_packed`); bf16 and f16 our
//! packed GEMM (`matmul_half`): gemm has no bf16 kernel and rounds its f16
//! output after every depth block, PyTorch rounds once.
//! Inputs are `[batch.., m, k]` and `[batch.., k, n]` with equal batch dims, any strides.

use std::ops::Range;

use gemm::{gemm, Parallelism};
use rayon::prelude::*;

use super::matmul_half::GemmInput;
use super::packed_gemm::Mat;
use super::padded_columns::with_padded_columns;
use super::parallel::SharedOut;
use super::strided::StridedIndex;
use super::CpuStorage;
use crate::{Error, Layout, Result, WithDType};

/// Matmuls below this many multiply-adds run on one thread.
const PAR_FLOPS: usize = 1 << 18;

struct Dims {
    batch: usize,
    m: usize,
    n: usize,
    k: usize,
}

fn batch_offsets(l: &Layout) -> Vec<usize> {
    let r = l.dims().len();
    let outer = Layout::new(l.dims()[..r - 2].to_vec().into(), l.strides()[..r - 2].to_vec(), l.start_offset());
    StridedIndex::new(&outer).collect()
}

/// One operand of a product: first element, row stride, column stride (in elements).
#[derive(Clone, Copy)]
pub(super) struct Operand<T>(pub(super) *const T, pub(super) isize, pub(super) isize);

/// `dst = a @ b` (or `dst += a @ b` when `accumulate`) for one `m x n` row-major output.
///
/// SAFETY: the operands must address `m x k` and `k x n` valid elements.
pub(super) unsafe fn gemm_one<T: WithDType>(
    dst: &mut [T],
    (m, n, k): (usize, usize, usize),
    a: Operand<T>,
    b: Operand<T>,
    (zero, one): (T, T),
    par: Parallelism,
    accumulate: bool,
) {
    // SAFETY: the caller's guarantee, passed on.
    if unsafe { packed_f32(dst, (m, n, k), a, b, par, accumulate) } {
        return;
    }
    let threads = match par {
        Parallelism::Rayon(threads) => threads,
        Parallelism::None => 1,
    };
    if (2..=GEMV_ROWS).contains(&m) && b.1 == 1 {
        // SAFETY: the caller's guarantee, passed on.
        unsafe { gemv_rows(dst, (m, n, k), a, b, (zero, one), threads, accumulate) };
        return;
    }
    if threads > 1 && runs_in_stripes((m, n, k)) {
        // SAFETY: the caller's guarantee, passed on.
        unsafe { gemm_in_stripes(dst, (m, n, k), a, b, (zero, one), threads, accumulate) };
        return;
    }
    let dst = dst.as_mut_ptr();
    // SAFETY: the caller's guarantee; `dst` holds `m x n` row-major elements, of which the
    // product writes `columns`.
    unsafe {
        with_padded_columns(b, (m, n, k), threads > 1, |b, columns| {
            let dims = (m, columns.len(), k);
            crate_gemm((dst.add(columns.start), n), dims, a, b, (zero, one), par, accumulate)
        })
    }
}

/// One call of the gemm crate: `dst = a @ b` (or `+=` when `accumulate`) for an `m x n`
/// output with contiguous columns and rows `row_stride` elements apart.
///
/// SAFETY: the operands must address `m x k` and `k x n` valid elements, `dst` `m` rows of
/// `n` elements at that stride.
unsafe fn crate_gemm<T: Copy + 'static>(
    (dst, row_stride): (*mut T, usize),
    (m, n, k): (usize, usize, usize),
    a: Operand<T>,
    b: Operand<T>,
    (zero, one): (T, T),
    par: Parallelism,
    accumulate: bool,
) {
    let alpha = if accumulate { one } else { zero };
    // SAFETY: the caller's guarantee; gemm takes (column, row) strides.
    unsafe {
        gemm(
            m,
            n,
            k,
            dst,
            1,
            row_stride as isize,
            accumulate,
            a.0,
            a.2,
            a.1,
            b.0,
            b.2,
            b.1,
            alpha,
            one,
            false,
            false,
            false,
            par,
        )
    }
}

/// Products of at most this many rows whose right operand has contiguous columns (`x · wᵀ`
/// for a batch of 2-4) run as one matrix-vector product per row ([`gemv_rows`]).
const GEMV_ROWS: usize = 4;

/// `gemm_one` as `m` one-row products, in parallel when `threads > 1`. For so few rows the
/// gemm crate's packing of a transposed `b` costs more than the product: measured on a Zen 5
/// EPYC, one thread, f32, 2 x 1024 x 1024 ran at 2.2 GFLOP/s as one product and 47.6 as two
/// matrix-vector products (4 x 1024 x 784: 33 against 42), though each row reads all of `b`;
/// from 8 rows the padded copy of `padded_columns` is faster
/// (bench/results/2026-12-01-padded-columns-2core-amd-epyc.md).
///
/// SAFETY: as `gemm_one`.
unsafe fn gemv_rows<T: WithDType>(
    dst: &mut [T],
    (m, n, k): (usize, usize, usize),
    a: Operand<T>,
    b: Operand<T>,
    units: (T, T),
    threads: usize,
    accumulate: bool,
) {
    let out = SharedOut(dst.as_mut_ptr());
    let row = |i: usize| {
        // Whole operands, which are `Sync`, not their pointer fields.
        let (a, b): (Operand<T>, Operand<T>) = (a, b);
        // SAFETY: row `i` of `a` and of dst lie inside the caller's blocks; rows of dst are
        // disjoint.
        unsafe {
            let ai = Operand(a.0.offset(i as isize * a.1), a.1, a.2);
            crate_gemm((out.at(i * n), n), (1, n, k), ai, b, units, Parallelism::None, accumulate)
        }
    };
    if threads > 1 {
        (0..m).into_par_iter().for_each(row);
    } else {
        (0..m).for_each(row);
    }
}

/// Whether a threaded product runs as one single-threaded gemm per output stripe
/// (`gemm_in_stripes`) rather than on the gemm crate's own split: when one of its sides is
/// at most 256 and it has at least 2^20 multiply-adds. Measured at 2 threads on a Zen 5
/// EPYC (bench/results/2026-11-28-mlp-floor-2core-amd-epyc.md), the stripes ran the MLP's
/// and the char-GPT's training products (batch 128, width 128) 1.0-1.27x as fast as the
/// crate's split and the MLP step 1.10-1.16x; square products of 256-2048 ran up to 1.26x
/// faster on the crate's split, and so did 128 x 10 x 256 (under 2^20).
fn runs_in_stripes((m, n, k): (usize, usize, usize)) -> bool {
    m.min(n).min(k) <= 256 && m * n * k >= 1 << 20
}

// SAFETY: an operand is read only, like a `&[T]`, which is `Send` when `T` is `Sync`.
unsafe impl<T: Sync> Send for Operand<T> {}
// SAFETY: as for `Send`: reads only.
unsafe impl<T: Sync> Sync for Operand<T> {}

/// `gemm_one` on `threads` threads, one single-threaded product per stripe of the output:
/// rows when `m >= n` (every stripe packs all of `b`), else columns (all of `a`).
///
/// SAFETY: as `gemm_one`.
unsafe fn gemm_in_stripes<T: WithDType>(
    dst: &mut [T],
    (m, n, k): (usize, usize, usize),
    a: Operand<T>,
    b: Operand<T>,
    (zero, one): (T, T),
    threads: usize,
    accumulate: bool,
) {
    let by_rows = m >= n;
    let long = if by_rows { m } else { n };
    let stripes = threads.min(long.div_ceil(16)).max(1);
    let step = long.div_ceil(stripes);
    let out = SharedOut(dst.as_mut_ptr());
    let bounds = |s: usize| (s * step, ((s + 1) * step).min(long));
    // Row stripes share `b`, padded once below if its columns conflict; a column stripe
    // pads its own part of `b`. Both capture whole operands, which are `Sync`, not their
    // pointer fields.
    let row_stripe = |s: usize, b: Operand<T>, columns: Range<usize>| {
        let a: Operand<T> = a;
        let (start, end) = bounds(s);
        if start < end {
            // SAFETY: the stripe's rows of `a` and of dst, and `columns` of dst, lie inside
            // the caller's blocks; stripes write disjoint rows of dst.
            unsafe {
                let (pa, c) = (Operand(a.0.offset(start as isize * a.1), a.1, a.2), out.at(start * n + columns.start));
                crate_gemm((c, n), (end - start, columns.len(), k), pa, b, (zero, one), Parallelism::None, accumulate)
            }
        }
    };
    let column_stripe = |s: usize| {
        let b: Operand<T> = b;
        let (start, end) = bounds(s);
        if start < end {
            // SAFETY: the stripe's columns of `b` and of dst lie inside the caller's blocks;
            // stripes write disjoint columns of dst.
            unsafe {
                let pb = Operand(b.0.offset(start as isize * b.2), b.1, b.2);
                with_padded_columns(pb, (m, end - start, k), false, |pb, columns| {
                    let c = out.at(start + columns.start);
                    crate_gemm((c, n), (m, columns.len(), k), a, pb, (zero, one), Parallelism::None, accumulate)
                })
            }
        }
    };
    if by_rows {
        // SAFETY: the caller's guarantee.
        unsafe {
            with_padded_columns(b, (m, n, k), true, |b, columns| {
                (0..stripes).into_par_iter().for_each(|s| row_stripe(s, b, columns.clone()))
            })
        }
    } else {
        (0..stripes).into_par_iter().for_each(column_stripe);
    }
}

/// Whether f32 products run our packed GEMM instead of the `gemm` crate: only when
/// `RNN_CPU_F32_GEMM=packed` (and the CPU has AVX2 + FMA). Measured on a 2-core AVX2 EPYC
/// (bench/results/2026-11-25-packed-gemm-2core-amd-epyc.md), the packed GEMM matched the
/// crate on large square products but ran 0.56-1.18x its speed on the MLP and GPT shapes
/// of `rnn bench cpu --gemm-shapes`, so the crate stays the default; the switch lets one
/// binary compare both.
pub fn f32_gemm_is_packed() -> bool {
    static PACKED: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *PACKED.get_or_init(|| {
        std::env::var("RNN_CPU_F32_GEMM").as_deref() == Ok("packed") && super::matmul_half::Path::Avx2.available()
    })
}

/// Runs an f32 product on the packed GEMM when `f32_gemm_is_packed`; false (nothing done)
/// for other types, negative strides, or when the `gemm` crate is the one to use.
///
/// SAFETY: as `gemm_one`.
unsafe fn packed_f32<T: 'static>(
    dst: &mut [T],
    (m, n, k): (usize, usize, usize),
    a: Operand<T>,
    b: Operand<T>,
    par: Parallelism,
    accumulate: bool,
) -> bool {
    let strides = [a.1, a.2, b.1, b.2];
    if std::any::TypeId::of::<T>() != std::any::TypeId::of::<f32>() || strides.iter().any(|&s| s < 0) {
        return false;
    }
    if !f32_gemm_is_packed() {
        return false;
    }
    let mat = |o: Operand<T>, (rows, cols): (usize, usize)| {
        let (rs, cs) = (o.1 as usize, o.2 as usize);
        let extent = if rows * cols == 0 { 0 } else { (rows - 1) * rs + (cols - 1) * cs + 1 };
        // SAFETY: `T` is f32 (checked above); the caller guarantees `rows x cols` valid
        // elements at these strides, which span `extent` elements.
        Mat { data: unsafe { std::slice::from_raw_parts(o.0 as *const f32, extent) }, rs, cs }
    };
    // SAFETY: `T` is f32; dst holds m x n elements (the caller's guarantee).
    let out = unsafe { std::slice::from_raw_parts_mut(dst.as_mut_ptr() as *mut f32, m * n) };
    let par = matches!(par, Parallelism::Rayon(t) if t > 1);
    let path = super::matmul_half::Path::best();
    super::matmul_half::widened_gemm(path, mat(a, (m, k)), mat(b, (k, n)), (m, n, k), out, (par, accumulate));
    true
}

fn gemm_typed<T: WithDType>(a: &[T], la: &Layout, b: &[T], lb: &Layout, d: &Dims, units: (T, T)) -> Result<Vec<T>> {
    // The product overwrites the whole output (`read_dst` false) unless k is 0.
    let n_out = d.batch * d.m * d.n;
    let mut out = if d.k == 0 { super::parallel::zeroed_vec(n_out)? } else { super::parallel::output_vec(n_out)? };
    if out.is_empty() {
        return Ok(out);
    }
    let strides = |l: &Layout| {
        let r = l.dims().len();
        (l.strides()[r - 2] as isize, l.strides()[r - 1] as isize)
    };
    let ((a_rs, a_cs), (b_rs, b_cs)) = (strides(la), strides(lb));
    let (oa, ob) = (batch_offsets(la), batch_offsets(lb));
    let flops = d.m * d.n * d.k;
    let threads = rayon::current_num_threads();
    let run = |dst: &mut [T], i: usize, par: Parallelism| {
        // SAFETY: every offset and stride comes from layouts checked against the storage
        // length in `matmul` below; dst is exactly m*n elements, row-major.
        unsafe {
            let (pa, pb) = (Operand(a.as_ptr().add(oa[i]), a_rs, a_cs), Operand(b.as_ptr().add(ob[i]), b_rs, b_cs));
            gemm_one(dst, (d.m, d.n, d.k), pa, pb, units, par, false);
        }
    };
    let chunks = out.chunks_mut(d.m * d.n);
    if flops < PAR_FLOPS && d.batch == 1 {
        // Small and single: the thread pool's hand-off would cost more than the product.
        chunks.for_each(|dst| run(dst, 0, Parallelism::None));
    } else if flops >= PAR_FLOPS && (d.batch < threads || flops >= 64 * PAR_FLOPS) {
        chunks.enumerate().for_each(|(i, dst)| run(dst, i, Parallelism::Rayon(threads)));
    } else {
        chunks.collect::<Vec<_>>().into_par_iter().enumerate().for_each(|(i, dst)| run(dst, i, Parallelism::None));
    }
    Ok(out)
}

/// bf16 / f16 through our packed GEMM (`matmul_half`): f32 accumulation, one rounding.
fn half_product<E: GemmInput>(a: &[E], la: &Layout, b: &[E], lb: &Layout, d: &Dims) -> Result<Vec<E>> {
    // `batched` writes every element (zeros when k is 0).
    let mut out = super::parallel::output_vec(d.batch * d.m * d.n)?;
    let strides = |l: &Layout| {
        let r = l.dims().len();
        (l.strides()[r - 2], l.strides()[r - 1])
    };
    let offsets = (&batch_offsets(la)[..], &batch_offsets(lb)[..]);
    super::matmul_half::batched((a, b), offsets, (strides(la), strides(lb)), (d.m, d.n, d.k), &mut out)?;
    Ok(out)
}

/// `dst = a @ b` for 2-D `a` `[m, k]` and `b` `[k, n]` (any strides) into the row-major
/// `m x n` `dst`: the product of a fused op, whose epilogue then runs on `dst`.
pub(crate) fn gemm_into<T: WithDType>(
    dst: &mut [T],
    (a, la): (&[T], &Layout),
    (b, lb): (&[T], &Layout),
    units: (T, T),
) -> Result<()> {
    let (m, k, n) = product_dims(dst.len(), (a.len(), la), (b.len(), lb))?;
    if dst.is_empty() {
        return Ok(());
    }
    if k == 0 {
        // No terms: the sum is empty (gemm is not asked to handle k = 0).
        dst.fill(units.0);
        return Ok(());
    }
    let par = if m * n * k < PAR_FLOPS { Parallelism::None } else { Parallelism::Rayon(rayon::current_num_threads()) };
    let operand = |p: &[T], l: &Layout| {
        // SAFETY: the start offset lies within the storage (checked extent above).
        Operand(unsafe { p.as_ptr().add(l.start_offset()) }, l.strides()[0] as isize, l.strides()[1] as isize)
    };
    // SAFETY: the extents of both layouts were checked against their storages; dst holds
    // exactly m x n row-major elements.
    unsafe { gemm_one(dst, (m, n, k), operand(a, la), operand(b, lb), units, par, false) };
    Ok(())
}

/// `acc = a @ b` for 2-D bf16 / f16 `a` `[m, k]` and `b` `[k, n]` (any strides), summed in
/// f32 into the row-major `m x n` `acc`: the product of a fused op that adds its epilogue
/// before the one rounding.
pub(crate) fn half_gemm_into<E: GemmInput>(
    acc: &mut [f32],
    (a, la): (&[E], &Layout),
    (b, lb): (&[E], &Layout),
) -> Result<()> {
    let (m, k, n) = product_dims(acc.len(), (a.len(), la), (b.len(), lb))?;
    fn mat<'a, E>(p: &'a [E], l: &Layout) -> Mat<'a, E> {
        // An empty operand's view may start past its (empty) storage.
        Mat { data: p.get(l.start_offset()..).unwrap_or(&[]), rs: l.strides()[0], cs: l.strides()[1] }
    }
    let path = super::matmul_half::Path::best();
    super::matmul_half::product_f32(path, mat(a, la), mat(b, lb), (m, n, k), acc);
    Ok(())
}

/// `(m, k, n)` of a 2-D product into an `out_len`-element output, after checking both
/// layouts against their storages and the shapes against each other.
fn product_dims(
    out_len: usize,
    (a_len, la): (usize, &Layout),
    (b_len, lb): (usize, &Layout),
) -> Result<(usize, usize, usize)> {
    check_extent("matmul", a_len, la)?;
    check_extent("matmul", b_len, lb)?;
    let (m, k, n) = (la.dims()[0], la.dims()[1], lb.dims()[1]);
    if out_len != m * n || lb.dims()[0] != k {
        return Err(Error::Msg(format!("internal: a product of {la:?} and {lb:?} into {out_len} elements")));
    }
    Ok((m, k, n))
}

fn check_extent(op: &'static str, len: usize, l: &Layout) -> Result<()> {
    if l.storage_extent() > len {
        return Err(Error::invalid(op, format!("layout {l:?} reaches past a storage of {len} elements")));
    }
    Ok(())
}

impl CpuStorage {
    /// `[.., m, k] x [.., k, n] -> [.., m, n]`; batch dims of both layouts are equal.
    pub fn matmul(&self, la: &Layout, rhs: &CpuStorage, lb: &Layout) -> Result<CpuStorage> {
        check_extent("matmul", self.len(), la)?;
        check_extent("matmul", rhs.len(), lb)?;
        let (ad, bd) = (la.dims(), lb.dims());
        let r = ad.len();
        let d = Dims { batch: ad[..r - 2].iter().product(), m: ad[r - 2], k: ad[r - 1], n: bd[r - 1] };
        Ok(match (self, rhs) {
            (CpuStorage::F32(a), CpuStorage::F32(b)) => CpuStorage::F32(gemm_typed(a, la, b, lb, &d, (0.0, 1.0))?),
            (CpuStorage::F64(a), CpuStorage::F64(b)) => CpuStorage::F64(gemm_typed(a, la, b, lb, &d, (0.0, 1.0))?),
            (CpuStorage::F16(a), CpuStorage::F16(b)) => CpuStorage::F16(half_product(a, la, b, lb, &d)?),
            (CpuStorage::BF16(a), CpuStorage::BF16(b)) => CpuStorage::BF16(half_product(a, la, b, lb, &d)?),
            (a, b) if a.dtype() != b.dtype() => {
                return Err(Error::DTypeMismatch { op: "matmul", lhs: a.dtype(), rhs: b.dtype() })
            }
            (a, _) => {
                return Err(Error::UnsupportedDType { op: "matmul", dtype: a.dtype(), hint: ": use a float dtype" })
            }
        })
    }
}

/// Whether `a @ b` is faster computed as `(b^T @ a^T)^T` (a view of the transposed
/// product, no copy; `Tensor::matmul` asks before it multiplies on the CPU). The gemm crate
/// runs `row-major @ column-major` products (the backward pass's `grad @ w.t()`) about 1.8x
/// faster when m >= n: measured 128x256 @ (512x256)^T at 386 us directly and 221 us
/// transposed. Other layouts measured no gain.
pub(crate) fn prefers_transposed_product(a: &Layout, b: &Layout) -> bool {
    if a.dims().len() != 2 || b.dims().len() != 2 {
        return false;
    }
    let row_major = |l: &Layout| l.strides()[1] == 1 && l.strides()[0] == l.dims()[1];
    let col_major = |l: &Layout| l.strides()[0] == 1 && l.strides()[1] == l.dims()[0];
    a.dims()[0] < b.dims()[1] && row_major(a) && col_major(b)
}

/// Test support: runs `product` (`dst = a @ b`, or `+=` when told to accumulate) on exact
/// f64 operands of `dims` laid out as a plain product's, a transposed left operand's (a
/// weight gradient's) and a transposed right operand's (an input gradient's), overwriting
/// and accumulating, and checks every output element against a triple loop.
#[cfg(test)]
pub(super) fn check_against_plain_product(
    (m, n, k): (usize, usize, usize),
    product: impl Fn(&mut [f64], Operand<f64>, Operand<f64>, bool),
) {
    let a: Vec<f64> = (0..m * k).map(|i| ((i * 37 % 11) as f64 - 5.0) / 4.0).collect();
    let b: Vec<f64> = (0..k * n).map(|i| ((i * 13 % 7) as f64 - 3.0) / 2.0).collect();
    // (a row stride, a column stride), (b row stride, b column stride)
    let layouts = [((k, 1), (n, 1)), ((1, m), (n, 1)), ((k, 1), (1, k))];
    for ((ars, acs), (brs, bcs)) in layouts {
        let start: Vec<f64> = (0..m * n).map(|i| (i % 5) as f64).collect();
        for accumulate in [false, true] {
            let mut dst = start.clone();
            let (ao, bo) =
                (Operand(a.as_ptr(), ars as isize, acs as isize), Operand(b.as_ptr(), brs as isize, bcs as isize));
            product(&mut dst, ao, bo, accumulate);
            for i in 0..m {
                for j in 0..n {
                    let sum: f64 = (0..k).map(|p| a[i * ars + p * acs] * b[p * brs + j * bcs]).sum();
                    let want = if accumulate { start[i * n + j] + sum } else { sum };
                    let got = dst[i * n + j];
                    let at = format!(
                        "{m}x{n}x{k}, a strides ({ars}, {acs}), b ({brs}, {bcs}), ({i}, {j}), accumulate {accumulate}"
                    );
                    assert!((got - want).abs() < 1e-12, "{at}: {got} vs {want}");
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `gemm_in_stripes` against a plain triple loop: split by rows (m >= n) and by columns,
    /// into uneven stripes.
    #[test]
    fn stripes_match_the_plain_product() {
        for dims in [(37, 20, 9), (20, 53, 9)] {
            // SAFETY: the checker passes operands and an output of these dimensions.
            check_against_plain_product(dims, |dst, a, b, accumulate| unsafe {
                gemm_in_stripes(dst, dims, a, b, (0.0, 1.0), 3, accumulate)
            });
        }
    }

    /// A transposed right operand whose columns are 1 KiB apart (k = 128 f64) goes through a
    /// padded copy: on one thread, on the crate's split, and in stripes by columns and by
    /// rows (`check_against_plain_product`'s third layout); 16,000 columns take two blocks
    /// of copies (`MAX_COPY_BYTES`).
    #[test]
    fn padded_columns_match_the_plain_product() {
        let cases = [
            ((5, 40, 128), Parallelism::None),
            ((5, 16_000, 128), Parallelism::None),
            ((40, 64, 128), Parallelism::Rayon(2)),
            ((64, 160, 128), Parallelism::Rayon(2)),
            ((160, 64, 128), Parallelism::Rayon(2)),
        ];
        for (dims, par) in cases {
            // SAFETY: the checker passes operands and an output of these dimensions.
            check_against_plain_product(dims, |dst, a, b, accumulate| unsafe {
                gemm_one(dst, dims, a, b, (0.0, 1.0), par, accumulate)
            });
        }
    }

    /// Two to four rows times a transposed right operand: one matrix-vector product per row,
    /// on one thread and in parallel.
    #[test]
    fn row_by_row_products_match_the_plain_product() {
        for (dims, par) in [((2, 40, 128), Parallelism::None), ((4, 33, 7), Parallelism::Rayon(2))] {
            // SAFETY: the checker passes operands and an output of these dimensions.
            check_against_plain_product(dims, |dst, a, b, accumulate| unsafe {
                gemm_one(dst, dims, a, b, (0.0, 1.0), par, accumulate)
            });
        }
    }

    #[test]
    fn the_stripes_rule() {
        // The MLP's and char-GPT's training products run in stripes; square products from
        // 512 and tiny ones stay on the crate's split.
        assert!(runs_in_stripes((128, 512, 784)));
        assert!(runs_in_stripes((784, 512, 128)));
        assert!(runs_in_stripes((2048, 128, 512)));
        assert!(!runs_in_stripes((512, 512, 512)));
        assert!(!runs_in_stripes((128, 10, 256)));
    }
}
