//! Attention programs for CUDA (`attention.cu`) and WGSL (`attention_*.wgsl`): the forward
//! is one launch writing the output and the log-sum-exp; the backward is two, a dq pass that
//! also writes `delta = rowsum(dO * O)` and a dk / dv pass that also writes the bias gradient.
//!
//! Kernels are specialized by dtype and by `dmax`, the feature bucket (32, 64 or 128) that
//! holds both D and Dv: features past D are zero-padded in shared memory. Larger heads have
//! no kernel and compose from primitives. q, k, v, o, do and the bias are read through their
//! rank-4 views (start offset and four strides in `Info`), so strided and broadcast inputs
//! need no copies; the mask flags are `Info` words, not variants.
//!
//! On CUDA, f16 / bf16 attention has kernels of its own (attention_mma.cu, sm_80 and later): a
//! warp per 16 rows (32 in the forward, and in the dq pass at dmax <= 64, see `warp_rows`), the
//! tile products as mma.m16n8k16 with f32 accumulators, the softmax on the fragments in
//! registers. Their backward can also run FlashAttention-2's single pass
//! (`AttentionBackward::atomic_dq`, see `crate::set_attention_atomic_dq`): a prologue (delta,
//! the f32 dq accumulator zeroed), the dk / dv pass that also adds scale * dS K to the
//! accumulator with atomics, and a copy that rounds it into dq. Older devices (Turing, sm_75)
//! run the scalar kernels on 16-bit inputs, in f32 (variants ending in `/scalar`).

use super::{stat_dtype, Attention, AttentionBackward, Dims, OP};
use crate::gpu::elementwise::{copy_into, template};
use crate::gpu::plan::{Arg, Grid, KernelSource, Program};
use crate::gpu::target::{Lang, Target};
use crate::{DType, Error, Layout, Result};

/// Threads per query (or key) row: `TPR` in the kernels.
const THREADS_PER_ROW: usize = 8;

/// The feature buckets kernels exist for.
const DMAX: [usize; 3] = [32, 64, 128];

/// Flag words of `Info` (as in the kernels).
const CAUSAL: usize = 1;
const LENGTHS: usize = 2;
const HAS_BIAS: usize = 4;
const BIAS_GRAD: usize = 8;

/// The kernels: the forward, the backward's dq pass and its dk / dv pass, and the two kernels
/// of the atomic-dq backward on tensor cores (`PASS` in attention.cu).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Pass {
    Forward = 0,
    Dq = 1,
    DkDv = 2,
    /// delta and the zeroed f32 dq accumulator (a warp per query row).
    AtomicPrologue = 3,
    /// dk / dv, and scale * dS K added to the dq accumulator.
    DkDvDq = 4,
}

impl Pass {
    const ALL: [Pass; 5] = [Pass::Forward, Pass::Dq, Pass::DkDv, Pass::AtomicPrologue, Pass::DkDvDq];

    fn name(self) -> &'static str {
        match self {
            Pass::Forward => "fwd",
            Pass::Dq => "bwd_dq",
            Pass::DkDv => "bwd_dkdv",
            Pass::AtomicPrologue => "bwd_atomic_prologue",
            Pass::DkDvDq => "bwd_dkdvdq",
        }
    }

    /// The passes of the atomic-dq backward, which exist on tensor cores only.
    fn mma_only(self) -> bool {
        matches!(self, Pass::AtomicPrologue | Pass::DkDvDq)
    }

    fn template(self, target: &Target) -> &'static str {
        use rnn_kernels::{cuda, wgsl};
        match self {
            Pass::Forward => template(target, cuda::ATTENTION, wgsl::ATTENTION_FWD),
            Pass::Dq => template(target, cuda::ATTENTION, wgsl::ATTENTION_BWD_DQ),
            Pass::DkDv => template(target, cuda::ATTENTION, wgsl::ATTENTION_BWD_DKDV),
            // CUDA only (`source` checks).
            Pass::AtomicPrologue | Pass::DkDvDq => cuda::ATTENTION,
        }
    }

    /// Shared (workgroup) memory of a block of `rows` rows walking tiles of `cols`, in
    /// values of the compute type (as the kernels declare it).
    /// Tiles have rows of `dmax + 1` values (against bank conflicts).
    fn shared_values(self, rows: usize, cols: usize, dmax: usize) -> usize {
        let row = dmax + 1;
        match self {
            Pass::Forward => (rows + 2 * cols) * row + rows * cols,
            Pass::Dq => (2 * rows + 2 * cols) * row + rows * cols,
            Pass::DkDv | Pass::DkDvDq => (2 * rows + 2 * cols) * row + 2 * rows * cols + 2 * cols,
            Pass::AtomicPrologue => 0,
        }
    }
}

/// The compute type's size in bytes.
fn compute_bytes(target: &Target, dtype: DType) -> usize {
    if target.lang == Lang::Cuda && dtype == DType::F64 {
        8
    } else {
        4
    }
}

/// The tile of a pass: (rows per block, columns per step), the largest that fits the static
/// shared memory of a CUDA block (48 KiB) or WebGPU's guaranteed 16 KiB of workgroup memory.
fn tile(target: &Target, pass: Pass, dtype: DType, dmax: usize) -> (usize, usize) {
    if mma(target, dtype) {
        return mma_tile(pass, dmax);
    }
    let limit = match target.lang {
        Lang::Cuda => 46 * 1024,
        Lang::Wgsl => 16 * 1024,
    };
    let fits = |&(rows, cols): &(usize, usize)| pass.shared_values(rows, cols, dmax) * compute_bytes(target, dtype) <= limit;
    [(16, 32), (16, 16), (8, 16), (8, 8), (4, 8)].into_iter().find(fits).unwrap_or((4, 8))
}

/// Whether a kernel computes its tile products with mma instructions (attention_mma.cu): CUDA
/// on the 16-bit floats, on a device with them (`Target::tensor_cores`).
fn mma(target: &Target, dtype: DType) -> bool {
    target.lang == Lang::Cuda && target.tensor_cores && matches!(dtype, DType::F16 | DType::BF16)
}

/// (rows per block, columns per step) of an mma kernel. The accumulators, fragments and
/// scores must fit the registers without spilling (`tests/cuda_kernels.rs` fails on any
/// spill in the assembler's report), and shared memory 48 KiB but where a kernel asks for
/// dynamic shared memory (`dynamic_shared_bytes`). Hence:
/// - The forward: 128 query rows per block, as FlashAttention-2's, in 4 warps of two row
///   tiles; each K / V tile staged serves all 128 rows (with 64-row blocks, at N = 16384,
///   D = 128, B x H = 32, a forward read 64 GB of K / V from L2). 64 columns at dmax 32, 32
///   at 64 (64 spilled 52 bytes) and 128. At dmax <= 64 the queries are staged in the K / V
///   tiles' space, then held in registers; at 128 they stay in shared memory
///   (`queries_shared`).
/// - The dq pass, which holds both Q's and dO's fragments: 16 columns at dmax 64, whose warps
///   hold two row tiles (32 spilled 28 bytes), one row tile and 16 columns at 128.
/// - The dk / dv pass: one row tile per warp and fewer rows (its four tiles). Its K and V rows
///   are the A operands, which at dmax <= 64 stay in registers for the whole query loop
///   (`HOLD_KV`: 256 bytes of shared memory per product instead of 320); two row tiles would
///   leave room for 16 columns only.
///
/// `ptxas --verbose` (NVRTC 13.5, sm_90) reports 216, 226 and 244 registers for the forward
/// at dmax 32, 64 and 128, 220, 250 and 232 for the dq pass: a block of 128 threads leaves
/// two blocks per multiprocessor, so the overlap of copies and products must come from within
/// the block. The K / V tiles are double-buffered at every dmax (with 64-row blocks on an H200
/// one buffer read 0-16% faster at dmax 64, where two halved the blocks a multiprocessor held:
/// bench/results/2026-11-27-h200.md).
fn mma_tile(pass: Pass, dmax: usize) -> (usize, usize) {
    match (pass, dmax) {
        (Pass::Forward, 128) => (128, 32),
        (Pass::Forward, 64) => (128, 32),
        (Pass::Forward, _) => (128, 64),
        (Pass::Dq, 128) => (64, 16),
        (Pass::Dq, 64) => (128, 16),
        (Pass::Dq, _) => (128, 32),
        // The atomic pass adds a dS tile in shared memory and the dq product's accumulators
        // (2 feature tiles at a time) to the dk / dv pass: the same tiles fit.
        (Pass::DkDv | Pass::DkDvDq, 128) => (32, 16),
        (Pass::DkDv | Pass::DkDvDq, _) => (64, 32),
        // Rows per block, a warp each.
        (Pass::AtomicPrologue, _) => (4, 0),
    }
}

/// Rows a warp owns in an mma kernel: 16 (one row tile), or 32 in the forward, and in the dq
/// pass where the registers hold two row tiles, so that every K / V fragment a warp loads
/// from shared memory serves both tiles' products.
/// (With 16, ldmatrix moves 256 bytes per mma.m16n8k16: at 128 bytes per clock of shared
/// memory, 2 of the 3 or so clocks a Hopper multiprocessor's tensor cores take per product
/// under mma.sync, beside the tiles' own copies into shared memory.)
fn warp_rows(pass: Pass, dmax: usize) -> usize {
    match (pass, dmax) {
        (Pass::Forward, _) | (Pass::Dq, 32 | 64) => 32,
        _ => 16,
    }
}

/// Whether an mma kernel keeps its query rows in shared memory and reads their fragments at
/// every key step, rather than holding them in registers: the forward at dmax 128, where a
/// warp's two row tiles would need 64 registers for them beside 128 for the output
/// accumulators (FlashAttention-2 keeps them in shared memory at that head size too).
fn queries_shared(pass: Pass, dmax: usize) -> bool {
    pass == Pass::Forward && dmax == 128
}

/// Dynamic shared memory of a block of a pass's kernel, in bytes: with `queries_shared`, the
/// query rows and two K and two V tiles, in rows of dmax + 8 16-bit values (`LDS` in the
/// kernel, which checks that they fit); 0 for the kernels that declare theirs.
fn dynamic_shared_bytes(target: &Target, pass: Pass, dtype: DType, dmax: usize) -> usize {
    if !mma(target, dtype) || !queries_shared(pass, dmax) {
        return 0;
    }
    let (rows, cols) = mma_tile(pass, dmax);
    (rows + 4 * cols) * (dmax + 8) * 2
}

/// Threads per block of a pass's kernel: 8 per row, or on tensor cores a warp per
/// `warp_rows` rows (the atomic prologue: per row).
fn block_threads(target: &Target, pass: Pass, dtype: DType, dmax: usize) -> usize {
    let rows = tile(target, pass, dtype, dmax).0;
    match pass {
        _ if !mma(target, dtype) => rows * THREADS_PER_ROW,
        Pass::AtomicPrologue => rows * 32,
        _ => rows / warp_rows(pass, dmax) * 32,
    }
}

/// The feature bucket of D and Dv, or `None` beyond the largest (composed then).
fn bucket(dims: &Dims) -> Option<usize> {
    DMAX.into_iter().find(|&b| dims.d.max(dims.dv) <= b)
}

/// A variant's name; the scalar kernels of a 16-bit dtype on CUDA (devices before sm_80) end
/// in `/scalar`, so that both kinds are listed.
fn variant(target: &Target, pass: Pass, dtype: DType, dmax: usize) -> String {
    let scalar_half = target.lang == Lang::Cuda && dtype.size_in_bytes() == 2 && !mma(target, dtype);
    format!("attention/{}/{dtype}/d{dmax}{}", pass.name(), if scalar_half { "/scalar" } else { "" })
}

fn source(target: &Target, pass: Pass, dtype: DType, dmax: usize) -> Result<KernelSource> {
    if !dtype.is_float() {
        return Err(Error::UnsupportedDType { op: OP, dtype, hint: ": attention needs a float dtype" });
    }
    if pass.mma_only() && !mma(target, dtype) {
        return Err(Error::Msg(format!("internal: attention's {} pass runs on CUDA tensor cores only", pass.name())));
    }
    let t = target.elem_type(OP, dtype)?;
    let (rows, cols) = tile(target, pass, dtype, dmax);
    let pass_index = (pass as usize).to_string();
    let threads = block_threads(target, pass, dtype, dmax).to_string();
    let mma = if mma(target, dtype) { "1" } else { "0" };
    // The kernel keeps its queries in shared memory where it has dynamic shared memory.
    let shared_bytes = dynamic_shared_bytes(target, pass, dtype, dmax).to_string();
    let (dmax, rows_s, cols_s) = (dmax.to_string(), rows.to_string(), cols.to_string());
    let subs = [
        ("T", t),
        ("C", target.compute_type(dtype)),
        ("pass", pass_index.as_str()),
        ("dmax", dmax.as_str()),
        ("rows", rows_s.as_str()),
        ("cols", cols_s.as_str()),
        ("threads", threads.as_str()),
        ("mma", mma),
        ("shared_bytes", shared_bytes.as_str()),
    ];
    Ok(KernelSource::new(target, pass.template(target), &subs, target.needs_half(&[dtype])))
}

/// Every kernel variant: pass x dtype x feature bucket.
pub(crate) fn variants(target: &Target) -> Vec<(String, KernelSource)> {
    let mut v = Vec::new();
    for pass in Pass::ALL {
        for dtype in [DType::F32, DType::F64, DType::F16, DType::BF16] {
            for dmax in DMAX {
                if let Ok(s) = source(target, pass, dtype, dmax) {
                    v.push((variant(target, pass, dtype, dmax), s));
                }
            }
        }
    }
    v
}

/// The `Info` words: sizes, the scale's bits, the mask flags, then the views.
fn info(target: &Target, dims: &Dims, scale: f64, flags: usize, views: &[Option<&Layout>]) -> Result<Vec<u64>> {
    let scale_bits = match target.lang {
        Lang::Cuda => scale.to_bits(),
        Lang::Wgsl => (scale as f32).to_bits() as u64,
    };
    let mut words = vec![dims.heads, dims.nq, dims.nk, dims.d, dims.dv, 0, flags, dims.batch * dims.heads];
    for view in views {
        match view {
            Some(l) if l.dims().len() == 4 => {
                words.push(l.start_offset());
                words.extend_from_slice(l.strides());
            }
            Some(l) => return Err(Error::Msg(format!("internal: {OP} expects rank-4 views, got {:?}", l.dims()))),
            None => words.extend([0; 5]),
        }
    }
    let mut info = target.info(OP, &words, &[])?;
    info[5] = scale_bits;
    Ok(info)
}

/// The flag word of a forward (and its backward when `bias_grad`).
fn flags(op: &Attention, bias_grad: bool) -> usize {
    let mut f = 0;
    for (on, bit) in [(op.causal, CAUSAL), (op.lengths, LENGTHS), (op.bias, HAS_BIAS), (bias_grad, BIAS_GRAD)] {
        if on {
            f |= bit;
        }
    }
    f
}

/// A launch of `pass` over `rows` rows (queries or keys) of each of `pairs` (batch, head)
/// pairs, tiled separately.
fn launch(
    p: &mut Program,
    pass: Pass,
    (dtype, dmax): (DType, usize),
    (pairs, rows): (usize, usize),
    args: &[Arg],
    info: Vec<u64>,
) -> Result<()> {
    let target = p.target;
    let (tile_rows, _) = tile(&target, pass, dtype, dmax);
    let source = source(&target, pass, dtype, dmax)?;
    let threads = block_threads(&target, pass, dtype, dmax) as u32;
    let grid = Grid::Blocks(pairs * rows.div_ceil(tile_rows), threads);
    let shared = dynamic_shared_bytes(&target, pass, dtype, dmax) as u32;
    p.kernel_shared(source, variant(&target, pass, dtype, dmax), (grid, shared), args, info)
}

pub(crate) fn forward(op: &Attention, target: &Target, inputs: &[(DType, &Layout, usize)]) -> Result<Option<Program>> {
    let (dtype, ql, _) = inputs[0];
    let dims = Dims::of(ql.dims(), inputs[1].1.dims(), inputs[2].1.dims());
    let Some(dmax) = bucket(&dims) else { return Ok(None) };
    let rows = dims.batch * dims.heads * dims.nq;
    let outputs = [(dtype, rows * dims.dv), (stat_dtype(dtype), rows)];
    let mut p = Program::with_outputs(target, OP, &outputs);
    let bias = op.bias_input();
    let views = [Some(ql), Some(inputs[1].1), Some(inputs[2].1), bias.map(|i| inputs[i].1)];
    let info = info(target, &dims, op.scale, flags(op, false), &views)?;
    let optional = |i: Option<usize>| Arg::Input(i.unwrap_or(0));
    let args = [Arg::Input(0), Arg::Input(1), Arg::Input(2), optional(op.lengths_input()), optional(bias), Arg::Temp(0), Arg::Temp(1)];
    launch(&mut p, Pass::Forward, (dtype, dmax), (dims.batch * dims.heads, dims.nq), &args, info)?;
    Ok(Some(p))
}

pub(crate) fn backward(
    op: &AttentionBackward,
    target: &Target,
    inputs: &[(DType, &Layout, usize)],
) -> Result<Option<Program>> {
    let (dtype, ql, _) = inputs[0];
    let dims = Dims::of(ql.dims(), inputs[1].1.dims(), inputs[2].1.dims());
    let Some(dmax) = bucket(&dims) else { return Ok(None) };
    let pairs = dims.batch * dims.heads;
    let mut outputs = vec![(dtype, pairs * dims.nq * dims.d), (dtype, pairs * dims.nk * dims.d), (dtype, pairs * dims.nk * dims.dv)];
    if op.bias_grad {
        outputs.push((dtype, pairs * dims.nq * dims.nk));
    }
    let mut p = Program::with_outputs(target, "scaled_dot_product_attention_backward", &outputs);
    let delta = p.temp(stat_dtype(dtype), pairs * dims.nq);
    // Without a bias gradient its kernel argument is a 1-element placeholder, never written.
    let dbias = if op.bias_grad { Arg::Temp(3) } else { p.temp(dtype, 1) };
    let bias = op.bias_input();
    let view = |i: usize| Some(inputs[i].1);
    let views = [view(0), view(1), view(2), view(3), view(4), bias.map(|i| inputs[i].1)];
    let info = info(target, &dims, op.fwd.scale, flags(&op.fwd, op.bias_grad), &views)?;
    let (lengths, bias) = (Arg::Input(op.lengths_input().unwrap_or(0)), Arg::Input(bias.unwrap_or(0)));
    let (q, k, v, o, d_o, lse) = (Arg::Input(0), Arg::Input(1), Arg::Input(2), Arg::Input(3), Arg::Input(4), Arg::Input(5));
    let kind = (dtype, dmax);
    let dkdv_args = [q, k, v, d_o, lse, delta, lengths, bias, Arg::Temp(1), Arg::Temp(2), dbias];
    if op.atomic_dq && mma(target, dtype) {
        let dq_acc = p.temp(DType::F32, pairs * dims.nq * dims.d);
        launch(&mut p, Pass::AtomicPrologue, kind, (pairs, dims.nq), &[o, d_o, delta, dq_acc], info.clone())?;
        let args: Vec<Arg> = dkdv_args.into_iter().chain([dq_acc]).collect();
        launch(&mut p, Pass::DkDvDq, kind, (pairs, dims.nk), &args, info.clone())?;
        let rows = Layout::contiguous(pairs * dims.nq * dims.d);
        copy_into(&mut p, (dq_acc, DType::F32, &rows), (Arg::Temp(0), dtype, &rows))?;
        return Ok(Some(p));
    }
    let dq_args = [q, k, v, o, d_o, lse, lengths, bias, Arg::Temp(0), delta];
    launch(&mut p, Pass::Dq, kind, (pairs, dims.nq), &dq_args, info.clone())?;
    launch(&mut p, Pass::DkDv, kind, (pairs, dims.nk), &dkdv_args, info)?;
    Ok(Some(p))
}
