//! Products as cuBLASLt runs them, described as data (`GemmLaunch`): which buffers, read as
//! which column-major matrices, with which alignment guarantees and epilogue. The CUDA
//! runtime hands a `GemmLaunch` to cuBLASLt (`cuda/blaslt.rs`); the host emulator executes it
//! as cuBLASLt documents it (`emu/gemm.rs`).
//!
//! cuBLASLt is column-major, and a row-major `[m, n]` output is the column-major `n x m`
//! matrix `out^T = b^T a^T`: cuBLASLt's first operand is `b`, its second `a`, each read as the
//! transpose of the row-major matrix it holds. A view with unit column stride (row-major,
//! narrowed rows included) is read as is, one with unit row stride (a transposed view) with
//! cuBLASLt's transpose op; the batch dims must step by one stride per operand (0 for a
//! broadcast operand). An operand that fits neither is first copied contiguous.

// Only CUDA runtimes (cudarc, the emulator) run products as `GemmLaunch`es.
#![cfg_attr(not(any(feature = "cuda", feature = "cuda-emu")), allow(dead_code))]

use super::elementwise::copy_into;
use super::plan::{Arg, Program};
use crate::op_table::Epilogue;
use crate::{DType, Error, Layout, Result};

/// One operand as cuBLASLt reads it: a column-major `rows x cols` matrix with leading
/// dimension `ld`, read transposed when `trans`, the next matrix of a batch `batch_stride`
/// elements further (0: the same matrix for every product of the batch).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) struct Matrix {
    pub rows: u64,
    pub cols: u64,
    pub ld: i64,
    pub trans: bool,
    pub batch_stride: i64,
}

/// A matrix in a buffer: the buffer, the element its first entry is at, and its shape.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Operand {
    pub arg: Arg,
    pub offset: usize,
    pub matrix: Matrix,
}

/// `d = op(a) @ op(b)` (column-major, `d` never transposed) for `batch` products, with an
/// optional fused epilogue adding a bias vector of `d.rows` elements (at `bias`) then an
/// activation.
#[derive(Clone, Debug)]
pub(crate) struct GemmLaunch {
    pub dtype: DType,
    pub batch: usize,
    pub a: Operand,
    pub b: Operand,
    pub d: Operand,
    pub bias: Option<(Epilogue, Arg, usize)>,
    /// The byte alignment a, b and d have in every product of the batch (buffers start on
    /// 256 bytes): the hints cuBLASLt chooses its kernels by.
    pub alignments: [u32; 3],
    /// Where the runtime has no fused kernel for the epilogue, the product runs without it
    /// and this program, over inputs (d, the bias buffer), gives the result that replaces d.
    pub fallback: Option<Box<Program>>,
}

/// The alignment cuBLASLt requires of a fused bias vector; a bias view less aligned is copied.
pub(crate) const BIAS_ALIGNMENT: usize = 16;

/// The largest power of two, at most 256, dividing `bytes` (256 for 0).
fn alignment_of(bytes: u64) -> u32 {
    1 << bytes.trailing_zeros().min(8)
}

/// The alignment every matrix of `o` has: its first element's offset, every column start
/// (`ld`) and every batch entry (`batch_stride`) all keep it, since buffers start on 256
/// bytes. A batched f16 matrix with an odd `ld * size` is only 2-byte aligned after the
/// first, whatever the first pointer's alignment.
pub(crate) fn operand_alignment(o: &Operand, batch: usize, size: usize) -> u32 {
    let size = size as u64;
    let mut align = alignment_of(o.offset as u64 * size);
    if o.matrix.cols > 1 {
        align = align.min(alignment_of(o.matrix.ld as u64 * size));
    }
    if batch > 1 && o.matrix.batch_stride != 0 {
        align = align.min(alignment_of(o.matrix.batch_stride as u64 * size));
    }
    align
}

/// The stride stepping through `dims` in row-major order when it exists: every dim of size
/// above 1 steps by the next inner one's stride times its size (0 for broadcast dims). Some(0)
/// when every dim has size 1.
fn single_stride(dims: &[usize], strides: &[usize]) -> Option<usize> {
    let mut stride = None;
    let mut span = 1usize;
    for (&d, &s) in dims.iter().zip(strides).rev().filter(|(&d, _)| d != 1) {
        match stride {
            None => stride = Some(s),
            Some(inner) if s == inner.checked_mul(span)? => {}
            Some(_) => return None,
        }
        span = span.checked_mul(d)?;
    }
    Some(stride.unwrap_or(0))
}

/// How cuBLASLt reads a row-major-indexed `[r, c]` matrix with strides `(rs, cs)` as its
/// transpose `[c, r]`:
/// - `cs == 1`: the memory is a column-major `c x r` matrix with `ld = rs`, read as is;
/// - `rs == 1` (a transposed view): it is a column-major `r x c` matrix with `ld = cs`, read
///   transposed.
///
/// The stride of a size-1 dim is never used. `None` when neither fits (overlapping or
/// doubly strided views).
fn read_as_transpose(r: usize, c: usize, rs: usize, cs: usize, batch_stride: usize) -> Option<Matrix> {
    let matrix = |rows: usize, cols: usize, ld: usize, trans| {
        (ld >= rows.max(1)).then_some(Matrix {
            rows: rows as u64,
            cols: cols as u64,
            ld: ld as i64,
            trans,
            batch_stride: batch_stride as i64,
        })
    };
    let as_is = (c == 1 || cs == 1).then(|| matrix(c, r, if r == 1 { c } else { rs }, false)).flatten();
    as_is.or_else(|| (r == 1 || rs == 1).then(|| matrix(r, c, if c == 1 { r } else { cs }, true)).flatten())
}

/// How cuBLASLt reads `l` (`[batch.., r, c]`), if it can without a copy.
fn readable(l: &Layout) -> Option<Matrix> {
    let (dims, strides) = (l.dims(), l.strides());
    let r = dims.len();
    let batch_stride = single_stride(&dims[..r - 2], &strides[..r - 2])?;
    read_as_transpose(dims[r - 2], dims[r - 1], strides[r - 2], strides[r - 1], batch_stride)
}

/// The operand cuBLASLt reads for `arg` (dtype `dtype`, seen through `l`): the buffer itself,
/// or a contiguous copy appended to `p`.
pub(crate) fn operand(p: &mut Program, arg: Arg, dtype: DType, l: &Layout) -> Result<Operand> {
    if let Some(matrix) = readable(l) {
        return Ok(Operand { arg, offset: l.start_offset(), matrix });
    }
    let contiguous = Layout::contiguous(l.shape().clone());
    let matrix = readable(&contiguous)
        .ok_or_else(|| Error::Msg(format!("cuda: matmul cannot read the contiguous layout {contiguous:?}")))?;
    let copy = p.temp(dtype, l.shape().elem_count());
    copy_into(p, (arg, dtype, l), (copy, dtype, &contiguous))?;
    Ok(Operand { arg: copy, offset: 0, matrix })
}

/// The product writing the row-major `a @ b` (`[m, k] @ [k, n]`, `batch` times) to the
/// contiguous `out`: the column-major `n x m` matrix `b^T a^T`, so cuBLASLt's first operand
/// is `b` and its second `a` (each from `operand`).
pub(crate) fn row_major_product(
    dtype: DType,
    batch: usize,
    (m, n): (usize, usize),
    a: Operand,
    b: Operand,
    out: Arg,
) -> GemmLaunch {
    let matrix = Matrix { rows: n as u64, cols: m as u64, ld: n as i64, trans: false, batch_stride: (m * n) as i64 };
    let d = Operand { arg: out, offset: 0, matrix };
    let size = dtype.size_in_bytes();
    let alignments = [b, a, d].map(|o| operand_alignment(&o, batch, size));
    GemmLaunch { dtype, batch, a: b, b: a, d, bias: None, alignments, fallback: None }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn single_strides() {
        assert_eq!(single_stride(&[], &[]), Some(0));
        assert_eq!(single_stride(&[4], &[12]), Some(12));
        assert_eq!(single_stride(&[2, 3], &[36, 12]), Some(12));
        assert_eq!(single_stride(&[2, 1, 3], &[36, 7, 12]), Some(12));
        assert_eq!(single_stride(&[2, 3], &[0, 0]), Some(0));
        assert_eq!(single_stride(&[2, 3], &[0, 12]), None);
        assert_eq!(single_stride(&[2, 3], &[12, 36]), None);
        assert_eq!(single_stride(&[1, 1], &[5, 9]), Some(0));
    }

    fn read(r: usize, c: usize, rs: usize, cs: usize) -> Option<(bool, u64, u64, i64)> {
        read_as_transpose(r, c, rs, cs, 0).map(|m| (m.trans, m.rows, m.cols, m.ld))
    }

    #[test]
    fn reads() {
        // Row-major [3, 4]: a column-major 4 x 3 matrix, ld 4.
        assert_eq!(read(3, 4, 4, 1), Some((false, 4, 3, 4)));
        // Narrowed columns of a [3, 10]: ld 10.
        assert_eq!(read(3, 4, 10, 1), Some((false, 4, 3, 10)));
        // The transpose of a row-major [4, 3]: a column-major 3 x 4 matrix read transposed.
        assert_eq!(read(3, 4, 1, 3), Some((true, 3, 4, 3)));
        // Single rows and columns, whatever the unused stride.
        assert_eq!(read(1, 4, 0, 1), Some((false, 4, 1, 4)));
        assert_eq!(read(3, 1, 1, 7), Some((false, 1, 3, 1)));
        assert_eq!(read(3, 1, 5, 0), Some((false, 1, 3, 5)));
        assert_eq!(read(1, 1, 0, 0), Some((false, 1, 1, 1)));
        // Broadcast rows, overlapping rows, doubly strided: copied.
        assert_eq!(read(3, 4, 0, 1), None);
        assert_eq!(read(3, 4, 2, 1), None);
        assert_eq!(read(3, 4, 8, 2), None);
    }

    #[test]
    fn alignment_covers_every_batch_entry_and_column() {
        let m = |ld, batch_stride| Matrix { rows: 3, cols: 5, ld, trans: false, batch_stride };
        let o = |offset, matrix| Operand { arg: Arg::Input(0), offset, matrix };
        // f32, contiguous [5, 3] matrices back to back: 4-byte steps of 15 elements.
        assert_eq!(operand_alignment(&o(0, m(3, 15)), 4, 4), 4);
        // f16 with odd m * k: the second matrix starts 2 bytes past a word.
        assert_eq!(operand_alignment(&o(0, m(4, 13)), 4, 2), 2);
        // One product: the batch stride does not matter.
        assert_eq!(operand_alignment(&o(0, m(64, 13)), 1, 2), 128);
        // A view starting at element 2 of an f32 buffer: 8 bytes.
        assert_eq!(operand_alignment(&o(2, m(64, 0)), 8, 4), 8);
    }
}
