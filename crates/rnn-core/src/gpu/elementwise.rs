//! Plans of the elementwise kernels: fill, strided copy / cast, unary, binary, compare and
//! where. Each one-line op comes from the op table (`op_table.rs`); the templates are in
//! rnn-kernels (`cuda/*.cu`, `wgsl/*.wgsl`), with the same placeholders in both languages.

use super::plan::{Arg, Grid, KernelSource, Program};
use super::target::{Lang, Target};
use crate::op_table::{BinaryOp, CmpOp, UnaryOp};
use crate::{DType, Error, Layout, Result};

/// The template of `name` in the target's language.
pub(crate) fn template(target: &Target, cuda: &'static str, wgsl: &'static str) -> &'static str {
    match target.lang {
        Lang::Cuda => cuda,
        Lang::Wgsl => wgsl,
    }
}

pub(crate) fn fill_source(target: &Target, value_expr: &str, dtype: DType) -> Result<KernelSource> {
    let t = target.elem_type("full", dtype)?;
    let tmpl = template(target, rnn_kernels::cuda::FILL, rnn_kernels::wgsl::FILL);
    Ok(KernelSource::new(target, tmpl, &[("T", t), ("value", value_expr)], target.needs_half(&[dtype])))
}

/// Appends a launch writing `value` (converted as the CPU converts it) to the `n` elements
/// of `out` (a buffer of `dtype`).
pub(crate) fn fill_into(p: &mut Program, out: Arg, dtype: DType, n: usize, value: f64) -> Result<()> {
    let target = p.target;
    let (bits, expr) = target.value_word(p.op, value, dtype, 1)?;
    let info = target.info(p.op, &[n, bits as usize], &[])?;
    p.kernel(fill_source(&target, &expr, dtype)?, format!("fill/{dtype}"), Grid::Threads(n), &[out], info)
}

/// `n` copies of `value` as a fresh buffer of `dtype`.
pub(crate) fn fill(target: &Target, value: f64, n: usize, dtype: DType) -> Result<Program> {
    let mut p = Program::new(target, "full", dtype, n);
    fill_into(&mut p, Program::OUT, dtype, n, value)?;
    Ok(p)
}

pub(crate) fn copy_source(target: &Target, from: DType, to: DType) -> Result<KernelSource> {
    let (t, o) = (target.elem_type("copy", from)?, target.elem_type("copy", to)?);
    let convert = target.convert_expr(from, to)?;
    let tmpl = template(target, rnn_kernels::cuda::COPY, rnn_kernels::wgsl::COPY);
    let subs = [("T", t), ("O", o), ("convert", convert.as_str())];
    Ok(KernelSource::new(target, tmpl, &subs, target.needs_half(&[from, to])))
}

/// Appends a launch writing `src` (dtype `from`, seen through `l`) converted to `to` into
/// `out` seen through `ol` (same shape).
pub(crate) fn copy_into(
    p: &mut Program,
    (src, from, l): (Arg, DType, &Layout),
    (out, to, ol): (Arg, DType, &Layout),
) -> Result<()> {
    let target = p.target;
    let n = l.shape().elem_count();
    let info = target.info(p.op, &[n], &[l, ol])?;
    p.kernel(copy_source(&target, from, to)?, format!("copy/{from}/{to}"), Grid::Threads(n), &[src, out], info)
}

/// A contiguous copy of input 0 (dtype `from`, seen through `l`) converted to `to`.
pub(crate) fn copy(target: &Target, from: DType, l: &Layout, to: DType) -> Result<Program> {
    let n = l.shape().elem_count();
    let mut p = Program::new(target, if from == to { "copy" } else { "to_dtype" }, to, n);
    copy_into(&mut p, (Arg::Input(0), from, l), (Program::OUT, to, &Layout::contiguous(l.shape().clone())))?;
    Ok(p)
}

/// The inputs (same dtype, layouts of equal dims but along `dim`) side by side along `dim`.
pub(crate) fn cat(target: &Target, dtype: DType, layouts: &[&Layout], dim: usize) -> Result<Program> {
    let first = layouts.first().ok_or_else(|| Error::invalid("cat", "no tensors given"))?;
    let mut dims = first.dims().to_vec();
    dims[dim] = layouts.iter().map(|l| l.dims()[dim]).sum();
    let out = Layout::contiguous(dims);
    let mut p = Program::new(target, "cat", dtype, out.shape().elem_count());
    let mut offset = 0;
    for (i, l) in layouts.iter().enumerate() {
        let len = l.dims()[dim];
        copy_into(&mut p, (Arg::Input(i), dtype, l), (Program::OUT, dtype, &out.narrow(dim, offset, len)?))?;
        offset += len;
    }
    Ok(p)
}

fn float_only(op: &'static str, dtype: DType) -> Result<()> {
    if !dtype.is_float() {
        let hint = ": elementwise math needs a float tensor";
        return Err(Error::UnsupportedDType { op, dtype, hint });
    }
    Ok(())
}

pub(crate) fn unary_source(target: &Target, op: UnaryOp, dtype: DType) -> Result<KernelSource> {
    float_only(op.name(), dtype)?;
    let (t, c) = (target.elem_type(op.name(), dtype)?, target.compute_type(dtype));
    let (tmpl, expr) = match target.lang {
        Lang::Cuda => (rnn_kernels::cuda::UNARY, op.cuda_expr()),
        Lang::Wgsl => (rnn_kernels::wgsl::UNARY, op.wgsl_expr()),
    };
    Ok(KernelSource::new(target, tmpl, &[("T", t), ("C", c), ("expr", expr)], target.needs_half(&[dtype])))
}

/// Appends a launch writing `op` of `src` (seen through `l`) to the contiguous `out`.
pub(crate) fn unary_into(p: &mut Program, op: UnaryOp, dtype: DType, (src, l): (Arg, &Layout), out: Arg) -> Result<()> {
    let target = p.target;
    let n = l.shape().elem_count();
    let info = target.info(p.op, &[n], &[l])?;
    let variant = format!("unary/{}/{dtype}", op.name());
    p.kernel(
        unary_source(&target, op, dtype)?,
        variant,
        Grid::Threads(target.elementwise_threads(n)),
        &[src, out],
        info,
    )
}

pub(crate) fn unary(target: &Target, op: UnaryOp, dtype: DType, l: &Layout) -> Result<Program> {
    let mut p = Program::new(target, op.name(), dtype, l.shape().elem_count());
    unary_into(&mut p, op, dtype, (Arg::Input(0), l), Program::OUT)?;
    Ok(p)
}

fn same_dtype(op: &'static str, a: DType, b: DType) -> Result<()> {
    if a != b {
        return Err(Error::DTypeMismatch { op, lhs: a, rhs: b });
    }
    Ok(())
}

pub(crate) fn binary_source(target: &Target, op: BinaryOp, dtype: DType) -> Result<KernelSource> {
    let (t, c) = (target.elem_type(op.name(), dtype)?, target.compute_type(dtype));
    let store = target.binary_store(op, dtype)?;
    let tmpl = template(target, rnn_kernels::cuda::BINARY, rnn_kernels::wgsl::BINARY);
    Ok(KernelSource::new(target, tmpl, &[("T", t), ("C", c), ("store", &store)], target.needs_half(&[dtype])))
}

/// Appends a launch writing `op` of two operands (each seen through its layout, one
/// broadcast shape) to the contiguous `out`.
pub(crate) fn binary_into(
    p: &mut Program,
    op: BinaryOp,
    dtype: DType,
    [(a, l), (b, rl)]: [(Arg, &Layout); 2],
    out: Arg,
) -> Result<()> {
    let target = p.target;
    let n = l.shape().elem_count();
    let info = target.info(p.op, &[n], &[l, rl])?;
    let variant = format!("binary/{}/{dtype}", op.name());
    p.kernel(
        binary_source(&target, op, dtype)?,
        variant,
        Grid::Threads(target.elementwise_threads(n)),
        &[a, b, out],
        info,
    )
}

/// `op` of inputs 0 and 1 seen through `l` and `rl` (one broadcast shape).
pub(crate) fn binary(
    target: &Target,
    op: BinaryOp,
    (a, l): (DType, &Layout),
    (b, rl): (DType, &Layout),
) -> Result<Program> {
    same_dtype(op.name(), a, b)?;
    let mut p = Program::new(target, op.name(), a, l.shape().elem_count());
    binary_into(&mut p, op, a, [(Arg::Input(0), l), (Arg::Input(1), rl)], Program::OUT)?;
    Ok(p)
}

pub(crate) fn cmp_source(target: &Target, op: CmpOp, dtype: DType) -> Result<KernelSource> {
    let (t, c) = (target.elem_type(op.name(), dtype)?, target.compute_type(dtype));
    let tmpl = template(target, rnn_kernels::cuda::CMP, rnn_kernels::wgsl::CMP);
    // Where an operand is NaN (WGSL's template spells IEEE's rule out): only != holds.
    let nan = if op == CmpOp::Ne { "1u" } else { "0u" };
    let subs = [("T", t), ("C", c), ("op", op.symbol()), ("nan", nan)];
    Ok(KernelSource::new(target, tmpl, &subs, target.needs_half(&[dtype])))
}

/// A u8 mask of `a op b`.
pub(crate) fn cmp(target: &Target, op: CmpOp, (a, l): (DType, &Layout), (b, rl): (DType, &Layout)) -> Result<Program> {
    same_dtype(op.name(), a, b)?;
    let n = l.shape().elem_count();
    let mut p = Program::new(target, op.name(), DType::U8, n);
    let info = target.info(op.name(), &[n], &[l, rl])?;
    let args = [Arg::Input(0), Arg::Input(1), Program::OUT];
    p.kernel(cmp_source(target, op, a)?, format!("cmp/{}/{a}", op.name()), Grid::Threads(n), &args, info)?;
    Ok(p)
}

pub(crate) fn where_source(target: &Target, cond: DType, dtype: DType) -> Result<KernelSource> {
    let (k, t) = (target.elem_type("where_cond", cond)?, target.elem_type("where_cond", dtype)?);
    let tmpl = template(target, rnn_kernels::cuda::WHERE, rnn_kernels::wgsl::WHERE);
    Ok(KernelSource::new(target, tmpl, &[("K", k), ("T", t)], target.needs_half(&[dtype])))
}

/// `cond != 0 ? t : f` of inputs 0 (cond), 1 and 2, all of one broadcast shape.
pub(crate) fn where_cond(
    target: &Target,
    (c, l): (DType, &Layout),
    (t, tl): (DType, &Layout),
    (f, fl): (DType, &Layout),
) -> Result<Program> {
    same_dtype("where_cond", t, f)?;
    if c.is_float() {
        let hint = ": the condition must be u8, u32 or i64";
        return Err(Error::UnsupportedDType { op: "where_cond", dtype: c, hint });
    }
    let n = l.shape().elem_count();
    let mut p = Program::new(target, "where_cond", t, n);
    let info = target.info("where_cond", &[n], &[l, tl, fl])?;
    let args = [Arg::Input(0), Arg::Input(1), Arg::Input(2), Program::OUT];
    p.kernel(where_source(target, c, t)?, format!("where/{c}/{t}"), Grid::Threads(n), &args, info)?;
    Ok(p)
}
