//! Attention on the CPU, FlashAttention-2 style: the forward (`cpu_forward.rs`, its scores
//! transposed) and the backward (`cpu_backward.rs`) walk `Br x Bc` tiles of scores, each
//! computed with the tile kernels of `cpu_kernel.rs` (f32 on AVX2 / AVX-512) or the `gemm`
//! crate (f64, other CPUs), and never hold more than one tile of scores per thread. This
//! file turns the op's inputs into a [`Problem`] (contiguous q, k, v in the compute type,
//! the masks) and holds what both passes share: the score tiles and the tile products.
//!
//! f32 and f64 are computed natively; f16 and bf16 in f32 (inputs converted once, O(N·D)),
//! their results rounded once.

use std::borrow::Cow;
use std::ops::Range;

use gemm::{gemm, Parallelism};
use half::{bf16, f16};

use super::cpu_kernel::{self, Strided};
use super::{Attention, AttentionBackward, Dims};
use crate::cpu::simd::{fold_lanes, map_slice};
use crate::cpu::unary::contiguous_slice;
use crate::cpu::CpuStorage;
use crate::num::{as_f32, as_f32_mut, Float};
use crate::{DType, Error, Layout, Result};

/// Query rows per tile.
pub(super) const BR: usize = 64;
/// Keys per tile.
pub(super) const BC: usize = 64;
/// Query rows per piece of a tile that the causal diagonal crosses (see
/// [`Problem::pieces`]): one column block of the f32 kernel, so that each piece's keys end
/// within one block of its diagonal.
const DIAGONAL_ROWS: usize = 16;

/// The compute types: f32 and f64.
pub(super) trait Compute: Float + bytemuck::Zeroable + Send + Sync + 'static {}
impl Compute for f32 {}
impl Compute for f64 {}

/// The additive bias: the whole storage of the `[B, H, Nq, Nk]` view (broadcast dims have
/// stride 0, so it is never expanded), its offset and strides.
pub(super) struct Bias<'a, C: Clone> {
    data: Cow<'a, [C]>,
    offset: usize,
    strides: [usize; 4],
}

/// A `[B, H, N, W]` input (q, k, v, dO) whose rows, the last dim, are contiguous: borrowed
/// with its strides where the layout allows (the heads of a packed `[B, N, 3, H, D]`
/// projection, say), else a contiguous copy (other strides, f16 / bf16 inputs).
pub(super) struct Heads<'a, C: Clone> {
    data: Cow<'a, [C]>,
    offset: usize,
    /// Strides of batch, head and row.
    strides: [usize; 3],
    heads: usize,
    width: usize,
}

impl<C: Compute> Heads<'_, C> {
    /// Rows `rows` of head `bh` (batch x heads + head): `rows.len() x width`.
    pub fn rows(&self, bh: usize, rows: &Range<usize>) -> Mat<'_, C> {
        let [sb, sh, sn] = self.strides;
        if rows.is_empty() || self.width == 0 {
            return Mat { data: &[], rs: sn, cs: 1 };
        }
        let at = self.offset + (bh / self.heads) * sb + (bh % self.heads) * sh + rows.start * sn;
        Mat { data: &self.data[at..][..(rows.len() - 1) * sn + self.width], rs: sn, cs: 1 }
    }
}

/// One attention problem in compute type `C`: q, k, v by rows, and the masks.
pub(super) struct Problem<'a, C: Clone> {
    pub dims: Dims,
    pub q: Heads<'a, C>,
    pub k: Heads<'a, C>,
    pub v: Heads<'a, C>,
    pub scale: C,
    pub causal: bool,
    /// Valid keys of each batch element (at most Nk).
    pub lengths: Vec<usize>,
    pub bias: Option<Bias<'a, C>>,
}

impl<C: Compute> Problem<'_, C> {
    /// The keys query rows `rows` of batch element `b` may see at all: `0..end`. Keys past
    /// a padding length, and (causal) past the last row, are skipped tile by tile.
    pub fn key_end(&self, b: usize, rows: &Range<usize>) -> usize {
        let end = self.lengths[b];
        if self.causal {
            end.min(rows.end)
        } else {
            end
        }
    }

    /// The pieces `(query rows, keys)` in which query block `rows` of batch element `b` meets
    /// key tile `keys`: the block with the keys it may see, or, where the causal diagonal
    /// crosses the tile, strips of [`DIAGONAL_ROWS`] rows, each with only the keys up to its
    /// own last row. The hidden triangle is then mostly skipped instead of computed and
    /// masked: 62% of the products of a `64 x 64` diagonal tile. Piece seeing no key are
    /// left out.
    pub fn pieces(&self, b: usize, rows: &Range<usize>, keys: &Range<usize>) -> impl Iterator<Item = Piece> + '_ {
        let crossed = self.causal && keys.end > rows.start + 1;
        let step = if crossed { DIAGONAL_ROWS } else { rows.len().max(1) };
        let (keys, end) = (keys.clone(), rows.end);
        (rows.start..end).step_by(step).map(move |first| {
            let part = first..(first + step).min(end);
            let cols = keys.start..keys.end.min(self.key_end(b, &part));
            (part, cols)
        })
        .filter(|(_, cols)| !cols.is_empty())
    }

    /// Adds the bias to the score tile `s` of rows `rows` and keys `cols` (row stride
    /// `ld`), and sets `-inf` where causality hides a key. (Padded keys are never in `cols`.)
    pub fn mask_tile(&self, bh: usize, rows: &Range<usize>, cols: &Range<usize>, s: &mut [C], ld: usize) {
        let bc = cols.len();
        if let Some(bias) = &self.bias {
            let [_, _, _, sj] = bias.strides;
            for (r, row) in s.chunks_mut(ld).take(rows.len()).enumerate() {
                let at = self.bias_at(bias, bh, rows.start + r, cols.start);
                for (c, x) in row[..bc].iter_mut().enumerate() {
                    *x = *x + bias.data[at + c * sj];
                }
            }
        }
        if self.causal && cols.end > rows.start + 1 {
            for (r, row) in s.chunks_mut(ld).take(rows.len()).enumerate() {
                row[first_hidden(rows.start + r, cols)..bc].fill(C::neg_infinity());
            }
        }
    }

    /// [`Problem::mask_tile`] on a transposed tile: `st` holds keys by rows, query rows by
    /// columns.
    pub fn mask_tile_t(&self, bh: usize, rows: &Range<usize>, cols: &Range<usize>, st: &mut [C], ld: usize) {
        let br = rows.len();
        if let Some(bias) = &self.bias {
            let [_, _, si, sj] = bias.strides;
            let first = self.bias_at(bias, bh, rows.start, cols.start);
            for (c, keys) in st.chunks_mut(ld).take(cols.len()).enumerate() {
                for (r, x) in keys[..br].iter_mut().enumerate() {
                    *x = *x + bias.data[first + r * si + c * sj];
                }
            }
        }
        if self.causal && cols.end > rows.start + 1 {
            for r in 0..br {
                for key in st.chunks_mut(ld).take(cols.len()).skip(first_hidden(rows.start + r, cols)) {
                    key[r] = C::neg_infinity();
                }
            }
        }
    }

    /// Where the bias of query row `row`, key `col` of head `bh` sits in its storage.
    fn bias_at(&self, bias: &Bias<C>, bh: usize, row: usize, col: usize) -> usize {
        let [sb, sh, si, sj] = bias.strides;
        let heads = self.dims.heads;
        bias.offset + (bh / heads) * sb + (bh % heads) * sh + row * si + col * sj
    }

    /// `s = q[rows] kᵀ · scale + bias` for the keys `cols`, the first keys of a tile whose
    /// transpose is `kt` (row stride `ld`, see [`transpose_tile`]), masked; `s` has row
    /// stride `ld`. Columns up to `padded(cols.len())` are written.
    pub fn scores(&self, bh: usize, rows: &Range<usize>, cols: &Range<usize>, kt: &[C], s: &mut [C], ld: usize) {
        let d = self.dims.d;
        let q = self.q.rows(bh, rows);
        let n = padded(cols.len()).min(ld);
        tile_product((rows.len(), n, d), (s, ld), false, q, Mat::rows(kt, ld), self.scale);
        self.mask_tile(bh, rows, cols, s, ld);
    }

    /// The transpose of [`Problem::scores`]: `st = (q[rows] kᵀ · scale + bias)ᵀ`, keys by
    /// rows, with `qt` the transposed query rows (`d x padded(rows.len())`, row-major rows
    /// of at least that many columns); `st` has row stride `ld`, at least
    /// `padded(rows.len())`, and is written that many columns wide (columns past the rows
    /// hold the products with `qt`'s padding). On the f32 kernel each score adds the same
    /// terms in the same order as in `scores`, so both give the same values.
    pub fn scores_t(&self, bh: usize, rows: &Range<usize>, cols: &Range<usize>, qt: Mat<C>, st: &mut [C], ld: usize) {
        let n = padded(rows.len()).min(ld);
        tile_product((cols.len(), n, self.dims.d), (st, ld), false, self.k.rows(bh, cols), qt, self.scale);
        self.mask_tile_t(bh, rows, cols, st, ld);
    }
}

/// The first of keys `cols` that causality hides from query row `row` (keys after it), as
/// an offset into `cols` (`cols.len()` when it sees them all).
fn first_hidden(row: usize, cols: &Range<usize>) -> usize {
    (row + 1).saturating_sub(cols.start).min(cols.len())
}

/// A piece of a tile: its query rows and keys (see [`Problem::pieces`]).
pub(super) type Piece = (Range<usize>, Range<usize>);

/// The width `bc` keys take in a transposed tile: a whole number of the f32 kernel's
/// column blocks, so that it runs on every tile.
pub(super) fn padded(bc: usize) -> usize {
    bc.next_multiple_of(super::cpu_kernel::NR)
}

/// `dst` (`width x ld`, row-major) = the transpose of `src` (`rows x width`), zero in the
/// columns from `rows` to `ld`.
pub(super) fn transpose_tile<C: Compute>(src: Mat<C>, (rows, width): (usize, usize), dst: &mut [C], ld: usize) {
    src.check(rows, width);
    if !transpose_f32(src, (rows, width), dst, ld) {
        for (x, out) in dst.chunks_exact_mut(ld).take(width).enumerate() {
            for (j, o) in out[..rows].iter_mut().enumerate() {
                *o = src.data[j * src.rs + x * src.cs];
            }
        }
    }
    dst.chunks_exact_mut(ld).take(width).for_each(|out| out[rows..].fill(C::zero()));
}

/// [`transpose_tile`]'s transpose on the AVX2 kernel where `C` is f32, the rows contiguous
/// and the CPU able; false (nothing done) otherwise.
fn transpose_f32<C: Compute>(src: Mat<C>, (rows, width): (usize, usize), dst: &mut [C], ld: usize) -> bool {
    if !cpu_kernel::available() || src.cs != 1 || rows == 0 || width == 0 {
        return false;
    }
    match (as_f32(src.data), as_f32_mut(dst)) {
        (Some(s), Some(d)) => {
            cpu_kernel::transpose(&s[..(rows - 1) * src.rs + width], src.rs, (rows, width), d, ld);
            true
        }
        _ => false,
    }
}

/// A matrix operand of a tile product: a slice and its row and column strides.
#[derive(Clone, Copy)]
pub(super) struct Mat<'a, C> {
    data: &'a [C],
    rs: usize,
    cs: usize,
}

impl<'a, C> Mat<'a, C> {
    /// Row-major rows of `width` elements.
    pub fn rows(data: &'a [C], width: usize) -> Self {
        Mat { data, rs: width, cs: 1 }
    }
    /// The transpose of row-major rows of `width` elements.
    pub fn cols(data: &'a [C], width: usize) -> Self {
        Mat { data, rs: 1, cs: width }
    }
    /// Row `r`'s first `width` elements (unit column stride).
    pub fn row(&self, r: usize, width: usize) -> &'a [C] {
        debug_assert!(self.cs == 1, "a row of a matrix with contiguous rows");
        &self.data[r * self.rs..][..width]
    }
    /// Panics unless `rows x cols` elements with these strides lie inside the slice (what
    /// makes the `gemm` call below sound).
    fn check(&self, rows: usize, cols: usize) {
        if rows > 0 && cols > 0 {
            assert!((rows - 1) * self.rs + (cols - 1) * self.cs < self.data.len(), "tile operand out of bounds");
        }
    }
}

/// `dst = alpha · a b`, or `dst += alpha · a b` when `accumulate`: `dst` is `m x n`
/// row-major with row stride `ldc`, `a` is `m x k`, `b` `k x n`. f32 products whose `b`
/// has contiguous rows of whole 16-column blocks run on `cpu_kernel` where the CPU has
/// AVX2 and FMA; the others on the `gemm` crate.
pub(super) fn tile_product<C: Compute>(
    (m, n, k): (usize, usize, usize),
    (dst, ldc): (&mut [C], usize),
    accumulate: bool,
    a: Mat<C>,
    b: Mat<C>,
    alpha: C,
) {
    if m == 0 || n == 0 {
        return;
    }
    assert!((m - 1) * ldc + n <= dst.len() && n <= ldc, "tile product destination too small");
    a.check(m, k);
    b.check(k, n);
    if let (Some(dst), Some(a32), Some(b32)) = (as_f32_mut(dst), as_f32(a.data), as_f32(b.data)) {
        if cpu_kernel::available() && b.cs == 1 && n % cpu_kernel::NR == 0 {
            let a32 = Strided { data: a32, rs: a.rs, cs: a.cs };
            let b32 = Strided { data: b32, rs: b.rs, cs: 1 };
            let alpha = as_f32(std::slice::from_ref(&alpha)).map_or(f32::NAN, |x| x[0]);
            return cpu_kernel::product((m, n, k), a32, b32, dst, ldc, (alpha, accumulate));
        }
    }
    if k == 0 {
        if !accumulate {
            dst.chunks_mut(ldc).take(m).for_each(|row| row[..n].fill(C::zero()));
        }
        return;
    }
    // SAFETY: `check` verified that every element `a` (m x k) and `b` (k x n) address lies in
    // their slices, and `dst` holds m rows of n elements at row stride ldc (asserted); the
    // slices do not overlap (one is borrowed mutably).
    unsafe {
        gemm(
            m,
            n,
            k,
            dst.as_mut_ptr(),
            1,
            ldc as isize,
            accumulate,
            a.data.as_ptr(),
            a.cs as isize,
            a.rs as isize,
            b.data.as_ptr(),
            b.cs as isize,
            b.rs as isize,
            C::one(),
            alpha,
            false,
            false,
            false,
            Parallelism::None,
        )
    };
}

/// `dst += alpha · a b` (see [`tile_product`]), `dst` with row stride `n`.
pub(super) fn tile_product_add<C: Compute>(mnk: (usize, usize, usize), dst: &mut [C], a: Mat<C>, b: Mat<C>, alpha: C) {
    tile_product(mnk, (dst, mnk.1), true, a, b, alpha)
}

/// `p = exp(s - shift)` over a score row, and the sum of `p`.
pub(super) fn exp_sum<C: Compute>(s: &[C], shift: C, p: &mut [C]) -> C {
    let shift32 = as_f32(std::slice::from_ref(&shift)).map(|x| x[0]);
    match (as_f32(s), shift32) {
        (Some(s), Some(shift)) if cpu_kernel::available() => {
            let p = as_f32_mut(p).expect("the same compute type");
            C::c(cpu_kernel::exp_sum(s, shift, p) as f64)
        }
        _ => {
            map_slice(s, p, &|x: C| (x - shift).vexp());
            fold_lanes(p, C::zero(), |x| x, |a, b| a + b)
        }
    }
}

/// Input `i` contiguous in the compute type: borrowed for f32 / f64, converted for halves.
fn compute_input<'a, C: Compute>((s, l): (&'a CpuStorage, &Layout)) -> Result<Cow<'a, [C]>> {
    let owned = |mut s: CpuStorage| -> Result<Cow<'a, [C]>> {
        match &mut s {
            CpuStorage::F32(v) if C::is_f32() => Ok(Cow::Owned(bytemuck_vec(std::mem::take(v)))),
            CpuStorage::F64(v) if !C::is_f32() => Ok(Cow::Owned(bytemuck_vec(std::mem::take(v)))),
            s => Err(Error::Msg(format!("internal: attention computes {} in the wrong type", s.dtype()))),
        }
    };
    match s {
        CpuStorage::F32(v) if C::is_f32() => Ok(cast_cow(contiguous_slice(v, l)?)),
        CpuStorage::F64(v) if !C::is_f32() => Ok(cast_cow(contiguous_slice(v, l)?)),
        CpuStorage::F16(_) | CpuStorage::BF16(_) => owned(s.to_dtype(l, DType::F32)?),
        s => Err(Error::UnsupportedDType { op: "scaled_dot_product_attention", dtype: s.dtype(), hint: "" }),
    }
}

/// A `[B, H, N, W]` input by rows (see [`Heads`]).
pub(super) fn heads_input<'a, C: Compute>((s, l): (&'a CpuStorage, &Layout)) -> Result<Heads<'a, C>> {
    let (dims, st) = (l.dims(), l.strides());
    if dims.len() != 4 {
        return Err(Error::Msg(format!("internal: attention input of shape {dims:?}, not [B, H, N, D]")));
    }
    let rows_contiguous = st[3] == 1 || dims[3] <= 1;
    let same_type = matches!((s, C::is_f32()), (CpuStorage::F32(_), true) | (CpuStorage::F64(_), false));
    let (data, offset, strides) = if rows_contiguous && same_type && l.storage_extent() <= s.len() {
        (compute_input((s, &Layout::contiguous(s.len())))?, l.start_offset(), [st[0], st[1], st[2]])
    } else {
        let (h, n, w) = (dims[1], dims[2], dims[3]);
        (compute_input((s, l))?, 0, [h * n * w, n * w, w])
    };
    Ok(Heads { data, offset, strides, heads: dims[1], width: dims[3] })
}

/// Whether the compute type is f32 (else f64).
trait IsF32 {
    fn is_f32() -> bool;
}
impl<C: 'static> IsF32 for C {
    fn is_f32() -> bool {
        std::any::TypeId::of::<C>() == std::any::TypeId::of::<f32>()
    }
}

/// A `Vec<T>` as a `Vec<C>` where both are the same type (checked by `TypeId`).
fn bytemuck_vec<T: 'static, C: 'static>(v: Vec<T>) -> Vec<C> {
    assert_eq!(std::any::TypeId::of::<T>(), std::any::TypeId::of::<C>(), "same compute type");
    let mut v = std::mem::ManuallyDrop::new(v);
    // SAFETY: T and C are the same type (asserted above), so the allocation, length and
    // capacity are valid for a Vec<C>.
    unsafe { Vec::from_raw_parts(v.as_mut_ptr() as *mut C, v.len(), v.capacity()) }
}

fn cast_cow<'a, T: Clone + 'static, C: Clone + 'static>(c: Cow<'a, [T]>) -> Cow<'a, [C]> {
    assert_eq!(std::any::TypeId::of::<T>(), std::any::TypeId::of::<C>(), "same compute type");
    match c {
        // SAFETY: T and C are the same type (asserted above).
        Cow::Borrowed(s) => Cow::Borrowed(unsafe { std::slice::from_raw_parts(s.as_ptr() as *const C, s.len()) }),
        Cow::Owned(v) => Cow::Owned(bytemuck_vec(v)),
    }
}

/// The lengths input as valid keys per batch element, clamped to `nk`; all of `nk` without.
fn lengths(input: Option<(&CpuStorage, &Layout)>, dims: &Dims) -> Result<Vec<usize>> {
    let Some((s, l)) = input else { return Ok(vec![dims.nk; dims.batch]) };
    match s {
        CpuStorage::U32(v) => Ok(contiguous_slice(v, l)?.iter().map(|&x| (x as usize).min(dims.nk)).collect()),
        s => Err(Error::Msg(format!("internal: attention lengths are u32, got {}", s.dtype()))),
    }
}

fn bias<'a, C: Compute>((s, l): (&'a CpuStorage, &Layout)) -> Result<Bias<'a, C>> {
    if l.storage_extent() > s.len() || l.dims().len() != 4 {
        return Err(Error::Msg(format!("internal: attention bias layout {l:?} does not fit its storage")));
    }
    let whole = Layout::contiguous(s.len());
    let data = compute_input((s, &whole))?;
    let st = l.strides();
    Ok(Bias { data, offset: l.start_offset(), strides: [st[0], st[1], st[2], st[3]] })
}

/// The problem of `op` over q, k, v (the first three of `inputs`) and its mask inputs at
/// `lengths_at` and `bias_at`.
pub(super) fn problem<'a, C: Compute>(
    op: &Attention,
    inputs: &[(&'a CpuStorage, &Layout)],
    (lengths_at, bias_at): (Option<usize>, Option<usize>),
) -> Result<Problem<'a, C>> {
    let dims = Dims::of(inputs[0].1.dims(), inputs[1].1.dims(), inputs[2].1.dims());
    Ok(Problem {
        dims,
        q: heads_input(inputs[0])?,
        k: heads_input(inputs[1])?,
        v: heads_input(inputs[2])?,
        scale: C::c(op.scale),
        causal: op.causal,
        lengths: lengths(lengths_at.map(|i| inputs[i]), &dims)?,
        bias: bias_at.map(|i| bias(inputs[i])).transpose()?,
    })
}

/// A result computed in `C` as a storage of `dtype` (rounded once for halves).
pub(super) fn store<C: Compute>(v: Vec<C>, dtype: DType) -> Result<CpuStorage> {
    if C::is_f32() {
        let v: Vec<f32> = bytemuck_vec(v);
        Ok(match dtype {
            DType::F16 => CpuStorage::F16(v.into_iter().map(f16::from_f32).collect()),
            DType::BF16 => CpuStorage::BF16(v.into_iter().map(bf16::from_f32).collect()),
            _ => CpuStorage::F32(v),
        })
    } else {
        Ok(CpuStorage::F64(bytemuck_vec(v)))
    }
}

/// Whether `dtype` computes in f64 (else f32).
pub(super) fn wide(inputs: &[(&CpuStorage, &Layout)]) -> Result<(DType, bool)> {
    let dtype = inputs[0].0.dtype();
    match dtype {
        DType::F64 => Ok((dtype, true)),
        DType::F32 | DType::F16 | DType::BF16 => Ok((dtype, false)),
        _ => Err(Error::UnsupportedDType { op: "scaled_dot_product_attention", dtype, hint: ": use a float dtype" }),
    }
}

pub(crate) fn forward(op: &Attention, inputs: &[(&CpuStorage, &Layout)]) -> Result<Option<Vec<CpuStorage>>> {
    let at = (op.lengths_input(), op.bias_input());
    let (dtype, f64_math) = wide(inputs)?;
    let (o, lse) = if f64_math {
        let (o, lse) = super::cpu_forward::run(&problem::<f64>(op, inputs, at)?, op.saves_lse)?;
        (store(o, dtype)?, lse.map(|lse| store(lse, DType::F64)).transpose()?)
    } else {
        let (o, lse) = super::cpu_forward::run(&problem::<f32>(op, inputs, at)?, op.saves_lse)?;
        (store(o, dtype)?, lse.map(|lse| store(lse, DType::F32)).transpose()?)
    };
    Ok(Some([o].into_iter().chain(lse).collect()))
}

pub(crate) fn backward(op: &AttentionBackward, inputs: &[(&CpuStorage, &Layout)]) -> Result<Option<Vec<CpuStorage>>> {
    let (dtype, f64_math) = wide(inputs)?;
    let grads = if f64_math {
        super::cpu_backward::run::<f64>(op, inputs)?.into_iter().map(|g| store(g, dtype)).collect::<Result<_>>()?
    } else {
        super::cpu_backward::run::<f32>(op, inputs)?.into_iter().map(|g| store(g, dtype)).collect::<Result<_>>()?
    };
    Ok(Some(grads))
}

/// The saved inputs of the backward (o, do, lse) contiguous in `C`.
pub(super) fn compute_slice<'a, C: Compute>(input: (&'a CpuStorage, &Layout)) -> Result<Cow<'a, [C]>> {
    compute_input(input)
}
