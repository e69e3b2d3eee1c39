//! Plans of reductions. The input is seen as two layouts: the kept dims (with the input's
//! start offset) and the reduced dims (start 0), each with adjacent dims merged, so that
//! element `j` of output `o` is at `kept(o) + reduced(j)`.
//!
//! Semantics follow `cpu/reduce.rs`: float sums accumulate in f64 for f32 and f64 on CUDA
//! (as the CPU's) and in f32 for the half types and on wgpu; integer sums are exact, i64,
//! saturated to its range (i32's on wgpu, which stores i64 as i32); positions are i64 (see
//! `ReduceOp::out_dtype`); max / min and their positions let NaN win and keep the first of
//! equal elements, and an empty reduction gives the CPU's identity values.

use super::elementwise::template;
use super::plan::{Arg, Grid, KernelSource, Program};
use super::target::{cuda_type, Lang, Target, BLOCK};
use crate::op_table::ReduceOp;
use crate::{DType, Layout, Result};

/// Reductions of at most this many elements run one thread per output.
const PER_THREAD_MAX: usize = 32;
/// Reductions of at most this many elements run one warp per output (where there are warps);
/// longer ones one block.
const PER_WARP_MAX: usize = 1024;
/// Outputs from which a reduction whose outputs are adjacent in memory (and its elements
/// not) runs one thread per output: neighbouring threads then read adjacent elements.
const PER_THREAD_OUTPUTS: usize = 16384;
/// Blocks a long reduction of few outputs is spread over, at most: each output is split
/// into parts of at least `PART_MIN` elements, reduced by one block each, then merged.
const SPLIT_BLOCKS: usize = 1024;
const PART_MIN: usize = 16384;

/// The work split of a reduction (`mode` in reduce.cu and reduce.wgsl).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Mode {
    Thread = 0,
    /// CUDA only.
    Warp = 1,
    Block = 2,
    Parts = 3,
    Merge = 4,
}

impl Mode {
    pub const ALL: [Mode; 5] = [Mode::Thread, Mode::Warp, Mode::Block, Mode::Parts, Mode::Merge];

    pub fn name(self) -> &'static str {
        match self {
            Mode::Thread => "thread",
            Mode::Warp => "warp",
            Mode::Block => "block",
            Mode::Parts => "parts",
            Mode::Merge => "merge",
        }
    }

    /// Whether `target` has this split.
    pub fn exists_on(self, target: &Target) -> bool {
        self != Mode::Warp || target.warps()
    }
}

/// Every reduction, for `variants`.
pub(crate) const OPS: [ReduceOp; 5] = [ReduceOp::Sum, ReduceOp::Max, ReduceOp::Min, ReduceOp::ArgMax, ReduceOp::ArgMin];

/// Bytes of one partial result: the largest accumulator (CUDA: a 128-bit sum, or a double
/// and its position; WGSL: a 32-bit value and a word).
fn part_bytes(target: &Target) -> usize {
    match target.lang {
        Lang::Cuda => 16,
        Lang::Wgsl => 8,
    }
}

/// The layouts of the dims of `l` not in `dims` (with `l`'s start offset) and of `dims`
/// (sorted; start 0), each merged, with the number of outputs (the kept dims' product, 1
/// when none) and of elements each output reduces.
pub(crate) fn split_layouts(l: &Layout, dims: &[usize]) -> (Layout, Layout, usize, usize) {
    let kept: Vec<usize> = (0..l.dims().len()).filter(|d| !dims.contains(d)).collect();
    let part = |ds: &[usize]| merge_dims(ds.iter().map(|&d| (l.dims()[d], l.strides()[d])));
    let ((kept_dims, kept_strides), (red_dims, red_strides)) = (part(&kept), part(dims));
    let (outer, r) = (kept_dims.iter().product(), red_dims.iter().product());
    let kept = Layout::new(kept_dims.into(), kept_strides, l.start_offset());
    (kept, Layout::new(red_dims.into(), red_strides, 0), outer, r)
}

/// (dims, strides) with size-1 dims dropped and each dim merged into the one before it when
/// the two step through storage as one dim (row-major order is kept).
fn merge_dims(dims_strides: impl Iterator<Item = (usize, usize)>) -> (Vec<usize>, Vec<usize>) {
    let (mut dims, mut strides) = (Vec::new(), Vec::<usize>::new());
    for (d, s) in dims_strides.filter(|&(d, _)| d != 1) {
        match (dims.last_mut(), strides.last_mut()) {
            (Some(pd), Some(ps)) if *ps == d * s => {
                *pd *= d;
                *ps = s;
            }
            _ => {
                dims.push(d);
                strides.push(s);
            }
        }
    }
    (dims, strides)
}

/// The reducer struct of reduce.cu computing `op` on `dtype`.
fn cuda_reducer(op: ReduceOp, dtype: DType) -> String {
    let t = cuda_type(dtype);
    match op {
        ReduceOp::Sum => match dtype {
            DType::F16 | DType::BF16 => format!("FloatSum<{t}, float>"),
            DType::F32 | DType::F64 => format!("FloatSum<{t}, double>"),
            DType::U8 | DType::U32 => format!("UnsignedSum<{t}>"),
            DType::I64 => "SignedSum".to_string(),
        },
        _ => {
            let greater = matches!(op, ReduceOp::Max | ReduceOp::ArgMax);
            let out = cuda_type(op.out_dtype(dtype));
            let c = Target::cuda().compute_type(dtype);
            format!("Extreme<{t}, {c}, {out}, {greater}, {}>", op.is_arg())
        }
    }
}

/// The substitutions of reduce.wgsl computing `op` on `dtype` (stored as `t`, computed as
/// `c`): accumulator kind, the finishing expression of an accumulator `a`, the comparison
/// of max / min and the value of an empty max / min.
fn wgsl_subs(op: ReduceOp, dtype: DType, t: &'static str, c: &'static str) -> Vec<(&'static str, String)> {
    let float = dtype.is_float();
    // i64 results (integer sums, positions) are stored as i32 on wgpu.
    let out_t = if op.out_dtype(dtype) == dtype { t } else { "i32" };
    let (kind, finish) = match op {
        ReduceOp::Sum if float => ("fsum", format!("{out_t}(a.v)")),
        ReduceOp::Sum => ("isum", "sat_signed(a)".to_string()),
        ReduceOp::Max | ReduceOp::Min => ("ext", format!("{out_t}(a.v)")),
        ReduceOp::ArgMax | ReduceOp::ArgMin => ("ext", "i32(a.w)".to_string()),
    };
    let greater = matches!(op, ReduceOp::Max | ReduceOp::ArgMax);
    let worst = match (op, float) {
        (ReduceOp::Sum, _) => format!("{c}(0)"),
        (_, true) => format!("bitcast<f32>({}u)", if greater { 0xff80_0000u32 } else { 0x7f80_0000 }),
        (_, false) => wgsl_int_extreme(dtype, !greater).to_string(),
    };
    let cmp = if greater { ">" } else { "<" };
    let subs = [("T", t), ("C", c), ("O", out_t), ("op", kind), ("cmp", cmp)];
    let mut all: Vec<(&'static str, String)> = subs.iter().map(|(k, v)| (*k, v.to_string())).collect();
    all.extend([("finish", finish), ("worst", worst)]);
    all
}

/// The largest (or smallest) stored value of an integer dtype (i64 is stored as i32).
fn wgsl_int_extreme(dtype: DType, largest: bool) -> &'static str {
    match (dtype, largest) {
        (DType::U8, true) => "255u",
        (DType::U32, true) => "NONE",
        (DType::U8 | DType::U32, false) => "0u",
        (_, true) => "2147483647",
        (_, false) => "i32(-2147483647 - 1)",
    }
}

pub(crate) fn reduce_source(target: &Target, op: ReduceOp, dtype: DType) -> Result<KernelSource> {
    let t = target.elem_type(op.name(), dtype)?;
    let half = target.needs_half(&[dtype]);
    let tmpl = template(target, rnn_kernels::cuda::REDUCE, rnn_kernels::wgsl::REDUCE);
    Ok(match target.lang {
        Lang::Cuda => KernelSource::new(target, tmpl, &[("T", t), ("R", &cuda_reducer(op, dtype))], half),
        Lang::Wgsl => {
            let subs = wgsl_subs(op, dtype, t, target.compute_type(dtype));
            let subs: Vec<(&'static str, &str)> = subs.iter().map(|(k, v)| (*k, v.as_str())).collect();
            KernelSource::new(target, tmpl, &subs, half)
        }
    })
}

/// How to split a reduction of `outer` outputs of `r` elements each, with the number of
/// parts an output is split into (1 unless `Mode::Parts`, which `Mode::Merge` follows).
fn split(target: &Target, outer: usize, r: usize, kept: &Layout, reduced: &Layout) -> (Mode, usize) {
    let adjacent_outputs = kept.strides().last() == Some(&1);
    // No outputs (an empty kept dim): nothing to split, and no blocks per output.
    if outer == 0
        || r <= PER_THREAD_MAX
        || (adjacent_outputs && !reduced.is_contiguous() && outer >= PER_THREAD_OUTPUTS)
    {
        return (Mode::Thread, 1);
    }
    if r <= PER_WARP_MAX && target.warps() {
        return (Mode::Warp, 1);
    }
    let parts = r.div_ceil(PART_MIN).min(SPLIT_BLOCKS.div_ceil(outer));
    if parts > 1 {
        (Mode::Parts, parts)
    } else {
        (Mode::Block, 1)
    }
}

/// The grid of a launch in `mode` over `units` outputs or parts.
fn grid(target: &Target, mode: Mode, units: usize) -> Grid {
    match mode {
        Mode::Thread => Grid::Threads(units),
        // One warp per output; the merge too where there are warps (one block on WGSL).
        Mode::Warp => Grid::Threads(units.saturating_mul(32)),
        Mode::Merge if target.warps() => Grid::Threads(units.saturating_mul(32)),
        Mode::Merge | Mode::Block | Mode::Parts => Grid::Blocks(units, BLOCK as u32),
    }
}

/// Reduces input 0 (`dtype`, seen through `l`) over `dims` (sorted, unique): one element
/// per kept position in row-major order (the caller reshapes); argmax / argmin give i64
/// positions within the reduced dims.
pub(crate) fn reduce(target: &Target, op: ReduceOp, dtype: DType, l: &Layout, dims: &[usize]) -> Result<Program> {
    let source = reduce_source(target, op, dtype)?;
    let (kept, reduced, outer, r) = split_layouts(l, dims);
    let out_dtype = op.out_dtype(dtype);
    let mut p = Program::new(target, op.name(), out_dtype, outer);
    let (mode, parts) = split(target, outer, r, &kept, &reduced);
    let chunk = r.div_ceil(parts).max(1);
    // The parts the kernel splits each output into (at most `parts`).
    let parts = r.div_ceil(chunk).max(1);
    // Partial results, as 32-bit words (one unused slot in the single-launch splits: the
    // kernels always bind the buffer).
    let slots = if mode == Mode::Parts { outer * parts } else { 1 };
    let part = p.temp(DType::U32, slots * part_bytes(target) / 4);
    let launch = |p: &mut Program, mode: Mode, units: usize| {
        let info = target.info(op.name(), &[outer, r, mode as usize, chunk], &[&kept, &reduced])?;
        let variant = format!("reduce/{}/{dtype}/{}", op.name(), mode.name());
        p.kernel(source.clone(), variant, grid(target, mode, units), &[Arg::Input(0), Program::OUT, part], info)
    };
    if mode == Mode::Parts {
        launch(&mut p, Mode::Parts, outer * parts)?;
        launch(&mut p, Mode::Merge, outer)?;
    } else {
        launch(&mut p, mode, outer)?;
    }
    Ok(p)
}
