//! A right operand whose columns are contiguous (the transposed weight of `x @ wᵀ`, every
//! Linear layer's forward) and a multiple of 1 KiB apart is copied to columns one cache line
//! further apart before the `gemm` crate multiplies it.
//!
//! Why: for a row-major output the crate packs `bᵀ` as its kernel's left operand, in panels
//! of up to 64 columns (f32, AVX-512), reading one element of each column per step along k.
//! Columns 1 KiB apart start in 4 of L1's 64 sets (2 KiB apart: 2; 4 KiB: 1), which hold 12
//! lines each, so a panel evicts what it has just loaded. Measured on a Zen 5 EPYC, f32
//! (bench/results/2026-12-01-padded-columns-2core-amd-epyc.md): the crate alone, one thread,
//! ran 128 x 1024 x 1024 at 104 GFLOP/s as is and 200 padded, 2 x 1024 x 1024 at 3 and 17;
//! `Tensor::linear` on 2 threads went from 200 to 360-405 GFLOP/s at 128 x 1024 x 1024.
//! Strides of 384, 640, 784, 896 or 1000 floats gained nothing from the copy, so those
//! operands are multiplied as they are. Products of 2-4 rows never get here: they run one
//! matrix-vector product per row (`matmul::gemv_rows`), faster still.

use std::mem::MaybeUninit;
use std::ops::Range;

use rayon::prelude::*;

use super::matmul::Operand;
use crate::WithDType;

/// Column strides (in bytes) that are a multiple of this many conflict in L1.
const CONFLICTING_BYTES: usize = 1024;

/// What a padded column adds: one cache line.
const PAD_BYTES: usize = 64;

/// Fewer columns than this fit in L1's sets whatever their stride, or nearly.
const MIN_COLUMNS: usize = 32;

/// Copies of fewer elements than this run on one thread.
const PARALLEL_COPY: usize = 1 << 16;

/// Whether `b` (`k x n`) of an `m x n x k` product has contiguous columns a multiple of
/// [`CONFLICTING_BYTES`] apart, enough of them to conflict. A one-row product is a
/// matrix-vector product, for which the crate packs nothing.
fn conflicts<T>(b: Operand<T>, (m, n, k): (usize, usize, usize)) -> bool {
    let size = std::mem::size_of::<T>();
    b.1 == 1 && b.2 > 0 && (b.2 as usize * size) % CONFLICTING_BYTES == 0 && m >= 2 && n >= MIN_COLUMNS && k >= 2
}

/// The column stride of the copy of `k`-element columns: a cache line past `k`, and one more
/// where that would conflict again (`k` a cache line short of a multiple of 1 KiB, as in a
/// narrowed view of a wider weight).
fn padded_stride<T>(k: usize) -> usize {
    let (size, pad) = (std::mem::size_of::<T>(), PAD_BYTES / std::mem::size_of::<T>());
    let stride = k + pad;
    if (stride * size) % CONFLICTING_BYTES == 0 {
        stride + pad
    } else {
        stride
    }
}

/// The most bytes a padded copy holds at once: a wider operand is copied and multiplied in
/// blocks of columns.
const MAX_COPY_BYTES: usize = 16 << 20;

/// Runs `product(b, 0..n)`; when `b`'s columns conflict (see the module doc), runs it instead
/// on copies of blocks of `b`'s columns, each one cache line further apart: `product(block,
/// columns)` computes the output's `columns` from `block`, their `k x columns.len()` part of
/// `b`. `parallel` copies on the thread pool. A block whose copy cannot be allocated is used
/// as it is.
///
/// SAFETY: `b` must address `k x n` valid elements at its strides.
pub(super) unsafe fn with_padded_columns<T: WithDType>(
    b: Operand<T>,
    (m, n, k): (usize, usize, usize),
    parallel: bool,
    product: impl Fn(Operand<T>, Range<usize>),
) {
    if !conflicts(b, (m, n, k)) {
        return product(b, 0..n);
    }
    let stride = padded_stride::<T>(k);
    let per_block = (MAX_COPY_BYTES / (stride * std::mem::size_of::<T>())).max(1);
    for first in (0..n).step_by(per_block) {
        let columns = first..(first + per_block).min(n);
        // SAFETY: column `first` of `b` exists (the caller's guarantee).
        let block = Operand(unsafe { b.0.offset(first as isize * b.2) }, b.1, b.2);
        let len = columns.len() * stride;
        let Ok(mut copy) = crate::host_pool::with_capacity::<T>(len) else {
            product(block, columns);
            continue;
        };
        // SAFETY: the caller's guarantee; `copy` has room for the block's columns at `stride`.
        unsafe { copy_columns(block, k, &mut copy.spare_capacity_mut()[..len], stride, parallel) };
        // SAFETY: `copy_columns` initialized all `len` elements.
        unsafe { copy.set_len(len) };
        product(Operand(copy.as_ptr(), 1, stride as isize), columns);
        crate::host_pool::release(copy);
    }
}

/// Writes column `j` of `b` (`k` contiguous elements) to `out[j * stride..]`, followed by
/// zeros up to the next column, for every column `out` holds.
///
/// SAFETY: `b` must address `k` contiguous elements for each of `out.len() / stride` columns.
unsafe fn copy_columns<T: WithDType>(
    b: Operand<T>,
    k: usize,
    out: &mut [MaybeUninit<T>],
    stride: usize,
    parallel: bool,
) {
    let columns = out.len() / stride;
    let fill = |(first, block): (usize, &mut [MaybeUninit<T>])| {
        // The whole operand, not its raw pointer field: that is what is `Sync`.
        let b: Operand<T> = b;
        for (j, column) in block.chunks_exact_mut(stride).enumerate() {
            // SAFETY: the caller's guarantee; column `first + j` exists.
            let src = unsafe { b.0.offset((first + j) as isize * b.2) };
            // SAFETY: `k` elements from `src` (the caller's guarantee) into the column's
            // first `k` slots; `column` is `stride >= k` elements long.
            unsafe { std::ptr::copy_nonoverlapping(src, column.as_mut_ptr().cast::<T>(), k) };
            for e in &mut column[k..] {
                e.write(T::zeroed());
            }
        }
    };
    let threads = rayon::current_num_threads();
    if !parallel || threads < 2 || out.len() < PARALLEL_COPY {
        return fill((0, out));
    }
    let per_task = columns.div_ceil(threads);
    out.par_chunks_mut(per_task * stride).enumerate().for_each(|(t, block)| fill((t * per_task, block)));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn which_operands_are_padded() {
        let p = std::ptr::null::<f32>();
        // Transposed weights of 256, 512, 768, 1024 inputs (1, 2, 3, 4 KiB apart).
        for k in [256, 512, 768, 1024] {
            assert!(conflicts(Operand(p, 1, k), (128, 512, k as usize)), "{k}");
        }
        // Strides that spread over L1's sets, and row-major operands, stay as they are.
        for k in [384, 640, 784, 1000] {
            assert!(!conflicts(Operand(p, 1, k), (128, 512, k as usize)), "{k}");
        }
        assert!(!conflicts(Operand(p, 512, 1), (128, 512, 512)));
        // A matrix-vector product, and too few columns to conflict.
        assert!(!conflicts(Operand(p, 1, 512), (1, 512, 512)));
        assert!(!conflicts(Operand(p, 1, 512), (128, 10, 512)));
        // f64: 128 elements are 1 KiB.
        assert!(conflicts(Operand(std::ptr::null::<f64>(), 1, 128), (64, 64, 128)));
    }

    #[test]
    fn the_copy_never_conflicts_again() {
        for k in [1, 240, 256, 496, 512, 1008, 1024] {
            let stride = padded_stride::<f32>(k);
            assert!(stride > k && (stride * 4) % CONFLICTING_BYTES != 0, "{k}: {stride}");
        }
        assert_eq!(padded_stride::<f32>(512), 528);
        assert_eq!(padded_stride::<f64>(120), 136);
    }
}
