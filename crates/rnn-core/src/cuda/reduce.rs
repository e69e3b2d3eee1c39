//! Reductions and softmax. Both view the input as two layouts: the kept dims (with the
//! input's start offset) and the reduced dims (start 0), each with adjacent dims merged, so
//! that element `j` of output `o` is at `kept(o) + reduced(j)`.
//!
//! Semantics follow `cpu/reduce.rs`: float sums accumulate in f64 for f32 and f64 (as the
//! CPU's) and in f32 for the half types, integer sums are exact and saturate to the dtype,
//! max / min and their positions let NaN win and keep the first of equal elements, and an
//! empty reduction gives the CPU's identity values.

use cudarc::driver::LaunchConfig;
use rnn_kernels::cuda;

use super::dtype::{c_type, compute_type};
use super::launch::{index_fn, info, kernel_source, Grid, KernelSource, BLOCK};
use super::storage::CudaStorage;
use crate::op::ReduceOp;
use crate::storage::BackendStorage;
use crate::{DType, Error, Layout, Result};

/// Reductions of at most this many elements run one thread per output.
const PER_THREAD_MAX: usize = 32;
/// Reductions of at most this many elements run one warp per output; longer ones one block.
const PER_WARP_MAX: usize = 1024;
/// Outputs from which a reduction whose outputs are adjacent in memory (and its elements
/// not) runs one thread per output: the threads of a warp then read adjacent elements.
const PER_THREAD_OUTPUTS: usize = 16384;
/// Blocks a long reduction of few outputs is spread over, at most: each output is split
/// into parts of at least `PART_MIN` elements, reduced by one block each, then merged.
const SPLIT_BLOCKS: usize = 1024;
const PART_MIN: usize = 16384;
/// Bytes of one partial result (the largest accumulator: a 128-bit sum, or a value and
/// its position).
const PART_BYTES: usize = 16;
/// Most blocks of one launch (grid-stride loops cover the rest).
const MAX_BLOCKS: usize = 1 << 20;

/// The work split of a reduction (`mode` in reduce.cu).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mode {
    Thread = 0,
    Warp = 1,
    Block = 2,
    Parts = 3,
    Merge = 4,
}

/// Every reduction, for `variants`.
const OPS: [ReduceOp; 5] = [ReduceOp::Sum, ReduceOp::Max, ReduceOp::Min, ReduceOp::ArgMax, ReduceOp::ArgMin];

/// The layouts of the dims of `l` not in `dims` (with `l`'s start offset) and of `dims`
/// (sorted; start 0), each merged, with the number of outputs (the kept dims' product, 1
/// when none) and of elements each output reduces.
fn split_layouts(l: &Layout, dims: &[usize]) -> (Layout, Layout, usize, usize) {
    let ((kept_dims, kept_strides), (red_dims, red_strides)) = crate::gpu_shared::kept_and_reduced(l, dims);
    let (outer, r) = (kept_dims.iter().product(), red_dims.iter().product());
    let kept = Layout::new(kept_dims.into(), kept_strides, l.start_offset());
    (kept, Layout::new(red_dims.into(), red_strides, 0), outer, r)
}

/// The reducer struct of reduce.cu computing `op` on `dtype`.
fn reducer(op: ReduceOp, dtype: DType) -> String {
    let t = c_type(dtype);
    match op {
        ReduceOp::Sum => match dtype {
            DType::F16 | DType::BF16 => format!("FloatSum<{t}, float>"),
            DType::F32 | DType::F64 => format!("FloatSum<{t}, double>"),
            DType::U8 | DType::U32 => format!("UnsignedSum<{t}>"),
            DType::I64 => "SignedSum".to_string(),
        },
        _ => {
            let greater = matches!(op, ReduceOp::Max | ReduceOp::ArgMax);
            let out = if op.is_arg() { "u32" } else { t };
            format!("Extreme<{t}, {}, {out}, {greater}, {}>", compute_type(dtype), op.is_arg())
        }
    }
}

fn reduce_source(op: ReduceOp, dtype: DType, index_r: &str) -> KernelSource {
    let r = reducer(op, dtype);
    kernel_source(cuda::REDUCE, &[("T", c_type(dtype)), ("R", r.as_str()), ("index_r", index_r)])
}

/// `blocks` blocks of `threads` threads (at least one block; at most `MAX_BLOCKS`).
fn blocks(blocks: usize, threads: u32) -> Grid {
    let grid = blocks.clamp(1, MAX_BLOCKS) as u32;
    Grid::Config(LaunchConfig { grid_dim: (grid, 1, 1), block_dim: (threads, 1, 1), shared_mem_bytes: 0 })
}

/// How to split a reduction of `outer` outputs of `r` elements each, with the number of
/// parts an output is split into (1 unless `Mode::Parts`, which `Mode::Merge` follows).
fn plan(outer: usize, r: usize, kept: &Layout, reduced: &Layout) -> (Mode, usize) {
    let adjacent_outputs = kept.strides().last() == Some(&1);
    if r <= PER_THREAD_MAX || (adjacent_outputs && !reduced.is_contiguous() && outer >= PER_THREAD_OUTPUTS) {
        return (Mode::Thread, 1);
    }
    if r <= PER_WARP_MAX {
        return (Mode::Warp, 1);
    }
    let parts = r.div_ceil(PART_MIN).min(SPLIT_BLOCKS.div_ceil(outer));
    if parts > 1 {
        (Mode::Parts, parts)
    } else {
        (Mode::Block, 1)
    }
}

/// Reduces `x` over `dims` (sorted, unique): one element per kept position in row-major
/// order (the caller reshapes); argmax / argmin give u32 positions within the reduced dims.
pub(crate) fn reduce(x: &CudaStorage, l: &Layout, op: ReduceOp, dims: &[usize]) -> Result<CudaStorage> {
    let (kept, reduced, outer, r) = split_layouts(l, dims);
    let out = x.alloc_like(if op.is_arg() { DType::U32 } else { x.dtype() }, outer)?;
    if outer == 0 {
        return Ok(out);
    }
    let (mode, parts) = plan(outer, r, &kept, &reduced);
    let chunk = r.div_ceil(parts).max(1);
    // The parts the kernel splits each output into (at most `parts`).
    let parts = r.div_ceil(chunk).max(1);
    let source = reduce_source(op, x.dtype(), index_fn(&reduced));
    let launch = |mode: Mode, partial: &CudaStorage, grid: Grid| {
        let words = info(op.name(), &[outer, r, mode as usize, chunk], &[&kept, &reduced])?;
        x.dev().launch(&source, &words, &[x.slice(), out.slice(), partial.slice()], grid)
    };
    let warps = Grid::Threads(outer.saturating_mul(32));
    match mode {
        Mode::Thread => launch(mode, &out, Grid::Threads(outer))?,
        Mode::Warp => launch(mode, &out, warps)?,
        Mode::Block => launch(mode, &out, blocks(outer, BLOCK))?,
        Mode::Parts | Mode::Merge => {
            let partial = x.alloc_like(DType::U8, outer * parts * PART_BYTES)?;
            launch(Mode::Parts, &partial, blocks(outer * parts, BLOCK))?;
            launch(Mode::Merge, &partial, warps)?;
        }
    }
    Ok(out)
}

fn softmax_source(dtype: DType, log: bool) -> KernelSource {
    let subs = [("T", c_type(dtype)), ("C", compute_type(dtype)), ("log", if log { "true" } else { "false" })];
    kernel_source(cuda::SOFTMAX, &subs)
}

/// Softmax (or log-softmax when `log`) along the last dim of `l`, one block per row; the
/// result is contiguous.
pub(crate) fn softmax_last_dim(x: &CudaStorage, l: &Layout, log: bool) -> Result<CudaStorage> {
    let op = if log { "log_softmax" } else { "softmax" };
    if !x.dtype().is_float() {
        return Err(Error::UnsupportedDType { op, dtype: x.dtype(), hint: ": softmax needs a float dtype" });
    }
    let (n, stride) = match (l.dims().last(), l.strides().last()) {
        (Some(&n), Some(&s)) => (n, s),
        _ => (1, 0),
    };
    let last = l.dims().len().checked_sub(1).map_or(Vec::new(), |d| vec![d]);
    let (rows_layout, _, rows, _) = split_layouts(l, &last);
    let out = x.alloc_like(x.dtype(), rows * n)?;
    if rows * n == 0 {
        return Ok(out);
    }
    // A block as wide as the row, up to BLOCK threads: short rows leave no thread idle.
    let threads = (n.min(BLOCK as usize).next_power_of_two() as u32).clamp(32, BLOCK);
    let words = info(op, &[rows, n, stride], &[&rows_layout])?;
    let source = softmax_source(x.dtype(), log);
    x.dev().launch(&source, &words, &[x.slice(), out.slice()], blocks(rows, threads))?;
    Ok(out)
}

/// Every kernel source this module can launch, named, for compile checks.
pub(crate) fn variants() -> Vec<(String, KernelSource)> {
    let mut v = Vec::new();
    for &d in &DType::ALL {
        for op in OPS {
            for index in ["strided_offset", "contiguous_offset"] {
                v.push((format!("reduce_{}_{d}_{index}", op.name()), reduce_source(op, d, index)));
            }
        }
    }
    for &d in DType::ALL.iter().filter(|d| d.is_float()) {
        for log in [false, true] {
            v.push((format!("softmax_{d}_log{log}"), softmax_source(d, log)));
        }
    }
    v
}
