//! Reverse-mode autograd, candle style: each result remembers its `Op` and inputs;
//! `backward()` orders the graph topologically and applies one gradient function per op
//! family. Gradients are written in tensor ops, so every backend gets them for free.

use std::cell::Cell;
use std::collections::{HashMap, HashSet};

use crate::op_table::{BinaryOp, ReduceOp, UnaryOp};
use crate::storage::Storage;
use crate::tensor::TensorId;
use crate::{Device, Error, Result, Tensor};

/// How a tensor was computed from its inputs.
#[derive(Clone)]
pub(crate) enum Op {
    Unary(Tensor, UnaryOp),
    Binary(Tensor, Tensor, BinaryOp),
    WhereCond(Tensor, Tensor, Tensor),
    /// Reduction keeping the reduced dims with size 1.
    Reduce(Tensor, ReduceOp),
    Matmul(Tensor, Tensor),
    /// A fused op (`fused/`), its inputs and the extra outputs its forward saved for the
    /// backward (say, per-row statistics).
    Fused(std::sync::Arc<dyn crate::fused::FusedOp>, Vec<Tensor>, Vec<Tensor>),
    Reshape(Tensor),
    Permute(Tensor, Vec<usize>),
    Narrow(Tensor, usize, usize),
    Broadcast(Tensor),
    /// Contiguous copy or device transfer.
    Copy(Tensor),
    ToDType(Tensor),
    Cat(Vec<Tensor>, usize),
    IndexSelect(Tensor, Tensor, usize),
    Gather(Tensor, Tensor, usize),
    ScatterAdd(Tensor, Tensor, Tensor, usize),
    /// Sliding windows of a `[N, C, H, W]` input (im2col).
    Unfold2d(Tensor, crate::Window2d),
    /// The adjoint of `Unfold2d`: window elements summed back into a `[N, C, H, W]` tensor.
    Fold2d(Tensor, crate::Window2d),
}

impl Op {
    pub(crate) fn inputs(&self) -> Vec<&Tensor> {
        match self {
            Op::Unary(a, _) | Op::Reduce(a, _) | Op::Reshape(a) | Op::Permute(a, _) | Op::Narrow(a, _, _) => vec![a],
            Op::Broadcast(a) | Op::Copy(a) | Op::ToDType(a) => vec![a],
            Op::IndexSelect(a, _, _) | Op::Gather(a, _, _) => vec![a],
            Op::Unfold2d(a, _) | Op::Fold2d(a, _) => vec![a],
            Op::Binary(a, b, _) | Op::Matmul(a, b) => vec![a, b],
            Op::WhereCond(_, t, f) => vec![t, f],
            Op::ScatterAdd(a, _, s, _) => vec![a, s],
            Op::Cat(xs, _) | Op::Fused(_, xs, _) => xs.iter().collect(),
        }
    }
}

impl Op {
    /// Every tensor the op holds (inputs, indices, saved outputs), moved out, so that a
    /// dropped graph can be taken apart without recursion (`TensorInner`'s `Drop`).
    pub(crate) fn into_tensors(self, out: &mut Vec<Tensor>) {
        match self {
            Op::Unary(a, _) | Op::Reduce(a, _) | Op::Reshape(a) | Op::Permute(a, _) | Op::Narrow(a, _, _) => {
                out.push(a)
            }
            Op::Broadcast(a) | Op::Copy(a) | Op::ToDType(a) => out.push(a),
            Op::Unfold2d(a, _) | Op::Fold2d(a, _) => out.push(a),
            Op::Binary(a, b, _) | Op::Matmul(a, b) => out.extend([a, b]),
            Op::IndexSelect(a, i, _) | Op::Gather(a, i, _) => out.extend([a, i]),
            Op::WhereCond(c, t, f) => out.extend([c, t, f]),
            Op::ScatterAdd(a, i, s, _) => out.extend([a, i, s]),
            Op::Cat(xs, _) => out.extend(xs),
            Op::Fused(_, xs, saved) => out.extend(xs.into_iter().chain(saved)),
        }
    }
}

thread_local! {
    static GRAD_ENABLED: Cell<bool> = const { Cell::new(true) };
}

/// Whether ops are recorded for autograd on this thread (false inside `no_grad`).
pub fn grad_enabled() -> bool {
    GRAD_ENABLED.with(|g| g.get())
}

/// Runs `f` without recording ops for autograd (inference, optimizer updates).
pub fn no_grad<R>(f: impl FnOnce() -> R) -> R {
    let _guard = NoGradGuard::new();
    f()
}

/// Turns gradient recording off on this thread until dropped.
pub struct NoGradGuard(#[allow(dead_code)] GradModeGuard);

impl NoGradGuard {
    pub fn new() -> Self {
        NoGradGuard(GradModeGuard::set(false))
    }
}

impl Default for NoGradGuard {
    fn default() -> Self {
        Self::new()
    }
}

/// Sets this thread's grad mode until dropped (to carry the caller's mode to another thread).
pub(crate) struct GradModeGuard {
    previous: bool,
}

impl GradModeGuard {
    pub(crate) fn set(enabled: bool) -> Self {
        GradModeGuard { previous: GRAD_ENABLED.with(|g| g.replace(enabled)) }
    }
}

impl Drop for GradModeGuard {
    fn drop(&mut self) {
        GRAD_ENABLED.with(|g| g.set(self.previous));
    }
}

/// Gradients by tensor id, as returned by `backward`.
#[derive(Default, Clone)]
pub struct GradStore(HashMap<TensorId, Tensor>);

impl GradStore {
    pub fn new() -> Self {
        Self::default()
    }
    pub fn get(&self, t: &Tensor) -> Option<&Tensor> {
        self.0.get(&t.id())
    }
    pub fn get_id(&self, id: TensorId) -> Option<&Tensor> {
        self.0.get(&id)
    }
    pub fn remove(&mut self, t: &Tensor) -> Option<Tensor> {
        self.0.remove(&t.id())
    }
    pub fn insert(&mut self, t: &Tensor, grad: Tensor) {
        self.0.insert(t.id(), grad);
    }
    pub fn len(&self) -> usize {
        self.0.len()
    }
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Adds `grad` to the gradient of `t` (or sets it). The sum is written into the stored
    /// gradient's own buffer when no one else can see that buffer (see `add_in_place`).
    pub fn accumulate(&mut self, t: &Tensor, grad: Tensor) -> Result<()> {
        let sum = match self.0.remove(&t.id()) {
            Some(prev) => add_in_place(prev, &grad)?,
            None => grad,
        };
        self.0.insert(t.id(), sum);
        Ok(())
    }
}

/// `prev + grad`, in `prev`'s buffer when that is safe: both on the CPU, of one shape and
/// dtype, neither recording a graph, and `prev` the sole owner of its whole storage (no
/// other handle, no view: a gradient the caller kept, or one shared by two inputs of an op,
/// is left alone). Otherwise, or if the in-place add fails, a new tensor as `Tensor::add`.
fn add_in_place(prev: Tensor, grad: &Tensor) -> Result<Tensor> {
    let fits = prev.device() == Device::Cpu
        && grad.device() == Device::Cpu
        && prev.shape() == grad.shape()
        && prev.dtype() == grad.dtype()
        && !prev.tracks_grad()
        && !grad.tracks_grad()
        && prev.is_sole_owner();
    let added = fits && {
        // `prev` shares its storage with no one, so `grad` cannot: these locks are distinct.
        let (mut dst, src) = (prev.storage_mut(), grad.storage());
        match (&mut *dst, &*src) {
            (Storage::Cpu(d), Storage::Cpu(s)) => d.binary_assign(s, grad.layout(), BinaryOp::Add).is_ok(),
            _ => false,
        }
    };
    match added {
        true => Ok(prev),
        false => prev.add(grad),
    }
}

/// Nodes that lead to a variable, children before parents (so reversed it is a valid
/// backward order). Iterative: deep graphs (long unrolled RNNs) must not overflow the stack.
fn sorted_nodes(root: &Tensor) -> Vec<Tensor> {
    let mut order = Vec::new();
    let mut visited = HashSet::new();
    let mut stack = vec![(root.clone(), false)];
    while let Some((node, expanded)) = stack.pop() {
        if expanded {
            order.push(node);
            continue;
        }
        if !visited.insert(node.id()) {
            continue;
        }
        stack.push((node.clone(), true));
        if let Some(op) = node.op() {
            for input in op.inputs() {
                if input.tracks_grad() && !visited.contains(&input.id()) {
                    stack.push((input.clone(), false));
                }
            }
        }
    }
    order
}

impl Tensor {
    /// Gradients of this tensor with respect to every tracked tensor it depends on. A
    /// non-scalar tensor is seeded with ones (the gradient of its sum).
    pub fn backward(&self) -> Result<GradStore> {
        let mut grads = GradStore::new();
        self.backward_into(&mut grads)?;
        Ok(grads)
    }

    /// Like `backward`, but adds into `grads`: several calls accumulate, as in PyTorch.
    pub fn backward_into(&self, grads: &mut GradStore) -> Result<()> {
        self.backward_with_hook(grads, &mut |_, _| Ok(()))
    }

    /// Like `backward_into`, and calls `on_ready(variable, gradient)` as soon as a
    /// variable's gradient is final (its value in `grads`, summed with earlier calls), while
    /// the rest of the graph is still to be differentiated: data-parallel training starts
    /// averaging a gradient across processes there, overlapping the rest of the backward
    /// pass. Variables are reported once each, the ones nearest the output first (the
    /// reverse of the forward order). An error from `on_ready` stops the pass and is
    /// returned; `grads` then holds the gradients reported so far.
    pub fn backward_with_hook(
        &self,
        grads: &mut GradStore,
        on_ready: &mut dyn FnMut(&Tensor, &Tensor) -> Result<()>,
    ) -> Result<()> {
        if !self.tracks_grad() {
            return Err(Error::Backward {
                msg: "the tensor does not depend on any variable (call requires_grad on an input)".into(),
            });
        }
        if !self.dtype().is_float() {
            return Err(Error::Backward { msg: format!("gradients need a float tensor, got {}", self.dtype()) });
        }
        let _guard = NoGradGuard::new();
        // Gradients keep the dtype of their tensors: no autocast in the backward pass.
        let _no_autocast = crate::autocast::AutocastGuard::disabled();
        crate::autocast::clear_cache();
        let order = sorted_nodes(self);
        let mut waiting = consumer_counts(&order);
        let mut pending = GradStore::new();
        pending.insert(self, self.ones_like()?);
        // Reversed, `sorted_nodes` visits every consumer of a node before the node. A variable
        // is finished as soon as its last consumer is done (not when the walk reaches it:
        // leaves come last), so gradients of the last layers are reported first.
        for node in order.iter().rev().filter(|n| !n.is_variable()) {
            let Some(op) = node.op() else { continue };
            if let Some(grad) = pending.remove(node) {
                for (input, g) in crate::grad_fns::input_grads(op, node, &grad)? {
                    if input.tracks_grad() {
                        pending.accumulate(input, g)?;
                    }
                }
            }
            for input in op.inputs().into_iter().filter(|i| i.is_variable()) {
                let left = waiting.entry(input.id()).or_insert(1);
                *left -= 1;
                if *left == 0 {
                    finish_variable(input, &mut pending, grads, on_ready)?;
                }
            }
        }
        // What the walk left: the root itself when it is a variable.
        for node in order.iter().rev().filter(|n| n.is_variable()) {
            finish_variable(node, &mut pending, grads, on_ready)?;
        }
        Ok(())
    }
}

/// How many edges of the graph lead from each variable to an op that consumes it.
fn consumer_counts(order: &[Tensor]) -> HashMap<TensorId, usize> {
    let mut counts = HashMap::new();
    for node in order {
        for input in node.op().into_iter().flat_map(|op| op.inputs()) {
            if input.is_variable() {
                *counts.entry(input.id()).or_insert(0) += 1;
            }
        }
    }
    counts
}

/// Moves a variable's finished gradient (if any flowed to it) into `grads` and reports it.
fn finish_variable(
    node: &Tensor,
    pending: &mut GradStore,
    grads: &mut GradStore,
    on_ready: &mut dyn FnMut(&Tensor, &Tensor) -> Result<()>,
) -> Result<()> {
    let Some(grad) = pending.remove(node) else { return Ok(()) };
    grads.accumulate(node, grad)?;
    match grads.get(node) {
        Some(total) => on_ready(node, total),
        None => Ok(()),
    }
}
