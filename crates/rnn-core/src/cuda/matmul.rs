//! Matmul through cuBLASLt (`blaslt.rs`): `[batch.., m, k] @ [batch.., k, n]` (equal batch
//! dims, broadcast ones with stride 0) into a contiguous row-major `[batch.., m, n]`, as one
//! strided-batched `cublasLtMatmul` call. f16 / bf16 accumulate in f32; f32 runs in full f32
//! unless `RNN_CUDA_TF32=1` allows TF32 tensor cores; f64 runs in f64.
//!
//! cuBLASLt is column-major, and a row-major `[m, n]` output is the column-major `n x m`
//! matrix `out^T = b^T a^T`: cuBLASLt's first operand is `b`, its second `a`, each read as the
//! transpose of the row-major matrix it holds. A view with unit column stride (row-major,
//! narrowed rows included) is read as is, one with unit row stride (a transposed view) with
//! cuBLASLt's transpose op; the batch dims must step by one stride per operand (0 for a
//! broadcast operand). An operand that fits neither is first copied contiguous.
//!
//! `matmul_bias_act` fuses a Linear layer's bias and activation into the product through
//! cuBLASLt epilogues.

use cudarc::driver::DevicePtr;

use super::blaslt::{self, Gemm, Matrix, Outcome};
use super::storage::CudaStorage;
use crate::op::{BinaryOp, UnaryOp};
use crate::storage::BackendStorage;
use crate::{Error, Layout, Result, Shape};

/// The activation `matmul_bias_act` applies after adding the bias.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Epilogue {
    /// The bias alone.
    None,
    Relu,
    /// GELU, tanh approximation (the same function as `Tensor::gelu`).
    Gelu,
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

/// An operand cuBLASLt can read: `s` itself, or a contiguous copy of it.
fn operand(s: &CudaStorage, l: &Layout) -> Result<(CudaStorage, Layout, Matrix)> {
    if let Some(m) = readable(l) {
        return Ok((s.clone(), l.clone(), m));
    }
    let copy = s.copy_strided(l)?;
    let l = Layout::contiguous(l.shape().clone());
    let m = readable(&l).ok_or_else(|| Error::Msg(format!("cuda: matmul cannot read the contiguous layout {l:?}")))?;
    Ok((copy, l, m))
}

/// The device address of `s`'s element `offset`.
fn address(s: &CudaStorage, offset: usize) -> u64 {
    // Event tracking is off on every device (one stream each), so the returned guard records
    // nothing and may be dropped at once.
    let (ptr, _) = s.slice().device_ptr(&s.dev().stream);
    ptr + (offset * s.dtype().size_in_bytes()) as u64
}

/// The contiguous `n x m` column-major output of `batch` products.
fn output_matrix(m: usize, n: usize) -> Matrix {
    Matrix { rows: n as u64, cols: m as u64, ld: n as i64, trans: false, batch_stride: (m * n) as i64 }
}

fn check_float(op: &'static str, a: &CudaStorage, b: &CudaStorage) -> Result<()> {
    if a.dtype() != b.dtype() {
        return Err(Error::DTypeMismatch { op, lhs: a.dtype(), rhs: b.dtype() });
    }
    if a.device() != b.device() {
        return Err(Error::DeviceMismatch { op, lhs: a.device(), rhs: b.device() });
    }
    if !a.dtype().is_float() {
        return Err(Error::UnsupportedDType { op, dtype: a.dtype(), hint: ": use a float dtype" });
    }
    Ok(())
}

fn check_extent(op: &'static str, s: &CudaStorage, l: &Layout) -> Result<()> {
    if l.storage_extent() > s.len() {
        return Err(Error::invalid(op, format!("layout {l:?} reaches past a storage of {} elements", s.len())));
    }
    Ok(())
}

/// The CPU backend's errors: a shared float dtype, `[.., m, k]` and `[.., k, n]` layouts
/// with equal batch dims, inside their storages.
fn check_operands(a: &CudaStorage, la: &Layout, b: &CudaStorage, lb: &Layout) -> Result<()> {
    check_float("matmul", a, b)?;
    let (ad, bd) = (la.dims(), lb.dims());
    let r = ad.len();
    if r < 2 || r != bd.len() {
        return Err(Error::invalid(
            "matmul",
            format!("expected [.., m, k] and [.., k, n] layouts, got {la:?}, {lb:?}"),
        ));
    }
    if ad[..r - 2] != bd[..r - 2] || ad[r - 1] != bd[r - 2] {
        return Err(Error::ShapeMismatch { op: "matmul", lhs: la.shape().clone(), rhs: lb.shape().clone() });
    }
    check_extent("matmul", a, la)?;
    check_extent("matmul", b, lb)
}

pub(crate) fn matmul(a: &CudaStorage, la: &Layout, b: &CudaStorage, lb: &Layout) -> Result<CudaStorage> {
    check_operands(a, la, b, lb)?;
    let (ad, bd) = (la.dims(), lb.dims());
    let r = ad.len();
    let (batch, m, k, n) = (ad[..r - 2].iter().product::<usize>(), ad[r - 2], ad[r - 1], bd[r - 1]);
    let len = batch * m * n;
    if len == 0 {
        return a.alloc_like(a.dtype(), 0);
    }
    if k == 0 {
        return CudaStorage::full(0.0, len, a.dtype(), a.dev().ordinal);
    }
    let (sa, la, ma) = operand(a, la)?;
    let (sb, lb, mb) = operand(b, lb)?;
    let out = a.alloc_like(a.dtype(), len)?;
    let gemm = Gemm {
        dtype: a.dtype(),
        batch,
        a: (address(&sb, lb.start_offset()), mb),
        b: (address(&sa, la.start_offset()), ma),
        d: (address(&out, 0), output_matrix(m, n)),
        epilogue: None,
    };
    // The operands (and copies) stay alive until the product is enqueued; later reuse of
    // their buffers is ordered after it by the device's single stream.
    blaslt::run(a.dev(), &gemm)?;
    Ok(out)
}

/// `act(x @ w^T + bias)`, the forward of a Linear layer as one cuBLASLt call with a fused
/// epilogue (`CUBLASLT_EPILOGUE_BIAS`, `_RELU_BIAS`, `_GELU_BIAS`).
///
/// `x` is `[.., m, k]` (any strides), `w` is `[n, k]` (out x in features, as `Linear` stores
/// its weight; a contiguous one is read transposed without a copy) and `bias` holds `n`
/// contiguous elements from its first one; all three share a float dtype and a device. The
/// result is a contiguous `[.., m, n]`. f16 / bf16 accumulate in f32; where cuBLASLt has no
/// fused kernel (f64 on most devices) the bias and activation are applied by elementwise
/// kernels after the product.
///
/// Storage level only: no `Tensor` op calls it yet, and it has no backward.
pub fn matmul_bias_act(
    x: &CudaStorage,
    xl: &Layout,
    w: &CudaStorage,
    wl: &Layout,
    bias: &CudaStorage,
    act: Epilogue,
) -> Result<CudaStorage> {
    const OP: &str = "matmul_bias_act";
    check_float(OP, x, w)?;
    check_float(OP, x, bias)?;
    let (xd, wd) = (xl.dims(), wl.dims());
    let r = xd.len();
    if r < 2 || wd.len() != 2 || wd[1] != xd[r - 1] {
        return Err(Error::ShapeMismatch { op: OP, lhs: xl.shape().clone(), rhs: wl.shape().clone() });
    }
    check_extent(OP, x, xl)?;
    check_extent(OP, w, wl)?;
    let (rows, k, n) = (xd[..r - 1].iter().product::<usize>(), xd[r - 1], wd[0]);
    if bias.len() < n {
        return Err(Error::invalid(OP, format!("bias of {} elements for {n} output features", bias.len())));
    }
    let len = rows * n;
    if len == 0 {
        return x.alloc_like(x.dtype(), 0);
    }
    if k == 0 {
        let zeros = CudaStorage::full(0.0, len, x.dtype(), x.dev().ordinal)?;
        return add_bias_act(&zeros, rows, n, bias, act);
    }
    // The leading dims of x merge into the rows of one product when they step by one stride.
    let rows_layout = |l: &Layout, row_stride| {
        Layout::new(Shape::from(vec![rows, k]), vec![row_stride, l.strides()[r - 1]], l.start_offset())
    };
    let (x2, x2l) = match single_stride(&xd[..r - 1], &xl.strides()[..r - 1]) {
        Some(row_stride) => (x.clone(), rows_layout(xl, row_stride)),
        None => (x.copy_strided(xl)?, Layout::contiguous(vec![rows, k])),
    };
    let (sx, lx, mx) = operand(&x2, &x2l)?;
    let (sw, lw, mw) = operand(w, &wl.transpose(0, 1)?)?;
    let out = x.alloc_like(x.dtype(), len)?;
    let mut gemm = Gemm {
        dtype: x.dtype(),
        batch: 1,
        a: (address(&sw, lw.start_offset()), mw),
        b: (address(&sx, lx.start_offset()), mx),
        d: (address(&out, 0), output_matrix(rows, n)),
        epilogue: Some((act, address(bias, 0))),
    };
    match blaslt::run(x.dev(), &gemm)? {
        Outcome::Done => Ok(out),
        Outcome::EpilogueUnsupported => {
            gemm.epilogue = None;
            blaslt::run(x.dev(), &gemm)?;
            add_bias_act(&out, rows, n, bias, act)
        }
    }
}

/// `act(y + bias)` for a contiguous `[rows, n]` `y`, with elementwise kernels.
fn add_bias_act(y: &CudaStorage, rows: usize, n: usize, bias: &CudaStorage, act: Epilogue) -> Result<CudaStorage> {
    let yl = Layout::contiguous(vec![rows, n]);
    let bl = Layout::new(Shape::from(vec![rows, n]), vec![0, 1], 0);
    let sum = y.binary(&yl, bias, &bl, BinaryOp::Add)?;
    match act {
        Epilogue::None => Ok(sum),
        Epilogue::Relu => sum.unary(&yl, UnaryOp::Relu),
        Epilogue::Gelu => sum.unary(&yl, UnaryOp::Gelu),
    }
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
}
