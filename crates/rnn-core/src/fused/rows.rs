//! Helpers shared by the row-wise fused ops (norms, softmax-cross-entropy, bias + GELU):
//! reading CPU inputs in the compute type, splitting rows over threads, and giving GPU
//! kernels contiguous inputs.

use std::borrow::Cow;

use rayon::prelude::*;

use crate::cpu::parallel::par_work;
use crate::cpu::unary::contiguous_slice;
use crate::cpu::CpuStorage;
use crate::gpu::elementwise::copy_into;
use crate::gpu::plan::{Arg, Program};
use crate::gpu::target::{Lang, Target};
use crate::num::Float;
use crate::{DType, Error, Layout, Result, WithDType};

/// The compute type of a float dtype: f64 for f64, f32 for the others (half types widen).
pub(crate) trait Compute: Float + WithDType {}
impl Compute for f32 {}
impl Compute for f64 {}

/// The elements of `s` seen through `l`, in row-major order, as `F` (borrowed when `s`
/// already holds contiguous `F`s).
pub(crate) fn compute_slice<'a, F: Compute>(s: &'a CpuStorage, l: &Layout) -> Result<Cow<'a, [F]>> {
    if let Some(v) = F::slice_of(s) {
        return contiguous_slice(v, l);
    }
    let wide = s.to_dtype(l, F::DTYPE)?;
    let v = F::slice_of(&wide).ok_or_else(|| Error::Msg("internal: a cast gave another dtype".into()))?;
    Ok(Cow::Owned(v.to_vec()))
}

/// `v` stored as `dtype` (rounded once from the compute type).
pub(crate) fn store<F: Compute>(v: Vec<F>, dtype: DType) -> Result<CpuStorage> {
    let n = v.len();
    let s = F::into_storage(v);
    if dtype == F::DTYPE {
        return Ok(s);
    }
    s.to_dtype(&Layout::contiguous(n), dtype)
}

/// Splits `rows` rows over threads (when `work_per_row` units each, see `par_work`, are
/// worth it): calls `f(first_row, a_rows, b_rows)` with the matching chunks of `a` (`aw`
/// elements per row) and `b` (`bw` per row), and returns the results in row order.
pub(crate) fn map_row_chunks<A: Send, B: Send, R: Send>(
    rows: usize,
    (a, aw): (&mut [A], usize),
    (b, bw): (&mut [B], usize),
    work_per_row: usize,
    f: impl Fn(usize, &mut [A], &mut [B]) -> R + Sync + Send,
) -> Vec<R> {
    let par_work = par_work();
    if rows.saturating_mul(work_per_row) < par_work || aw == 0 || bw == 0 {
        return vec![f(0, a, b)];
    }
    let threads = rayon::current_num_threads().max(1);
    let per_chunk = rows.div_ceil(threads * 4).max(par_work / 4 / work_per_row.max(1)).max(1);
    a.par_chunks_mut(per_chunk * aw)
        .zip(b.par_chunks_mut(per_chunk * bw))
        .enumerate()
        .map(|(i, (a, b))| f(i * per_chunk, a, b))
        .collect()
}

/// `par_fill` over chunks of whole rows of `width` elements: calls `f(rows, first)` with
/// a chunk of `out` (a multiple of `width` long) and the position of its first element.
pub(crate) fn par_fill_rows<T: Send>(
    out: &mut [T],
    width: usize,
    work_per_item: usize,
    f: impl Fn(&mut [T], usize) + Sync + Send,
) {
    let work = out.len().saturating_mul(work_per_item.max(1));
    let par_work = par_work();
    if work < par_work || width == 0 {
        f(out, 0);
        return;
    }
    let rows = out.len() / width;
    let threads = rayon::current_num_threads().max(1);
    let per_chunk = rows.div_ceil(threads * 4).max(par_work / 4 / work_per_item.max(1) / width).max(1);
    out.par_chunks_mut(per_chunk * width).enumerate().for_each(|(i, c)| f(c, i * per_chunk * width));
}

/// The input `arg` (`dtype`, seen through `l`) as a contiguous buffer and the position of
/// its first element: the input itself when its layout is contiguous, else a copy.
pub(crate) fn contiguous_arg(p: &mut Program, arg: Arg, dtype: DType, l: &Layout) -> Result<(Arg, usize)> {
    if l.is_contiguous() {
        return Ok((arg, l.start_offset()));
    }
    let n = l.shape().elem_count();
    let copy = p.temp(dtype, n);
    copy_into(p, (arg, dtype, l), (copy, dtype, &Layout::contiguous(n)))?;
    Ok((copy, 0))
}

/// A float parameter as one `Info` word: the bits of a double for CUDA kernels (which
/// convert it to their compute type), of an f32 for WGSL ones (which compute in f32).
pub(crate) fn float_word(target: &Target, value: f64) -> usize {
    match target.lang {
        Lang::Cuda => value.to_bits() as usize,
        Lang::Wgsl => (value as f32).to_bits() as usize,
    }
}

/// An error unless `dtype` is a float dtype.
pub(crate) fn float_only(op: &'static str, dtype: DType) -> Result<()> {
    if !dtype.is_float() {
        return Err(Error::UnsupportedDType { op, dtype, hint: ": it needs a float dtype" });
    }
    Ok(())
}
