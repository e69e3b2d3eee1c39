//! Reductions over any set of dims. The input is seen as `[outer, r, inner]` with the
//! reduced dims merged into `r` (copying first when they are not one contiguous block).

use std::ops::Range;

use rayon::prelude::*;

use super::parallel::{par_fill, PAR_WORK};
use super::simd::zip_assign;
use super::CpuStorage;
use crate::op_table::ReduceOp;
use crate::{Layout, Result, WithDType};

/// Accumulation of one reduction: `step` folds an element (at position `j` of the reduced
/// block) into the accumulator, `merge` joins two partial results in order.
trait Reducer<T>: Sync {
    type Acc: Copy + Send + Sync;
    type Out: Copy + bytemuck::Zeroable + Send;
    fn init(&self) -> Self::Acc;
    fn step(&self, acc: Self::Acc, x: T, j: u32) -> Self::Acc;
    fn merge(&self, a: Self::Acc, b: Self::Acc) -> Self::Acc;
    fn finish(&self, acc: Self::Acc) -> Self::Out;
    /// Folds a contiguous run; reducers override it with a vectorizable loop.
    fn fold(&self, xs: &[T], first: u32) -> Self::Acc
    where
        T: Copy,
    {
        xs.iter().enumerate().fold(self.init(), |acc, (j, &x)| self.step(acc, x, first + j as u32))
    }
}

struct Sum;
impl<T: WithDType + Default> Reducer<T> for Sum {
    type Acc = f64;
    type Out = T;
    fn init(&self) -> f64 {
        0.0
    }
    fn step(&self, acc: f64, x: T, _: u32) -> f64 {
        acc + x.to_f64()
    }
    fn merge(&self, a: f64, b: f64) -> f64 {
        a + b
    }
    fn finish(&self, acc: f64) -> T {
        T::from_f64(acc)
    }
    fn fold(&self, xs: &[T], _: u32) -> f64 {
        if T::DTYPE == crate::DType::F32 {
            // SAFETY: only f32 has the dtype F32, so the slice is a valid &[f32].
            let xs = unsafe { std::slice::from_raw_parts(xs.as_ptr() as *const f32, xs.len()) };
            return super::simd::sum_f32(xs);
        }
        // Independent sums: vectorizes, and is more accurate than one long chain.
        super::simd::fold_lanes(xs, 0.0, |x: T| x.to_f64(), |a, b| a + b)
    }
}

/// Exact sums of integers (in 128 bits), as i64 (PyTorch's dtype for them), saturated
/// beyond its range as the GPU kernels do.
struct IntSum;
impl<T: IntElem> Reducer<T> for IntSum {
    type Acc = i128;
    type Out = i64;
    fn init(&self) -> i128 {
        0
    }
    fn step(&self, acc: i128, x: T, _: u32) -> i128 {
        acc + x.wide()
    }
    fn merge(&self, a: i128, b: i128) -> i128 {
        a + b
    }
    fn finish(&self, acc: i128) -> i64 {
        acc.clamp(i64::MIN.into(), i64::MAX.into()) as i64
    }
}

/// The integer dtypes, widened for exact sums.
trait IntElem: WithDType + Default {
    fn wide(self) -> i128;
}

macro_rules! int_elem {
    ($($t:ty),*) => {$(
        impl IntElem for $t {
            fn wide(self) -> i128 {
                i128::from(self)
            }
        }
    )*};
}
int_elem!(u8, u32, i64);

/// One step of max (`GREATER`) or min: the best value so far and its position.
fn best_step<T: WithDType, const GREATER: bool>(acc: (T, u32), x: T, j: u32) -> (T, u32) {
    let better = if GREATER { x > acc.0 } else { x < acc.0 };
    // NaN wins, as in PyTorch: a NaN anywhere makes max and min NaN.
    if better || acc.1 == u32::MAX || (x.is_nan() && !acc.0.is_nan()) {
        (x, j)
    } else {
        acc
    }
}

/// Max (`GREATER`) or min, returning the value (`ARG` false) or its position.
struct Extreme<const GREATER: bool, const ARG: bool>;
impl<T: WithDType + Default + bytemuck::Zeroable, const G: bool, const A: bool> Reducer<T> for Extreme<G, A> {
    type Acc = (T, u32);
    /// The value's bits or the position, as the wider of the two (see `reduce_typed`).
    type Out = (T, u32);
    fn init(&self) -> (T, u32) {
        // Saturating casts make this the lowest (highest) value of every dtype.
        (T::from_f64(if G { f64::NEG_INFINITY } else { f64::INFINITY }), u32::MAX)
    }
    fn step(&self, acc: (T, u32), x: T, j: u32) -> (T, u32) {
        best_step::<T, G>(acc, x, j)
    }
    fn merge(&self, a: (T, u32), b: (T, u32)) -> (T, u32) {
        if b.1 == u32::MAX {
            return a;
        }
        self.step(a, b.0, b.1)
    }
    fn finish(&self, acc: (T, u32)) -> (T, u32) {
        acc
    }
}

/// Reduces `x` = `[outer, r, inner]` (contiguous) to `[outer, inner]`.
fn reduce3<T: Copy + Sync, R: Reducer<T>>(
    x: &[T],
    outer: usize,
    r: usize,
    inner: usize,
    red: &R,
) -> Result<Vec<R::Out>> {
    let mut out = super::parallel::zeroed_vec(outer * inner)?;
    // `PAR_WORK` here, not `par_work()`: these two splits set the order of the sums, which
    // must not depend on where the op runs from (the split over outputs below does not).
    if inner == 1 && outer < 2 * rayon::current_num_threads() && r >= PAR_WORK {
        // Few long rows: split each row over the threads instead.
        for (o, row) in out.iter_mut().zip(x.chunks(r)) {
            let acc = row
                .par_chunks(PAR_WORK / 4)
                .enumerate()
                .map(|(c, part)| fold(part, (c * PAR_WORK / 4) as u32, red))
                .reduce(|| red.init(), |a, b| red.merge(a, b));
            *o = red.finish(acc);
        }
        return Ok(out);
    }
    if outer == 1 && inner > 1 && r >= inner.max(2 * rayon::current_num_threads()) && r * inner >= PAR_WORK / 8 {
        return Ok(columns_by_row_parts(x, r, inner, red));
    }
    par_fill(&mut out, r, |chunk, first| {
        if inner == 1 {
            for (k, o) in chunk.iter_mut().enumerate() {
                *o = red.finish(fold(&x[(first + k) * r..(first + k + 1) * r], 0, red));
            }
            return;
        }
        let mut k = 0;
        while k < chunk.len() {
            // One run of outputs sharing the outer index: accumulate rows of `inner`.
            let (o, i0) = ((first + k) / inner, (first + k) % inner);
            let len = (inner - i0).min(chunk.len() - k);
            let mut acc = vec![red.init(); len];
            fold_rows(&mut acc, &x[o * r * inner + i0..], 0..r, inner, red);
            for (dst, a) in chunk[k..k + len].iter_mut().zip(acc) {
                *dst = red.finish(a);
            }
            k += len;
        }
    });
    Ok(out)
}

/// Reduces the `r` rows of `x` (`[r, inner]`, contiguous) to one row: each thread folds a
/// consecutive part of the rows into its own accumulators, and the parts are merged in
/// order. For few outputs over many rows (a bias gradient: `[tokens, n]` summed over the
/// tokens), which the split over outputs below ran on one thread: in a GPT step on 2
/// cores, a 2048 x 512 bias gradient took 410 us that way and 230 us split by rows.
fn columns_by_row_parts<T: Copy + Sync, R: Reducer<T>>(x: &[T], r: usize, inner: usize, red: &R) -> Vec<R::Out> {
    let step = r.div_ceil(rayon::current_num_threads());
    let part = |p: usize| {
        let mut acc = vec![red.init(); inner];
        fold_rows(&mut acc, x, p * step..((p + 1) * step).min(r), inner, red);
        acc
    };
    let parts: Vec<Vec<R::Acc>> = (0..r.div_ceil(step)).into_par_iter().map(part).collect();
    let merged = parts.into_iter().reduce(|a, b| a.into_iter().zip(b).map(|(a, b)| red.merge(a, b)).collect());
    merged.unwrap_or_else(|| vec![red.init(); inner]).into_iter().map(|a| red.finish(a)).collect()
}

/// Folds rows `rows` of `x` (row `j` starts at `j * stride`) into `acc`, one accumulator
/// per column, through `zip_assign`: compiled for this CPU's vector width, as a plain loop
/// is not.
fn fold_rows<T: Copy, R: Reducer<T>>(acc: &mut [R::Acc], x: &[T], rows: Range<usize>, stride: usize, red: &R) {
    for j in rows {
        zip_assign(acc, &x[j * stride..][..acc.len()], &|a, v| red.step(a, v, j as u32));
    }
}

fn fold<T: Copy, R: Reducer<T>>(xs: &[T], first: u32, red: &R) -> R::Acc {
    red.fold(xs, first)
}

/// Sizes `(outer, r, inner)` when `dims` is one contiguous block of a contiguous layout.
fn block_sizes(l: &Layout, dims: &[usize]) -> Option<(usize, usize, usize)> {
    let (first, last) = (*dims.first()?, *dims.last()?);
    if !l.is_contiguous() || last - first + 1 != dims.len() {
        return None;
    }
    let d = l.dims();
    Some((d[..first].iter().product(), d[first..=last].iter().product(), d[last + 1..].iter().product()))
}

impl CpuStorage {
    /// Reduces over `dims` (sorted, unique); the result keeps them with size 1.
    pub fn reduce(&self, l: &Layout, op: ReduceOp, dims: &[usize]) -> Result<CpuStorage> {
        if let Some((outer, r, inner)) = block_sizes(l, dims) {
            return self.reduce_block(l.start_offset(), outer, r, inner, op);
        }
        // Move the reduced dims last and make that contiguous.
        let kept = (0..l.dims().len()).filter(|d| !dims.contains(d));
        let perm: Vec<usize> = kept.chain(dims.iter().copied()).collect();
        let moved = l.permute(&perm)?;
        let r: usize = dims.iter().map(|&d| l.dims()[d]).product();
        // The kept dims' product, not elem_count / r: with r == 0 (an empty reduced dim) the
        // output still has one element (a sum of nothing) per kept position.
        let outer: usize = (0..l.dims().len()).filter(|d| !dims.contains(d)).map(|d| l.dims()[d]).product();
        self.copy_strided(&moved)?.reduce_block(0, outer, r, 1, op)
    }

    fn reduce_block(&self, offset: usize, outer: usize, r: usize, inner: usize, op: ReduceOp) -> Result<CpuStorage> {
        let n = outer * r * inner;
        let shape = (outer, r, inner);
        match (self, op) {
            (CpuStorage::U8(v), ReduceOp::Sum) => {
                Ok(CpuStorage::I64(reduce3(&v[offset..offset + n], outer, r, inner, &IntSum)?))
            }
            (CpuStorage::U32(v), ReduceOp::Sum) => {
                Ok(CpuStorage::I64(reduce3(&v[offset..offset + n], outer, r, inner, &IntSum)?))
            }
            (CpuStorage::I64(v), ReduceOp::Sum) => {
                Ok(CpuStorage::I64(reduce3(&v[offset..offset + n], outer, r, inner, &IntSum)?))
            }
            _ => cpu_each!(self, v => reduce_typed(&v[offset..offset + n], shape, op)),
        }
    }
}

fn reduce_typed<T: WithDType + Default + bytemuck::Zeroable>(
    x: &[T],
    (outer, r, inner): (usize, usize, usize),
    op: ReduceOp,
) -> Result<CpuStorage> {
    let values = |v: Vec<(T, u32)>| T::into_storage(v.into_iter().map(|(x, _)| x).collect());
    // Positions are i64, as PyTorch's. An empty reduction (which `Tensor` refuses) has none:
    // -1, as the GPU kernels give.
    let position = |i: u32| if i == u32::MAX { -1 } else { i64::from(i) };
    let indices = |v: Vec<(T, u32)>| CpuStorage::I64(v.into_iter().map(|(_, i)| position(i)).collect());
    Ok(match op {
        ReduceOp::Sum => T::into_storage(reduce3(x, outer, r, inner, &Sum)?),
        ReduceOp::Max => values(reduce3(x, outer, r, inner, &Extreme::<true, false>)?),
        ReduceOp::Min => values(reduce3(x, outer, r, inner, &Extreme::<false, false>)?),
        ReduceOp::ArgMax => indices(reduce3(x, outer, r, inner, &Extreme::<true, true>)?),
        ReduceOp::ArgMin => indices(reduce3(x, outer, r, inner, &Extreme::<false, true>)?),
    })
}

#[cfg(test)]
mod tests {
    use super::{reduce3, Extreme, Sum};

    /// Columns split by rows over two threads reduce as one pass over each column does:
    /// sums exactly (the values are exact in binary), the max and its first position, NaN
    /// winning, including a max repeated in both parts.
    #[test]
    fn row_parts_match_one_pass() {
        let (r, inner) = (4099, 64);
        let mut x: Vec<f32> = (0..r * inner).map(|i| (i * 7919 % 1000) as f32 / 4.0 - 125.0).collect();
        x[10 * inner + 3] = 500.0;
        x[(r - 5) * inner + 3] = 500.0;
        x[(r - 2) * inner + 5] = f32::NAN;
        let run = |threads: usize| {
            let pool = rayon::ThreadPoolBuilder::new().num_threads(threads).build().unwrap();
            pool.install(|| {
                let sums = reduce3(&x, 1, r, inner, &Sum).unwrap();
                let best = reduce3(&x, 1, r, inner, &Extreme::<true, true>).unwrap();
                let bits: Vec<(u32, u32)> = best.into_iter().map(|(v, j)| (v.to_bits(), j)).collect();
                (sums.iter().map(|s: &f32| s.to_bits()).collect::<Vec<_>>(), bits)
            })
        };
        let (one, two) = (run(1), run(2));
        assert_eq!(one, two);
        assert_eq!(two.1[3], (500f32.to_bits(), 10));
        assert!(f32::from_bits(two.1[5].0).is_nan() && two.1[5].1 == (r - 2) as u32);
        let col0: f64 = (0..r).map(|j| f64::from(x[j * inner])).sum();
        assert_eq!(f32::from_bits(two.0[0]), col0 as f32);
    }
}
