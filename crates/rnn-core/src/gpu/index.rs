//! Plans of index_select, gather and scatter_add, one thread per element. The kernels also
//! check every index: the first position (in the order the CPU walks the ids) holding one
//! out of range is recorded in a flag word, read back at the next sync point
//! (`deferred.rs`) and reported as the CPU reports it (`IdCheck`). Such a position moves
//! nothing, so no kernel reads or writes out of bounds.

use super::elementwise::{copy_into, fill_into, template};
use super::plan::{Arg, Grid, IdCheck, KernelSource, Program};
use super::target::{Lang, Target};
use crate::{DType, Error, Layout, Result};

/// The flag word's dtype and its value while every index is in range (all ones).
fn flag(target: &Target) -> (DType, f64) {
    match target.lang {
        Lang::Cuda => (DType::I64, -1.0),
        Lang::Wgsl => (DType::U32, u32::MAX as f64),
    }
}

/// `[outer, size, inner]` around `dim`.
fn split_at(dims: &[usize], dim: usize) -> (usize, usize, usize) {
    (dims[..dim].iter().product(), dims[dim], dims[dim + 1..].iter().product())
}

/// An error unless `ids` holds u8, u32 or i64 indices.
fn check_id_dtype(op: &'static str, ids: DType) -> Result<()> {
    if ids.is_float() {
        return Err(Error::UnsupportedDType { op, dtype: ids, hint: ": indices must be u8, u32 or i64" });
    }
    Ok(())
}

/// A fresh flag word (holding "no bad position yet") and the check reading it afterwards.
pub(crate) fn add_check(p: &mut Program, ids: usize, layout: &Layout, size: usize, x: &Layout) -> Result<Arg> {
    let (dtype, none) = flag(&p.target);
    let flag = p.temps.len();
    let word = p.temp(dtype, 1);
    fill_into(p, word, dtype, 1, none)?;
    p.check = Some(IdCheck { op: p.op, flag, ids, layout: layout.clone(), size, shape: x.shape().clone() });
    Ok(word)
}

pub(crate) fn gather_source(target: &Target, dtype: DType, ids: DType) -> Result<KernelSource> {
    let (t, k) = (target.elem_type("gather", dtype)?, target.elem_type("gather", ids)?);
    let tmpl = template(target, rnn_kernels::cuda::GATHER, rnn_kernels::wgsl::GATHER);
    Ok(KernelSource::new(target, tmpl, &[("T", t), ("K", k)], target.needs_half(&[dtype])))
}

/// `out[o, j, k] = x[o, ids[o, j, k], k]` along `dim` for inputs 0 (x, seen through `l`)
/// and 1 (the ids), reading the ids through `read` (of the output's shape) and
/// range-checking them through `check` (`None`: through `read`).
fn gather_with(
    target: &Target,
    op: &'static str,
    (dtype, l): (DType, &Layout),
    ids: DType,
    (read, check): (&Layout, Option<&Layout>),
    dim: usize,
) -> Result<Program> {
    check_id_dtype(op, ids)?;
    let source = gather_source(target, dtype, ids)?;
    let size = l.dims()[dim];
    let (_, m, inner) = split_at(read.dims(), dim);
    let n = read.shape().elem_count();
    let (check, same) = (check.unwrap_or(read), check.is_none());
    let count = check.shape().elem_count();
    let mut p = Program::new(target, op, dtype, n);
    if n.max(count) == 0 {
        return Ok(p);
    }
    let bad = add_check(&mut p, 1, check, size, l)?;
    let info = target.info(op, &[n, m, size, inner, count, usize::from(same)], &[l, read, check])?;
    let args = [Arg::Input(0), Arg::Input(1), Program::OUT, bad];
    p.kernel(source, format!("gather/{dtype}/{ids}"), Grid::Threads(n.max(count)), &args, info)?;
    Ok(p)
}

/// The slices the 1-D ids (input 1, layout `il`) name along `dim` of input 0.
pub(crate) fn index_select(
    target: &Target,
    x: (DType, &Layout),
    (ids, il): (DType, &Layout),
    dim: usize,
) -> Result<Program> {
    let (&[m], &[stride]) = (il.dims(), il.strides()) else {
        return Err(Error::invalid("index_select", format!("ids of shape {:?} are not 1-D", il.dims())));
    };
    // The ids broadcast to the output's shape, so that output position (o, j, k) reads ids[j].
    let mut dims = x.1.dims().to_vec();
    dims[dim] = m;
    let mut strides = vec![0; dims.len()];
    strides[dim] = stride;
    let read = Layout::new(dims.into(), strides, il.start_offset());
    gather_with(target, "index_select", x, ids, (&read, Some(il)), dim)
}

/// `out[.., j, ..] = x[.., ids[.., j, ..], ..]` along `dim`; the ids have the output's shape.
pub(crate) fn gather(target: &Target, x: (DType, &Layout), (ids, il): (DType, &Layout), dim: usize) -> Result<Program> {
    gather_with(target, "gather", x, ids, (il, None), dim)
}

/// The WGSL expression of the word `old` with `v` added to element `e`, wrapping integers
/// as the CPU does (u8 to 8 bits; i64 to 32 bits, its stored width).
fn wgsl_add_expr(dtype: DType) -> &'static str {
    match dtype {
        DType::F32 => "bitcast<u32>(bitcast<f32>(old) + v)",
        DType::F16 => "half_added(old, e, f32(v))",
        DType::U8 => "(old + v) & 255u",
        DType::U32 => "old + v",
        _ => "old + bitcast<u32>(v)",
    }
}

pub(crate) fn scatter_add_source(target: &Target, dtype: DType, ids: DType) -> Result<KernelSource> {
    let (t, k) = (target.elem_type("scatter_add", dtype)?, target.elem_type("scatter_add", ids)?);
    let half = target.needs_half(&[dtype]);
    Ok(match target.lang {
        Lang::Cuda => KernelSource::new(target, rnn_kernels::cuda::SCATTER_ADD, &[("T", t), ("K", k)], half),
        Lang::Wgsl => {
            let per_word = if dtype == DType::F16 { "2u" } else { "1u" };
            let subs = [("T", t), ("K", k), ("add", wgsl_add_expr(dtype)), ("per_word", per_word)];
            KernelSource::new(target, rnn_kernels::wgsl::SCATTER_ADD, &subs, half)
        }
    })
}

/// A copy of input 0 (x) with input 2 (src) added at the positions input 1 (ids) names
/// along `dim`.
pub(crate) fn scatter_add(
    target: &Target,
    (dtype, l): (DType, &Layout),
    (ids, il): (DType, &Layout),
    (src, sl): (DType, &Layout),
    dim: usize,
) -> Result<Program> {
    let op = "scatter_add";
    if src != dtype {
        return Err(Error::DTypeMismatch { op, lhs: dtype, rhs: src });
    }
    check_id_dtype(op, ids)?;
    let source = scatter_add_source(target, dtype, ids)?;
    let size = l.dims()[dim];
    let (_, m, inner) = split_at(il.dims(), dim);
    let n = il.shape().elem_count();
    let mut p = Program::new(target, op, dtype, l.shape().elem_count());
    copy_into(&mut p, (Arg::Input(0), dtype, l), (Program::OUT, dtype, &Layout::contiguous(l.shape().clone())))?;
    if n == 0 {
        return Ok(p);
    }
    let bad = add_check(&mut p, 1, il, size, l)?;
    let info = target.info(op, &[n, m, size, inner], &[il, sl])?;
    let args = [Arg::Input(1), Arg::Input(2), Program::OUT, bad];
    p.kernel(source, format!("scatter_add/{dtype}/{ids}"), Grid::Threads(n), &args, info)?;
    Ok(p)
}
