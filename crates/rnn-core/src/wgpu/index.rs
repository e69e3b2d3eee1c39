//! index_select, gather and scatter_add, one thread per element. The kernels also check
//! every index: the first position (in the order the CPU walks the ids) holding one out of
//! range is recorded in a flag word, read back after the launch and reported as the CPU
//! reports it. Such a position moves nothing, so no kernel reads or writes out of bounds.

use rnn_kernels::wgsl;

use super::launch::{info, kernel_source, Grid};
use super::storage::WgpuStorage;
use crate::cpu::strided::StridedIndex;
use crate::cpu::CpuStorage;
use crate::storage::BackendStorage;
use crate::{DType, Error, Layout, Result, Shape};

/// The flag word's value while every index is in range.
const NONE: u32 = u32::MAX;

/// `[outer, size, inner]` around `dim`.
fn split_at(dims: &[usize], dim: usize) -> (usize, usize, usize) {
    (dims[..dim].iter().product(), dims[dim], dims[dim + 1..].iter().product())
}

/// The WGSL type indices are stored as (u8, u32 and i64 ids only, as on the CPU).
fn id_type(op: &'static str, ids: &WgpuStorage) -> Result<&'static str> {
    if ids.dtype().is_float() {
        return Err(Error::UnsupportedDType { op, dtype: ids.dtype(), hint: ": indices must be u8, u32 or i64" });
    }
    ids.wgsl_type(op)
}

/// A fresh flag word on `x`'s device, holding `NONE`.
fn new_flag(x: &WgpuStorage) -> Result<WgpuStorage> {
    WgpuStorage::from_cpu(&CpuStorage::U32(vec![NONE]), x.ctx().ordinal)
}

/// `Err(IndexOutOfRange)` with the index at the position `flag` holds, when it holds one.
/// `il` is the layout the kernel checked the ids through; `size` and `shape` are reported.
fn check_flag(
    op: &'static str,
    flag: &WgpuStorage,
    ids: &WgpuStorage,
    il: &Layout,
    size: usize,
    shape: &Shape,
) -> Result<()> {
    let position = match flag.to_cpu()? {
        CpuStorage::U32(v) if v.len() == 1 => v[0],
        _ => return Err(Error::Msg(format!("wgpu: {op}: unreadable index check"))),
    };
    if position == NONE {
        return Ok(());
    }
    let offsets = StridedIndex::new(il).skip(position as usize).take(1);
    let index = ids.to_cpu()?.indices_at(op, offsets)?.first().copied().unwrap_or_default();
    Err(Error::IndexOutOfRange { op, index, size, shape: shape.clone() })
}

/// `out[o, j, k] = x[o, ids[o, j, k], k]` along `dim`, reading the ids through `read` (of
/// the output's shape) and range-checking them through `check`.
fn gather_with(
    op: &'static str,
    (x, l): (&WgpuStorage, &Layout),
    ids: &WgpuStorage,
    read: &Layout,
    check: &Layout,
    dim: usize,
) -> Result<WgpuStorage> {
    let (t, k) = (x.wgsl_type(op)?, id_type(op, ids)?);
    let size = l.dims()[dim];
    let (_, m, inner) = split_at(read.dims(), dim);
    let (n, count) = (read.shape().elem_count(), check.shape().elem_count());
    let out = x.alloc_like(x.dtype(), n)?;
    let flag = new_flag(x)?;
    let source = kernel_source(wgsl::GATHER, &[("T", t), ("K", k)], x.is_f16());
    let words = info(op, &[n, m, size, inner, count], &[l, read, check])?;
    let buffers = [x.buffer(), ids.buffer(), out.buffer(), flag.buffer()];
    x.ctx().launch(&source, &words, &buffers, Grid::Threads(n.max(count)))?;
    check_flag(op, &flag, ids, check, size, l.shape())?;
    Ok(out)
}

/// The slices `ids` (a 1-D tensor) names along `dim`.
pub(crate) fn index_select(
    x: &WgpuStorage,
    l: &Layout,
    ids: &WgpuStorage,
    il: &Layout,
    dim: usize,
) -> Result<WgpuStorage> {
    let read = crate::gpu_shared::index_select_ids(l, il, dim)?;
    gather_with("index_select", (x, l), ids, &read, il, dim)
}

/// `out[.., j, ..] = x[.., ids[.., j, ..], ..]` along `dim`; `ids` has the output's shape.
pub(crate) fn gather(x: &WgpuStorage, l: &Layout, ids: &WgpuStorage, il: &Layout, dim: usize) -> Result<WgpuStorage> {
    gather_with("gather", (x, l), ids, il, il, dim)
}

/// The WGSL expression of the word `old` with `v` added to element `e`, wrapping integers
/// as the CPU does (u8 to 8 bits; i64 to 32 bits, its stored width).
fn add_expr(dtype: DType) -> &'static str {
    match dtype {
        DType::F32 => "bitcast<u32>(bitcast<f32>(old) + v)",
        DType::F16 => "half_added(old, e, f32(v))",
        DType::U8 => "(old + v) & 255u",
        DType::U32 => "old + v",
        _ => "old + bitcast<u32>(v)",
    }
}

/// A copy of `x` with `src` added at the positions `ids` names along `dim`.
pub(crate) fn scatter_add(
    x: &WgpuStorage,
    l: &Layout,
    ids: &WgpuStorage,
    il: &Layout,
    src: &WgpuStorage,
    sl: &Layout,
    dim: usize,
) -> Result<WgpuStorage> {
    let op = "scatter_add";
    if src.dtype() != x.dtype() {
        return Err(Error::DTypeMismatch { op, lhs: x.dtype(), rhs: src.dtype() });
    }
    let (t, k) = (x.wgsl_type(op)?, id_type(op, ids)?);
    let size = l.dims()[dim];
    let (_, m, inner) = split_at(il.dims(), dim);
    let n = il.shape().elem_count();
    let out = crate::gpu_shared::copy(x, l, x.dtype())?;
    let flag = new_flag(x)?;
    let per_word = if x.is_f16() { "2u" } else { "1u" };
    let subs = [("T", t), ("K", k), ("add", add_expr(x.dtype())), ("per_word", per_word)];
    let source = kernel_source(wgsl::SCATTER_ADD, &subs, x.is_f16());
    let buffers = [ids.buffer(), src.buffer(), out.buffer(), flag.buffer()];
    x.ctx().launch(&source, &info(op, &[n, m, size, inner], &[il, sl])?, &buffers, Grid::Threads(n))?;
    check_flag(op, &flag, ids, il, size, l.shape())?;
    Ok(out)
}
