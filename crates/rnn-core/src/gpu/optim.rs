//! Plans of the fused optimizer updates (`fused_update`), and their runner. The update
//! rules live in one kernel per language (`rnn-kernels/cuda/optim.cu`, `wgsl/optim.wgsl`),
//! one variant per (rule, dtype); hyper-parameters travel in `Info` words, never in the
//! kernel text, so a learning-rate schedule or the step count compiles nothing new.
//!
//! - CUDA (multi-tensor apply): ONE launch updates every parameter of a group. The kernel
//!   reads a table uploaded with it: per tensor the addresses of its parameter, gradient and
//!   three state buffers (0 for a state the rule does not keep) and its element count, then
//!   the index of each tensor's first `CHUNK`-element chunk and the total; block b takes
//!   chunks b, b + grid, ... The runtime's one new primitive is `GpuStorage::device_address`.
//! - WGSL: kernels cannot follow addresses, so one dispatch per parameter (the runtime
//!   queues them; absent states are bound to spare one-element buffers, never touched).
//!
//! Either way the parameter and its states are updated in place: a step allocates nothing
//! but the small table (CUDA) or the spare buffers (wgpu).

use super::plan::{Arg, Grid, KernelPlan, KernelSource};
use super::target::{Lang, Target, BLOCK};
use super::GpuStorage;
use crate::cpu::CpuStorage;
use crate::fused_update::{ParamUpdate, UpdateRule};
use crate::storage::Storage;
use crate::{DType, Error, Result, Tensor};

const OP: &str = "optimizer step";

/// Elements of one tensor a CUDA block updates at a time (8 per thread).
pub(crate) const CHUNK: usize = 2048;

/// Words per tensor in the CUDA table (`ENTRY` in optim.cu): 5 addresses and the length.
const ENTRY: usize = 6;

/// Hyper-parameter words of the kernels (`HYPER` in optim.cu).
const HYPER: usize = 8;

/// The rules, by kernel name (variants list each with every dtype).
pub(crate) const RULES: [&str; 4] = ["sgd", "adam", "rmsprop", "adagrad"];

// Flag bits of the kernels (the same names in optim.cu and optim.wgsl).
const DECAY: u64 = 1;
const FIRST_STEP: u64 = 2;
const NESTEROV: u64 = 4;
const DECOUPLED: u64 = 8;
const HAS_STATE: [u64; 3] = [16, 32, 64];

/// The flag word and the hyper-parameter words of `rule`, in the order each rule's comment
/// in the kernels lists them (as f64: kernels round them to their compute type, as the CPU
/// loop does).
fn hyper(rule: &UpdateRule) -> (u64, [f64; HYPER]) {
    let decay = |wd: f64| if wd != 0.0 { DECAY } else { 0 };
    let mut h = [0.0; HYPER];
    let flags = match rule {
        UpdateRule::Sgd(s) => {
            h[..4].copy_from_slice(&[s.lr, s.weight_decay, s.momentum, 1.0 - s.dampening]);
            let first = if s.first_step { FIRST_STEP } else { 0 };
            decay(s.weight_decay) | first | if s.nesterov { NESTEROV } else { 0 }
        }
        UpdateRule::Adam(a) => {
            h = [
                a.step_size(),
                a.bias_correction2_sqrt(),
                1.0 - a.beta1,
                a.beta2,
                1.0 - a.beta2,
                a.eps,
                a.weight_decay,
                1.0 - a.lr * a.weight_decay,
            ];
            decay(a.weight_decay) | if a.decoupled { DECOUPLED } else { 0 }
        }
        UpdateRule::RmsProp(r) => {
            h[..6].copy_from_slice(&[r.lr, r.alpha, 1.0 - r.alpha, r.eps, r.weight_decay, r.momentum]);
            decay(r.weight_decay)
        }
        UpdateRule::Adagrad(a) => {
            h[..3].copy_from_slice(&[a.lr, a.eps, a.weight_decay]);
            decay(a.weight_decay)
        }
    };
    let states = rule.states().iter().zip(HAS_STATE).filter(|(used, _)| **used).fold(0, |f, (_, bit)| f | bit);
    (flags | states, h)
}

/// The kernel of rule `rule` (a name of `RULES`) on `dtype`: CUDA f32 / f64, WGSL f32.
pub(crate) fn source(target: &Target, rule: &str, dtype: DType) -> Result<KernelSource> {
    let supported = match target.lang {
        Lang::Cuda => matches!(dtype, DType::F32 | DType::F64),
        Lang::Wgsl => dtype == DType::F32,
    };
    if !supported {
        let hint = ": fused optimizer kernels exist for f32 (and f64 on CUDA)";
        return Err(Error::UnsupportedDType { op: OP, dtype, hint });
    }
    let (t, c) = (target.elem_type(OP, dtype)?, target.compute_type(dtype));
    let tmpl = super::elementwise::template(target, rnn_kernels::cuda::OPTIM, rnn_kernels::wgsl::OPTIM);
    Ok(KernelSource::new(target, tmpl, &[("T", t), ("C", c), ("rule", rule)], false))
}

fn variant(rule: &str, dtype: DType) -> String {
    format!("optim/{rule}/{dtype}")
}

/// (variant, source) of every optimizer kernel of `target`.
pub(crate) fn variants(target: &Target) -> Vec<(String, KernelSource)> {
    let mut v = Vec::new();
    for rule in RULES {
        for dtype in [DType::F32, DType::F64] {
            if let Ok(source) = source(target, rule, dtype) {
                v.push((variant(rule, dtype), source));
            }
        }
    }
    v
}

/// One parameter's buffers on a GPU: parameter, gradient and the three state slots, each
/// with the start offset of the contiguous elements, and the element count.
pub(crate) struct Operands<'a, S> {
    pub n: usize,
    pub buffers: [Option<(&'a S, usize)>; 5],
}

/// Updates every parameter of `group` (all of `dtype` on device `ordinal`) with `rule`.
pub(crate) fn run<S: GpuStorage>(rule: &UpdateRule, dtype: DType, ordinal: usize, group: &[Operands<S>]) -> Result<()> {
    let target = S::target_of(ordinal)?;
    let source = source(&target, rule.kernel_name(), dtype)?;
    let (flags, h) = hyper(rule);
    match target.lang {
        Lang::Cuda => run_table(&target, source, rule, dtype, (flags, h), ordinal, group),
        Lang::Wgsl => run_each(&target, source, rule, dtype, (flags, h), ordinal, group),
    }
}

/// CUDA: the table of all tensors, and one launch over it.
fn run_table<S: GpuStorage>(
    target: &Target,
    source: KernelSource,
    rule: &UpdateRule,
    dtype: DType,
    (flags, h): (u64, [f64; HYPER]),
    ordinal: usize,
    group: &[Operands<S>],
) -> Result<()> {
    let size = dtype.size_in_bytes() as u64;
    let mut table = Vec::with_capacity(group.len() * (ENTRY + 1) + 1);
    let mut first_chunk = vec![0u64];
    for ops in group {
        for slot in ops.buffers {
            table.push(match slot {
                Some((s, offset)) => address(s)? + offset as u64 * size,
                None => 0,
            });
        }
        table.push(ops.n as u64);
        first_chunk.push(first_chunk[first_chunk.len() - 1] + ops.n.div_ceil(CHUNK) as u64);
    }
    let chunks = first_chunk[group.len()] as usize;
    if chunks == 0 {
        return Ok(());
    }
    table.extend(first_chunk);
    let mut info = vec![group.len() as u64, CHUNK as u64, chunks as u64, flags];
    info.extend(h.iter().map(|v| v.to_bits()));
    let dims = target.launch_dims(OP, Grid::Blocks(chunks, BLOCK as u32))?;
    let plan = KernelPlan {
        op: OP,
        source,
        variant: variant(rule.kernel_name(), dtype),
        dims,
        args: vec![Arg::Input(0)],
        info,
    };
    let table = S::upload(&CpuStorage::I64(table.into_iter().map(|w| w as i64).collect()), ordinal)?;
    S::launch(&plan, &[&table])
}

fn address<S: GpuStorage>(s: &S) -> Result<u64> {
    s.device_address().ok_or_else(|| Error::Msg(format!("internal: {OP}: this runtime has no buffer addresses")))
}

/// WGSL: one dispatch per parameter; absent states bound to spare buffers.
fn run_each<S: GpuStorage>(
    target: &Target,
    source: KernelSource,
    rule: &UpdateRule,
    dtype: DType,
    (flags, h): (u64, [f64; HYPER]),
    ordinal: usize,
    group: &[Operands<S>],
) -> Result<()> {
    let spares = (0..3).map(|_| S::alloc(ordinal, dtype, 1)).collect::<Result<Vec<S>>>()?;
    let hyper_bits = h.map(|v| (v as f32).to_bits() as usize);
    for ops in group.iter().filter(|o| o.n > 0) {
        let mut buffers = Vec::with_capacity(5);
        let mut scalars = vec![ops.n];
        for (slot, buffer) in ops.buffers.iter().enumerate() {
            let (s, offset) = match (buffer, slot) {
                (Some(b), _) => *b,
                (None, state @ 2..) => (&spares[state - 2], 0),
                (None, _) => return Err(Error::Msg(format!("internal: {OP} without a parameter or gradient"))),
            };
            buffers.push(s);
            scalars.push(offset);
        }
        scalars.push(flags as usize);
        scalars.extend(hyper_bits);
        let plan = KernelPlan {
            op: OP,
            source: source.clone(),
            variant: variant(rule.kernel_name(), dtype),
            dims: target.launch_dims(OP, Grid::Threads(ops.n))?,
            args: (0..5).map(Arg::Input).collect(),
            info: target.info(OP, &scalars, &[])?,
        };
        S::launch(&plan, &buffers)?;
    }
    Ok(())
}

/// `fused_update::step` on runtime `S`: the tensors' buffers, then `run` (checked by the
/// caller: contiguous operands of one dtype on one device, no shared storage).
pub(crate) fn step<S: GpuStorage>(rule: &UpdateRule, updates: &[ParamUpdate]) -> Result<()> {
    let Some(first) = updates.first() else { return Ok(()) };
    let tensors: Vec<[Option<&Tensor>; 5]> =
        updates.iter().map(|u| [Some(u.param), Some(u.grad), u.states[0], u.states[1], u.states[2]]).collect();
    let guards: Vec<[Option<_>; 5]> = tensors.iter().map(|ts| ts.map(|t| t.map(|t| t.storage()))).collect();
    let mut group = Vec::with_capacity(updates.len());
    for (ts, gs) in tensors.iter().zip(&guards) {
        let mut buffers = [None; 5];
        for (slot, (t, guard)) in ts.iter().zip(gs).enumerate() {
            if let (Some(t), Some(guard)) = (t, guard) {
                buffers[slot] = Some((gpu_storage::<S>(guard)?, t.layout().start_offset()));
            }
        }
        group.push(Operands { n: ts[0].map_or(0, Tensor::elem_count), buffers });
    }
    let ordinal = group[0].buffers[0].map_or(0, |(s, _)| s.ordinal());
    run(rule, first.param.dtype(), ordinal, &group)
}

fn gpu_storage<S: GpuStorage>(s: &Storage) -> Result<&S> {
    S::of(s).ok_or_else(|| Error::Msg(format!("internal: {OP}: an operand on another device")))
}
