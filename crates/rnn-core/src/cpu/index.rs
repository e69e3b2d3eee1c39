//! index_select, gather and scatter_add. Indices may be u8, u32 or i64; every index is
//! range-checked before any element moves, so a bad index is an error, never a crash.

use super::simd::zip_assign;
use super::strided::StridedIndex;
use super::unary::contiguous_slice;
use super::CpuStorage;
use crate::num::Elem;
use crate::{Error, Layout, Result, Shape};

/// `[outer, size, inner]` around `dim`.
fn split_at(dims: &[usize], dim: usize) -> (usize, usize, usize) {
    (dims[..dim].iter().product(), dims[dim], dims[dim + 1..].iter().product())
}

/// Indices as usize, each checked against `size`.
fn checked_ids(op: &'static str, ids: &CpuStorage, l: &Layout, size: usize, shape: &Shape) -> Result<Vec<usize>> {
    let raw = ids.indices_at(op, StridedIndex::new(l))?;
    raw.into_iter()
        .map(|i| {
            if i < 0 || i as usize >= size {
                Err(Error::IndexOutOfRange { op, index: i, size, shape: shape.clone() })
            } else {
                Ok(i as usize)
            }
        })
        .collect()
}

fn index_select_typed<T: Copy + Default>(
    x: &[T],
    (outer, _, inner): (usize, usize, usize),
    ids: &[usize],
    size: usize,
) -> Vec<T> {
    let mut out = Vec::with_capacity(outer * ids.len() * inner);
    for o in 0..outer {
        for &i in ids {
            out.extend_from_slice(&x[(o * size + i) * inner..][..inner]);
        }
    }
    out
}

/// `out[o, j, k] = x[o, ids[o, j, k], k]` with `ids` of shape `[outer, m, inner]`.
fn gather_typed<T: Copy + Default>(
    x: &[T],
    size: usize,
    ids: &[usize],
    (outer, m, inner): (usize, usize, usize),
) -> Vec<T> {
    let mut out = Vec::with_capacity(ids.len());
    for o in 0..outer {
        for j in 0..m {
            for k in 0..inner {
                out.push(x[(o * size + ids[(o * m + j) * inner + k]) * inner + k]);
            }
        }
    }
    out
}

/// `dst[o, ids[o, j, k], k] += src[o, j, k]`. With `runs`, `ids` holds only the `m` ids
/// along the dim (the same for every `o` and `k`, see `repeated_along`), and whole runs of
/// `inner` elements are added at once: the same additions in the same order per element.
fn scatter_add_typed<T: Elem>(
    dst: &mut [T],
    size: usize,
    ids: &[usize],
    src: &[T],
    (outer, m, inner): (usize, usize, usize),
    runs: bool,
) {
    for o in 0..outer {
        for j in 0..m {
            let s = (o * m + j) * inner;
            if runs {
                let run = &mut dst[(o * size + ids[j]) * inner..][..inner];
                zip_assign(run, &src[s..s + inner], &|d: T, v: T| d.add(v));
                continue;
            }
            for k in 0..inner {
                let d = &mut dst[(o * size + ids[s + k]) * inner + k];
                *d = d.add(src[s + k]);
            }
        }
    }
}

/// When the index layout `l` repeats one vector along `dim` (every other dim of stride 0
/// or size 1, as the gradient of `index_select` broadcasts its ids), that vector's layout:
/// then `m` indices are read and checked, not one per element.
fn repeated_along(l: &Layout, dim: usize) -> Option<Layout> {
    let (dims, strides) = (l.dims(), l.strides());
    let repeats = (0..dims.len()).all(|d| d == dim || strides[d] == 0 || dims[d] == 1);
    repeats.then(|| Layout::new(Shape::from(vec![dims[dim]]), vec![strides[dim]], l.start_offset()))
}

impl CpuStorage {
    /// Picks the slices `ids` (a 1-D tensor) along `dim`.
    pub fn index_select(&self, l: &Layout, ids: &CpuStorage, il: &Layout, dim: usize) -> Result<CpuStorage> {
        let sizes = split_at(l.dims(), dim);
        let ids = checked_ids("index_select", ids, il, sizes.1, l.shape())?;
        Ok(cpu_map_same!(self, v => index_select_typed(&contiguous_slice(v, l)?, sizes, &ids, sizes.1)))
    }

    /// `out[.., j, ..] = x[.., ids[.., j, ..], ..]` along `dim`; `ids` has the output's shape.
    pub fn gather(&self, l: &Layout, ids: &CpuStorage, il: &Layout, dim: usize) -> Result<CpuStorage> {
        let size = l.dims()[dim];
        let ids = checked_ids("gather", ids, il, size, l.shape())?;
        let sizes = split_at(il.dims(), dim);
        Ok(cpu_map_same!(self, v => gather_typed(&contiguous_slice(v, l)?, size, &ids, sizes)))
    }

    /// A copy of `self` with `src` added at the positions `ids` names along `dim`.
    pub fn scatter_add(
        &self,
        l: &Layout,
        ids: &CpuStorage,
        il: &Layout,
        src: &CpuStorage,
        sl: &Layout,
        dim: usize,
    ) -> Result<CpuStorage> {
        let size = l.dims()[dim];
        let runs = repeated_along(il, dim);
        let ids = checked_ids("scatter_add", ids, runs.as_ref().unwrap_or(il), size, l.shape())?;
        let sizes = split_at(il.dims(), dim);
        macro_rules! arm {
            ($($v:ident),*) => {
                match (self, src) {
                    $((CpuStorage::$v(d), CpuStorage::$v(s)) => {
                        let mut out = contiguous_slice(d, l)?.into_owned();
                        scatter_add_typed(&mut out, size, &ids, &contiguous_slice(s, sl)?, sizes, runs.is_some());
                        CpuStorage::$v(out)
                    })*
                    (a, b) => return Err(Error::DTypeMismatch { op: "scatter_add", lhs: a.dtype(), rhs: b.dtype() }),
                }
            };
        }
        Ok(arm!(U8, U32, I64, F16, BF16, F32, F64))
    }
}
