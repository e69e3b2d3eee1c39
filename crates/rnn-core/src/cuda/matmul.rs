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
//! `linear` fuses a Linear layer's bias and activation into the product through cuBLASLt
//! epilogues.

use cudarc::driver::DevicePtr;

use super::blaslt::{self, Gemm, Matrix, Outcome};
use super::storage::CudaStorage;
use crate::op::Epilogue;
use crate::storage::{add_bias_act, BackendStorage};
use crate::{DType, Error, Layout, Result};

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

/// How cuBLASLt reads an operand of layout `l`: as is, or (`true`) from a contiguous copy
/// with the returned layout.
fn read_plan(l: &Layout) -> Result<(bool, Layout, Matrix)> {
    if let Some(m) = readable(l) {
        return Ok((false, l.clone(), m));
    }
    let contiguous = Layout::contiguous(l.shape().clone());
    let m = readable(&contiguous)
        .ok_or_else(|| Error::Msg(format!("cuda: matmul cannot read the contiguous layout {contiguous:?}")))?;
    Ok((true, contiguous, m))
}

/// An operand cuBLASLt can read: `s` itself, or a contiguous copy of it.
fn operand(s: &CudaStorage, l: &Layout) -> Result<(CudaStorage, Layout, Matrix)> {
    let (copy, read_layout, m) = read_plan(l)?;
    let s = if copy { s.copy_strided(l)? } else { s.clone() };
    Ok((s, read_layout, m))
}

/// The device address of `s`'s element `offset`.
fn address(s: &CudaStorage, offset: usize) -> u64 {
    // Event tracking is off on every device (one stream each), so the returned guard records
    // nothing and may be dropped at once.
    let (ptr, _) = s.slice().device_ptr(&s.dev().stream);
    ptr + (offset * s.dtype().size_in_bytes()) as u64
}

/// The cuBLASLt product writing the row-major `a @ b` (`[m, k] @ [k, n]`, `batch` times) to
/// the contiguous `d`: the column-major `n x m` matrix `b^T a^T`, so cuBLASLt's first operand
/// is `b` and its second `a` (each `Matrix` from `read_as_transpose`).
fn row_major_product(
    dtype: DType,
    batch: usize,
    (m, n): (usize, usize),
    a: (u64, Matrix),
    b: (u64, Matrix),
    d: u64,
) -> Gemm {
    let out = Matrix { rows: n as u64, cols: m as u64, ld: n as i64, trans: false, batch_stride: (m * n) as i64 };
    Gemm { dtype, batch, a: b, b: a, d: (d, out), epilogue: None }
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
    let (pa, pb) = ((address(&sa, la.start_offset()), ma), (address(&sb, lb.start_offset()), mb));
    let gemm = row_major_product(a.dtype(), batch, (m, n), pa, pb, address(&out, 0));
    // The operands (and copies) stay alive until the product is enqueued; later reuse of
    // their buffers is ordered after it by the device's single stream.
    blaslt::run(a.dev(), &gemm)?;
    Ok(out)
}

/// `act(x @ w^T + bias)`, the forward of a Linear layer (`BackendStorage::linear`), as one
/// cuBLASLt call with a fused epilogue (`CUBLASLT_EPILOGUE_BIAS`, `_RELU_BIAS`, `_GELU_BIAS`).
///
/// `x` is `[m, k]`, `w` `[n, k]` (out x in features, as `Linear` stores it: a contiguous one
/// is read transposed without a copy), `bias` `[n]`; the caller (`Tensor::linear`) checked
/// the shapes, dtypes and devices. The result is a contiguous `[m, n]`. Where cuBLASLt has no
/// fused kernel (f64 on most devices), or there is no bias, the bias and activation are
/// applied by elementwise kernels after the product.
pub(crate) fn linear(
    x: &CudaStorage,
    xl: &Layout,
    w: &CudaStorage,
    wl: &Layout,
    bias: Option<(&CudaStorage, &Layout)>,
    act: Epilogue,
) -> Result<CudaStorage> {
    let (m, n) = (xl.dims()[0], wl.dims()[0]);
    let wt = wl.transpose(0, 1)?;
    let Some((bias, bl)) = bias.filter(|_| m * n > 0 && xl.dims()[1] > 0) else {
        return add_bias_act(matmul(x, xl, w, &wt)?, (m, n), bias, act);
    };
    check_operands(x, xl, w, &wt)?;
    check_float("linear", x, bias)?;
    check_extent("linear", bias, bl)?;
    // cuBLASLt reads the bias as n contiguous elements.
    let (bias, bl) = match bl.strides()[0] == 1 || n == 1 {
        true => (bias.clone(), bl.clone()),
        false => (bias.copy_strided(bl)?, Layout::contiguous(vec![n])),
    };
    let (sx, lx, mx) = operand(x, xl)?;
    let (sw, lw, mw) = operand(w, &wt)?;
    let out = x.alloc_like(x.dtype(), m * n)?;
    let (px, pw) = ((address(&sx, lx.start_offset()), mx), (address(&sw, lw.start_offset()), mw));
    let mut gemm = row_major_product(x.dtype(), 1, (m, n), px, pw, address(&out, 0));
    gemm.epilogue = Some((act, address(&bias, bl.start_offset())));
    match blaslt::run(x.dev(), &gemm)? {
        Outcome::Done => Ok(out),
        Outcome::EpilogueUnsupported => {
            gemm.epilogue = None;
            blaslt::run(x.dev(), &gemm)?;
            add_bias_act(out, (m, n), Some((&bias, &bl)), act)
        }
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

    // ---- cuBLASLt's contract, emulated on the host ----
    //
    // Without a GPU, these tests check what the CUDA matmul asks of cuBLASLt: for random
    // shapes and views (transposed, narrowed, broadcast, permuted batches), the `Gemm` that
    // `read_plan` and `row_major_product` describe, executed with cuBLASLt's documented
    // column-major semantics, must give the row-major product.

    use rand::rngs::StdRng;
    use rand::{Rng, SeedableRng};

    /// Addresses in emulated memory: the buffer index above bit 40, the element below.
    const SPACE: u32 = 40;

    /// Element `(i, j)` of `op(M)` for batch entry `batch`.
    fn op_elem(mem: &[Vec<f64>], (ptr, m): (u64, Matrix), batch: usize, i: u64, j: u64) -> f64 {
        let (r, c) = if m.trans { (j, i) } else { (i, j) };
        assert!(r < m.rows && c < m.cols, "({r}, {c}) outside a {} x {} matrix", m.rows, m.cols);
        let buf = &mem[(ptr >> SPACE) as usize];
        let at = (ptr & ((1 << SPACE) - 1)) as i64 + batch as i64 * m.batch_stride + r as i64 + c as i64 * m.ld;
        buf[usize::try_from(at).expect("negative address")]
    }

    /// `D = op(A) op(B)` (+ bias per row of D, then the activation), column-major, as the
    /// cuBLASLt documentation defines `cublasLtMatmul` with alpha 1, beta 0.
    fn emulate(g: &Gemm, mem: &[Vec<f64>]) -> Vec<f64> {
        let dims = |m: &Matrix| if m.trans { (m.cols, m.rows) } else { (m.rows, m.cols) };
        let ((ar, ak), (bk, bc), d) = (dims(&g.a.1), dims(&g.b.1), g.d.1);
        assert_eq!((ar, bc, ak), (d.rows, d.cols, bk), "operand dims");
        for m in [g.a.1, g.b.1, d] {
            assert!(m.ld >= m.rows as i64, "leading dimension {} below {} rows", m.ld, m.rows);
        }
        assert!(!d.trans);
        let mut out = vec![f64::NAN; g.batch * d.batch_stride as usize];
        for batch in 0..g.batch {
            for i in 0..d.rows {
                for j in 0..d.cols {
                    let mut v: f64 =
                        (0..ak).map(|p| op_elem(mem, g.a, batch, i, p) * op_elem(mem, g.b, batch, p, j)).sum();
                    if let Some((act, bias)) = g.epilogue {
                        v += mem[(bias >> SPACE) as usize][(bias & ((1 << SPACE) - 1)) as usize + i as usize];
                        v = act.unary().map_or(v, |op| op.eval_f64(v));
                    }
                    out[batch * d.batch_stride as usize + (i + j * d.ld as u64) as usize] = v;
                }
            }
        }
        out
    }

    /// The element of `data` that index `idx` of layout `l` reads.
    fn at(data: &[f64], l: &Layout, idx: &[usize]) -> f64 {
        data[l.start_offset() + idx.iter().zip(l.strides()).map(|(i, s)| i * s).sum::<usize>()]
    }

    fn indices(dims: &[usize]) -> Vec<Vec<usize>> {
        let mut all = vec![vec![]];
        for &d in dims {
            all =
                all.into_iter().flat_map(|p: Vec<usize>| (0..d).map(move |i| [p.clone(), vec![i]].concat())).collect();
        }
        all
    }

    /// The logical values of `l` over `data`, row-major.
    fn logical(data: &[f64], l: &Layout) -> Vec<f64> {
        indices(l.dims()).iter().map(|idx| at(data, l, idx)).collect()
    }

    /// A random view of a fresh buffer with logical dims `dims`: plain, transposed, narrowed,
    /// with broadcast or permuted batch dims.
    fn random_view(rng: &mut StdRng, dims: &[usize]) -> (Vec<f64>, Layout) {
        let r = dims.len();
        let mut l = match rng.random_range(0..3) {
            0 => Layout::contiguous(dims.to_vec()),
            1 => {
                let mut t = dims.to_vec();
                t.swap(r - 1, r - 2);
                Layout::contiguous(t).transpose(r - 1, r - 2).unwrap()
            }
            _ => {
                let mut wide = dims.to_vec();
                wide[r - 1] += 3;
                Layout::contiguous(wide).narrow(r - 1, 2, dims[r - 1]).unwrap()
            }
        };
        if r > 2 && rng.random_bool(0.3) {
            // The first batch dim broadcast: stride 0.
            let mut strides = l.strides().to_vec();
            strides[0] = 0;
            l = Layout::new(l.shape().clone(), strides, l.start_offset());
        } else if r > 3 && rng.random_bool(0.3) {
            let mut swapped = dims.to_vec();
            swapped.swap(0, 1);
            let base = Layout::contiguous(swapped);
            l = base.transpose(0, 1).unwrap();
        }
        let data = (0..l.storage_extent().max(1)).map(|_| rng.random_range(-2.0..2.0f64).round()).collect();
        (data, l)
    }

    /// An operand as the matmul path reads it: the buffer (or its contiguous copy) and the
    /// `Matrix`, placed in emulated memory space `space`.
    fn place(data: &[f64], l: &Layout, space: u64, mem: &mut Vec<Vec<f64>>) -> (u64, Matrix) {
        let (copy, read_layout, m) = read_plan(l).unwrap();
        mem.push(if copy { logical(data, l) } else { data.to_vec() });
        ((space << SPACE) + read_layout.start_offset() as u64, m)
    }

    fn reference(a: &[f64], b: &[f64], batch: usize, (m, k, n): (usize, usize, usize)) -> Vec<f64> {
        let mut out = vec![0.0; batch * m * n];
        for (z, o) in out.iter_mut().enumerate() {
            let (bi, i, j) = (z / (m * n), z / n % m, z % n);
            *o = (0..k).map(|p| a[bi * m * k + i * k + p] * b[bi * k * n + p * n + j]).sum();
        }
        out
    }

    #[test]
    fn matmul_gemm_matches_row_major_product() {
        let mut rng = StdRng::seed_from_u64(5);
        let mut copies = 0;
        for _ in 0..400 {
            let batch_dims: Vec<usize> = (0..rng.random_range(0..3)).map(|_| rng.random_range(1..4)).collect();
            let (m, k, n) = (rng.random_range(1..6), rng.random_range(1..6), rng.random_range(1..6));
            let with = |x, y| [batch_dims.clone(), vec![x, y]].concat();
            let (da, la) = random_view(&mut rng, &with(m, k));
            let (db, lb) = random_view(&mut rng, &with(k, n));
            let mut mem = Vec::new();
            let pa = place(&da, &la, 0, &mut mem);
            let pb = place(&db, &lb, 1, &mut mem);
            copies += usize::from(read_plan(&la).unwrap().0) + usize::from(read_plan(&lb).unwrap().0);
            let batch = batch_dims.iter().product();
            let gemm = row_major_product(DType::F64, batch, (m, n), pa, pb, 2 << SPACE);
            let want = reference(&logical(&da, &la), &logical(&db, &lb), batch, (m, k, n));
            assert_eq!(emulate(&gemm, &mem), want, "{la:?} @ {lb:?}");
        }
        // Most views are read in place; the doubly strided ones are copied.
        assert!(copies > 0 && copies < 400, "{copies} copies");
    }

    #[test]
    fn linear_gemm_matches_reference() {
        let mut rng = StdRng::seed_from_u64(6);
        for (case, &act) in Epilogue::ALL.iter().cycle().take(150).enumerate() {
            let (m, k, n) = (rng.random_range(1..6), rng.random_range(1..6), rng.random_range(1..6));
            let (dx, lx) = random_view(&mut rng, &[m, k]);
            let (dw, lw) = random_view(&mut rng, &[n, k]);
            let bias: Vec<f64> = (0..n).map(|_| rng.random_range(-2.0..2.0f64).round()).collect();
            let mut mem = Vec::new();
            let px = place(&dx, &lx, 0, &mut mem);
            let pw = place(&dw, &lw.transpose(0, 1).unwrap(), 1, &mut mem);
            mem.push(bias.clone());
            // The output is never read: its address only has to differ from the operands'.
            let mut gemm = row_major_product(DType::F32, 1, (m, n), px, pw, 3 << SPACE);
            gemm.epilogue = Some((act, 2 << SPACE));
            let wt = logical(&dw, &lw.transpose(0, 1).unwrap());
            let z = reference(&logical(&dx, &lx), &wt, 1, (m, k, n));
            let want: Vec<f64> = z
                .iter()
                .enumerate()
                .map(|(i, v)| v + bias[i % n])
                .map(|v| act.unary().map_or(v, |op| op.eval_f64(v)))
                .collect();
            let got = emulate(&gemm, &mem);
            let err = got.iter().zip(&want).map(|(g, w)| (g - w).abs()).fold(0.0, f64::max);
            assert!(err < 1e-12, "case {case}: {act:?} {lx:?} x {lw:?}: {got:?} vs {want:?}");
        }
    }
}
