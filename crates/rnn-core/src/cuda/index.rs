//! index_select, gather and scatter_add, one thread per element. The kernels also check
//! every index: the first position (in the order the CPU walks the ids) holding one out of
//! range is recorded in a flag word, read back after the launch and reported as the CPU
//! reports it. Such a position moves nothing, so no kernel reads or writes out of bounds.

use rnn_kernels::cuda;

use super::dtype::c_type;
use super::elementwise;
use super::launch::{index_fn, info, kernel_source, Grid, KernelSource};
use super::storage::CudaStorage;
use crate::cpu::strided::StridedIndex;
use crate::cpu::CpuStorage;
use crate::storage::BackendStorage;
use crate::{DType, Error, Layout, Result, Shape};

/// The dtypes indices may have (as on the CPU).
const ID_DTYPES: [DType; 3] = [DType::U8, DType::U32, DType::I64];

/// `[outer, size, inner]` around `dim`.
fn split_at(dims: &[usize], dim: usize) -> (usize, usize, usize) {
    (dims[..dim].iter().product(), dims[dim], dims[dim + 1..].iter().product())
}

/// An error unless `ids` holds u8, u32 or i64 indices.
fn check_id_dtype(op: &'static str, ids: &CudaStorage) -> Result<()> {
    if ids.dtype().is_float() {
        return Err(Error::UnsupportedDType { op, dtype: ids.dtype(), hint: ": indices must be u8, u32 or i64" });
    }
    Ok(())
}

/// A fresh flag word on `x`'s device holding all ones (no position out of range yet); the
/// kernels see it as a u64.
fn new_flag(x: &CudaStorage) -> Result<CudaStorage> {
    elementwise::fill(x.dev(), -1.0, 1, DType::I64)
}

/// `Err(IndexOutOfRange)` with the index at the position `flag` holds, when it holds one.
/// `il` is the layout the kernel checked the ids through; `size` and `shape` are reported.
fn check_flag(
    op: &'static str,
    flag: &CudaStorage,
    ids: &CudaStorage,
    il: &Layout,
    size: usize,
    shape: &Shape,
) -> Result<()> {
    let position = match flag.to_cpu()? {
        CpuStorage::I64(v) if v.len() == 1 => v[0],
        _ => return Err(Error::Msg(format!("cuda: {op}: unreadable index check"))),
    };
    if position == -1 {
        return Ok(());
    }
    let offsets = StridedIndex::new(il).skip(position as usize).take(1);
    let index = ids.to_cpu()?.indices_at(op, offsets)?.first().copied().unwrap_or_default();
    Err(Error::IndexOutOfRange { op, index, size, shape: shape.clone() })
}

fn gather_source(dtype: DType, id_dtype: DType, index_x: &str) -> KernelSource {
    kernel_source(cuda::GATHER, &[("T", c_type(dtype)), ("K", c_type(id_dtype)), ("index_x", index_x)])
}

/// `out[o, j, k] = x[o, ids[o, j, k], k]` along `dim`, reading the ids through `read` (of
/// the output's shape) and range-checking them through `check` (`None`: through `read`).
fn gather_with(
    op: &'static str,
    (x, l): (&CudaStorage, &Layout),
    ids: &CudaStorage,
    read: &Layout,
    check: Option<&Layout>,
    dim: usize,
) -> Result<CudaStorage> {
    check_id_dtype(op, ids)?;
    let size = l.dims()[dim];
    let (_, m, inner) = split_at(read.dims(), dim);
    let n = read.shape().elem_count();
    let (check, same) = (check.unwrap_or(read), check.is_none());
    let count = check.shape().elem_count();
    let out = x.alloc_like(x.dtype(), n)?;
    if n.max(count) == 0 {
        return Ok(out);
    }
    let flag = new_flag(x)?;
    let source = gather_source(x.dtype(), ids.dtype(), index_fn(l));
    let words = info(op, &[n, m, size, inner, count, usize::from(same)], &[l, read, check])?;
    let buffers = [x.slice(), ids.slice(), out.slice(), flag.slice()];
    x.dev().launch(&source, &words, &buffers, Grid::Threads(n.max(count)))?;
    check_flag(op, &flag, ids, check, size, l.shape())?;
    Ok(out)
}

/// The slices `ids` (a 1-D tensor) names along `dim`.
pub(crate) fn index_select(
    x: &CudaStorage,
    l: &Layout,
    ids: &CudaStorage,
    il: &Layout,
    dim: usize,
) -> Result<CudaStorage> {
    let read = crate::gpu_shared::index_select_ids(l, il, dim)?;
    gather_with("index_select", (x, l), ids, &read, Some(il), dim)
}

/// `out[.., j, ..] = x[.., ids[.., j, ..], ..]` along `dim`; `ids` has the output's shape.
pub(crate) fn gather(x: &CudaStorage, l: &Layout, ids: &CudaStorage, il: &Layout, dim: usize) -> Result<CudaStorage> {
    gather_with("gather", (x, l), ids, il, None, dim)
}

fn scatter_add_source(dtype: DType, id_dtype: DType, index_src: &str) -> KernelSource {
    kernel_source(cuda::SCATTER_ADD, &[("T", c_type(dtype)), ("K", c_type(id_dtype)), ("index_src", index_src)])
}

/// A copy of `x` with `src` added at the positions `ids` names along `dim`.
pub(crate) fn scatter_add(
    x: &CudaStorage,
    l: &Layout,
    ids: &CudaStorage,
    il: &Layout,
    src: &CudaStorage,
    sl: &Layout,
    dim: usize,
) -> Result<CudaStorage> {
    let op = "scatter_add";
    if src.dtype() != x.dtype() {
        return Err(Error::DTypeMismatch { op, lhs: x.dtype(), rhs: src.dtype() });
    }
    check_id_dtype(op, ids)?;
    let size = l.dims()[dim];
    let (_, m, inner) = split_at(il.dims(), dim);
    let n = il.shape().elem_count();
    let out = crate::gpu_shared::copy(x, l, x.dtype())?;
    if n == 0 {
        return Ok(out);
    }
    let flag = new_flag(x)?;
    let source = scatter_add_source(x.dtype(), ids.dtype(), index_fn(sl));
    let buffers = [ids.slice(), src.slice(), out.slice(), flag.slice()];
    x.dev().launch(&source, &info(op, &[n, m, size, inner], &[il, sl])?, &buffers, Grid::Threads(n))?;
    check_flag(op, &flag, ids, il, size, l.shape())?;
    Ok(out)
}

/// Every kernel source this module can launch, named, for compile checks.
pub(crate) fn variants() -> Vec<(String, KernelSource)> {
    let mut v = Vec::new();
    for &d in &DType::ALL {
        for k in ID_DTYPES {
            for index in ["strided_offset", "contiguous_offset"] {
                v.push((format!("gather_{d}_{k}_{index}"), gather_source(d, k, index)));
                v.push((format!("scatter_add_{d}_{k}_{index}"), scatter_add_source(d, k, index)));
            }
        }
    }
    v
}
