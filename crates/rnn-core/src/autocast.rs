//! Automatic mixed precision, as `torch.autocast`: inside an autocast region the
//! compute-bound ops (matmul, linear, convolution, attention) run in a 16-bit float dtype
//! (bf16 or f16; the kernels accumulate in f32), and the ops that need range or precision
//! (softmax, norms, losses, reductions) run in f32. Weights stay f32 ("master weights"):
//! the casts are ordinary `to_dtype` ops recorded by autograd, so gradients flow back
//! through them and reach each weight in its own dtype.
//!
//! ```
//! use rnn_core::{autocast, DType, Device, Tensor};
//! # fn main() -> rnn_core::Result<()> {
//! let x = Tensor::randn(0.0, 1.0, (4, 3), DType::F32, Device::Cpu)?;
//! let w = Tensor::randn(0.0, 1.0, (3, 2), DType::F32, Device::Cpu)?.requires_grad();
//! let (y, loss) = autocast(DType::BF16, || -> rnn_core::Result<_> {
//!     let y = x.matmul(&w)?; // bf16
//!     let loss = y.sum_all()?; // f32
//!     Ok((y, loss))
//! })??;
//! assert_eq!((y.dtype(), loss.dtype()), (DType::BF16, DType::F32));
//! assert_eq!(loss.backward()?.get(&w).unwrap().dtype(), DType::F32);
//! # Ok(()) }
//! ```
//!
//! The state is per thread (like `no_grad`): a region opened on one thread does not affect
//! ops run on other threads, e.g. by a data loader or a thread pool the caller spawns.
//! Regions nest; the innermost wins, and `AutocastGuard::disabled` opens a region with
//! autocast off. The backward pass always runs with autocast off, so every gradient has
//! the dtype of the tensor it belongs to.
//!
//! Which op casts which way is [`AutocastOp::policy`], the one table of the policy.

use std::cell::RefCell;
use std::collections::HashMap;

use crate::{DType, Error, Result, Tensor, TensorId};

/// The ops autocast acts on.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum AutocastOp {
    Matmul,
    /// `Tensor::linear` (the fused linear op).
    Linear,
    /// 2-D convolution (`rnn_nn::Conv2d`).
    Conv2d,
    ScaledDotProductAttention,
    Softmax,
    LogSoftmax,
    LayerNorm,
    RmsNorm,
    BatchNorm,
    /// Cross-entropy, MSE and the other losses.
    Loss,
    /// `sum` and `mean` (and the other reductions built on them).
    Sum,
    Mean,
    /// Elementwise ops of two tensors (add, mul, ...) and `cat`: mixed float dtypes are
    /// promoted to the wider one, as PyTorch's type promotion does.
    Elementwise,
}

/// How an op's float inputs are cast inside an autocast region.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CastPolicy {
    /// To the region's 16-bit dtype (f64 inputs are left alone, as in PyTorch).
    Lower,
    /// 16-bit inputs up to f32.
    Float32,
    /// To the widest float dtype among the inputs, when they differ.
    Promote,
}

impl AutocastOp {
    /// The policy table (PyTorch's autocast op lists, for the ops this library has).
    pub fn policy(self) -> CastPolicy {
        use AutocastOp::*;
        match self {
            Matmul | Linear | Conv2d | ScaledDotProductAttention => CastPolicy::Lower,
            Softmax | LogSoftmax | LayerNorm | RmsNorm | BatchNorm | Loss | Sum | Mean => CastPolicy::Float32,
            Elementwise => CastPolicy::Promote,
        }
    }
}

/// The per-thread autocast state: the active dtype (None: off) and, while a region is
/// open, the casts of leaf weights already made in it (a weight used at every time step
/// is cast once per region, as PyTorch caches them).
#[derive(Default)]
struct State {
    dtype: Option<DType>,
    depth: usize,
    cache: HashMap<(TensorId, DType, bool), Tensor>,
}

thread_local! {
    static STATE: RefCell<State> = RefCell::new(State::default());
}

/// The dtype autocast casts to on this thread, `None` outside autocast regions.
pub fn autocast_dtype() -> Option<DType> {
    STATE.with(|s| s.borrow().dtype)
}

/// Whether an autocast region is active on this thread (cheap: the ops' fast path).
pub fn is_active() -> bool {
    autocast_dtype().is_some()
}

/// Runs `f` with autocast to `dtype` (bf16 or f16) on this thread and returns its value;
/// an error, before running `f`, for any other dtype.
pub fn autocast<R>(dtype: DType, f: impl FnOnce() -> R) -> Result<R> {
    let _guard = AutocastGuard::new(dtype)?;
    Ok(f())
}

/// Autocast on this thread until dropped (see the module docs); guards nest.
#[must_use = "autocast ends when the guard is dropped"]
pub struct AutocastGuard {
    previous: Option<DType>,
}

impl AutocastGuard {
    /// Autocast to `dtype`, which must be `DType::BF16` or `DType::F16`.
    pub fn new(dtype: DType) -> Result<Self> {
        if !matches!(dtype, DType::BF16 | DType::F16) {
            let hint = ": autocast runs in bf16 or f16 (use no region for f32)";
            return Err(Error::UnsupportedDType { op: "autocast", dtype, hint });
        }
        Ok(Self::enter(Some(dtype)))
    }

    /// Autocast off until dropped, e.g. for a part of a model that must run in f32.
    pub fn disabled() -> Self {
        Self::enter(None)
    }

    pub(crate) fn enter(dtype: Option<DType>) -> Self {
        STATE.with(|s| {
            let mut s = s.borrow_mut();
            s.depth += 1;
            AutocastGuard { previous: std::mem::replace(&mut s.dtype, dtype) }
        })
    }
}

impl Drop for AutocastGuard {
    fn drop(&mut self) {
        STATE.with(|s| {
            let mut s = s.borrow_mut();
            s.dtype = self.previous;
            s.depth -= 1;
            if s.depth == 0 {
                s.cache.clear();
            }
        })
    }
}

/// Forgets the casts made so far in this thread's region. The backward pass calls it: the
/// optimizer step that usually follows changes the weights in place, and a training loop
/// written inside one region must see them cast anew.
pub(crate) fn clear_cache() {
    STATE.with(|s| s.borrow_mut().cache.clear())
}

/// The inputs of `op` cast by the autocast policy (clones when autocast is off or nothing
/// needs a cast), then `body` run on them with autocast off, so that the ops it is made of
/// are not cast again. Layers outside this crate call it for the ops they implement.
pub fn autocast_op<R>(op: AutocastOp, inputs: &[&Tensor], body: impl FnOnce(&[Tensor]) -> Result<R>) -> Result<R> {
    let Some(low) = autocast_dtype() else {
        let inputs: Vec<Tensor> = inputs.iter().map(|t| (*t).clone()).collect();
        return body(&inputs);
    };
    let cast = cast_inputs(op, low, inputs)?;
    let _off = AutocastGuard::disabled();
    body(&cast)
}

/// `t` cast as `op`'s policy says inside an autocast region (itself outside one), for
/// layers that cast an input and go on with autocast on (e.g. batch norm into f32).
pub fn cast(op: AutocastOp, t: &Tensor) -> Result<Tensor> {
    match autocast_dtype() {
        Some(low) => Ok(cast_inputs(op, low, &[t])?.swap_remove(0)),
        None => Ok(t.clone()),
    }
}

/// `inputs` cast as `op`'s policy says for a region in `low`.
fn cast_inputs(op: AutocastOp, low: DType, inputs: &[&Tensor]) -> Result<Vec<Tensor>> {
    let target = |t: &Tensor| -> Option<DType> {
        match op.policy() {
            CastPolicy::Lower => matches!(t.dtype(), DType::F32 | DType::F16 | DType::BF16).then_some(low),
            CastPolicy::Float32 => matches!(t.dtype(), DType::F16 | DType::BF16).then_some(DType::F32),
            CastPolicy::Promote => widest_float(inputs),
        }
    };
    inputs
        .iter()
        .map(|t| match target(t) {
            Some(to) if t.dtype().is_float() && t.dtype() != to => cached_cast(t, to),
            _ => Ok((*t).clone()),
        })
        .collect()
}

/// The widest float dtype of `inputs` when they have more than one, else `None`.
fn widest_float(inputs: &[&Tensor]) -> Option<DType> {
    let floats: Vec<DType> = inputs.iter().map(|t| t.dtype()).filter(|d| d.is_float()).collect();
    let first = *floats.first()?;
    if floats.iter().all(|&d| d == first) {
        return None;
    }
    // f16 and bf16 together promote to f32, as in PyTorch.
    let rank = |d: DType| match d {
        DType::F64 => 3,
        DType::F32 => 2,
        _ => 1,
    };
    let widest = floats.iter().copied().max_by_key(|&d| rank(d))?;
    Some(if rank(widest) == 1 { DType::F32 } else { widest })
}

/// `t.to_dtype(to)`, reusing the cast made earlier in this region when `t` is a leaf
/// variable (a weight): its value cannot change inside one forward pass.
fn cached_cast(t: &Tensor, to: DType) -> Result<Tensor> {
    if !t.is_variable() {
        return t.to_dtype(to);
    }
    // A cast made under `no_grad` records no graph: it must not serve a tracked use.
    let key = (t.id(), to, crate::grad_enabled());
    if let Some(hit) = STATE.with(|s| s.borrow().cache.get(&key).cloned()) {
        return Ok(hit);
    }
    let cast = t.to_dtype(to)?;
    STATE.with(|s| s.borrow_mut().cache.insert(key, cast.clone()));
    Ok(cast)
}
