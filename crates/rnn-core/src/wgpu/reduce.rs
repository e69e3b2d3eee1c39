//! Reductions and softmax. Both view the input with the dims they reduce last (a permuted
//! layout, adjacent dims merged), so that output `o` reduces the elements `o * r .. o * r + r`
//! of that view; kernels read it through `strided_offset`.
//!
//! Semantics follow `cpu/reduce.rs`: floats accumulate in f32, integer sums are exact (64
//! bits) and saturate to the dtype, max / min and their positions let NaN win and keep the
//! first of equal elements, and an empty reduction gives the CPU's identity values.

use rnn_kernels::wgsl;

use super::dtype::compute_type;
use super::launch::{info, kernel_source, Grid};
use super::storage::WgpuStorage;
use crate::op::ReduceOp;
use crate::storage::BackendStorage;
use crate::{DType, Error, Layout, Result};

/// Reductions of at most this many elements run one thread per output; longer ones run one
/// workgroup per output.
const PER_THREAD_MAX: usize = 32;

/// `l` seen with the dims not in `dims` first and `dims` (sorted) last, with the number of
/// outputs (the kept dims' product, 1 when none) and of elements each output reduces.
fn reduced_last(l: &Layout, dims: &[usize]) -> (Layout, usize, usize) {
    let ((mut all_dims, mut all_strides), (red_dims, red_strides)) = crate::gpu_shared::kept_and_reduced(l, dims);
    let outer = all_dims.iter().product();
    let r = red_dims.iter().product();
    all_dims.extend(red_dims);
    all_strides.extend(red_strides);
    (Layout::new(all_dims.into(), all_strides, l.start_offset()), outer, r)
}

/// The template values choosing a reduction: accumulator kind, the finishing expression of
/// an accumulator `a`, the comparison of max / min and the value of an empty max / min.
struct ReduceKernel {
    kind: &'static str,
    finish: String,
    cmp: &'static str,
    worst: String,
}

impl ReduceKernel {
    /// The kernel of `op` on `dtype` (computed as `c`, f32 for floats), whose output is
    /// stored as `out_t`.
    fn new(op: ReduceOp, dtype: DType, out_t: &str, c: &str) -> ReduceKernel {
        let float = dtype.is_float();
        let value = format!("{out_t}(a.v)");
        let (kind, finish) = match op {
            ReduceOp::Sum if float => ("fsum", value),
            ReduceOp::Sum => ("isum", Self::int_sum_finish(dtype).to_string()),
            ReduceOp::Max | ReduceOp::Min => ("ext", value),
            ReduceOp::ArgMax | ReduceOp::ArgMin => ("ext", "a.w".to_string()),
        };
        let greater = matches!(op, ReduceOp::Max | ReduceOp::ArgMax);
        let worst = match (op, float) {
            (ReduceOp::Sum, _) => format!("{c}(0)"),
            (_, true) => format!("bitcast<f32>({}u)", if greater { 0xff80_0000u32 } else { 0x7f80_0000 }),
            (_, false) => Self::int_extreme(dtype, !greater).to_string(),
        };
        ReduceKernel { kind, finish, cmp: if greater { ">" } else { "<" }, worst }
    }

    /// The saturating conversion of an exact integer sum to `dtype`, as the CPU's cast.
    fn int_sum_finish(dtype: DType) -> &'static str {
        match dtype {
            DType::U8 => "sat_unsigned(a, 255u)",
            DType::U32 => "sat_unsigned(a, NONE)",
            _ => "sat_signed(a)",
        }
    }

    /// The largest (or smallest) stored value of an integer dtype (i64 is stored as i32).
    fn int_extreme(dtype: DType, largest: bool) -> &'static str {
        match (dtype, largest) {
            (DType::U8, true) => "255u",
            (DType::U32, true) => "NONE",
            (DType::U8 | DType::U32, false) => "0u",
            (_, true) => "2147483647",
            (_, false) => "i32(-2147483647 - 1)",
        }
    }
}

/// Reduces `x` over `dims` (sorted, unique): one element per kept position in row-major
/// order (the caller reshapes); argmax / argmin give u32 positions within the reduced dims.
pub(crate) fn reduce(x: &WgpuStorage, l: &Layout, op: ReduceOp, dims: &[usize]) -> Result<WgpuStorage> {
    let t = x.wgsl_type(op.name())?;
    let c = compute_type(x.dtype(), t);
    let (view, outer, r) = reduced_last(l, dims);
    let (out_dtype, out_t) = if op.is_arg() { (DType::U32, "u32") } else { (x.dtype(), t) };
    let k = ReduceKernel::new(op, x.dtype(), out_t, c);
    let per_thread = r <= PER_THREAD_MAX;
    let subs = [
        ("T", t),
        ("C", c),
        ("O", out_t),
        ("op", k.kind),
        ("finish", k.finish.as_str()),
        ("cmp", k.cmp),
        ("worst", k.worst.as_str()),
        ("per_thread", if per_thread { "true" } else { "false" }),
    ];
    let source = kernel_source(wgsl::REDUCE, &subs, x.is_f16());
    let out = x.alloc_like(out_dtype, outer)?;
    let grid = if per_thread { Grid::Threads(outer) } else { Grid::Groups(outer) };
    x.ctx().launch(&source, &info(op.name(), &[outer, r], &[&view])?, &[x.buffer(), out.buffer()], grid)?;
    Ok(out)
}

/// Softmax (or log-softmax when `log`) along the last dim of `l`, one workgroup per row;
/// the result is contiguous.
pub(crate) fn softmax_last_dim(x: &WgpuStorage, l: &Layout, log: bool) -> Result<WgpuStorage> {
    let op = if log { "log_softmax" } else { "softmax" };
    if !x.dtype().is_float() {
        return Err(Error::UnsupportedDType { op, dtype: x.dtype(), hint: ": softmax needs a float dtype" });
    }
    let t = x.wgsl_type(op)?;
    let last = l.dims().len().checked_sub(1).map_or(Vec::new(), |d| vec![d]);
    let (view, rows, n) = reduced_last(l, &last);
    let source = kernel_source(wgsl::SOFTMAX, &[("T", t), ("log", if log { "true" } else { "false" })], x.is_f16());
    let out = x.alloc_like(x.dtype(), rows * n)?;
    let grid = Grid::Groups(if n == 0 { 0 } else { rows });
    x.ctx().launch(&source, &info(op, &[rows, n], &[&view])?, &[x.buffer(), out.buffer()], grid)?;
    Ok(out)
}
