//! Fused ops: an op with kernels of its own on each backend, defined in one module each
//! (CPU forward, the GPU program built from its CUDA and WGSL kernels, a composition of
//! other ops for devices without a kernel, and the mandatory backward), registered with one
//! line in `fused_ops!` below.
//!
//! Adding one touches its module here, its kernel sources (`rnn-kernels/cuda/*.cu`,
//! `rnn-kernels/wgsl/*.wgsl`, exported from rnn-kernels' lib.rs) and its registration line;
//! the kernel-compile test, the CUDA emulator tests and autograd pick it up from there.

// Without a GPU backend the plans are only built by tests.
#![cfg_attr(not(any(feature = "wgpu", feature = "cuda")), allow(dead_code))]

use std::sync::Arc;

use crate::autocast::{self, AutocastOp};
use crate::backprop::Op;
use crate::cpu::CpuStorage;
use crate::gpu::plan::{KernelSource, Program};
use crate::gpu::target::Target;
use crate::{no_grad, DType, Error, Layout, Result, Shape, Tensor};

/// One fused op with its parameters (a value of a registered type).
pub(crate) trait FusedOp: Send + Sync {
    fn name(&self) -> &'static str;

    /// Which entry of the autocast policy table this op is (`None`: autocast leaves it be).
    fn autocast(&self) -> Option<AutocastOp> {
        None
    }

    /// Checks the inputs (shapes, dtypes) and gives the output's shape and dtype.
    fn output(&self, inputs: &[&Tensor]) -> Result<(Shape, DType)>;

    /// The shapes and dtypes of the extra outputs the forward writes after its output and
    /// saves for the backward (say, attention's per-row log-sum-exp, a norm's mean and
    /// rstd). Called after `output` accepted the inputs.
    fn saved(&self, inputs: &[&Tensor]) -> Result<Vec<(Shape, DType)>> {
        let _ = inputs;
        Ok(Vec::new())
    }

    /// The forward on the CPU into contiguous results (the output, then the saved extra
    /// outputs), or `None` to compose.
    fn cpu(&self, inputs: &[(&CpuStorage, &Layout)]) -> Result<Option<Vec<CpuStorage>>>;

    /// The forward on a GPU as a program over the inputs (dtype, layout, storage length),
    /// or `None` to compose. A program with saved outputs is built with
    /// `Program::with_outputs`.
    fn gpu(&self, target: &Target, inputs: &[(DType, &Layout, usize)]) -> Result<Option<Program>>;

    /// The forward from other ops, where there is no fused kernel (run without gradients):
    /// the output, then the saved extra outputs.
    fn compose(&self, inputs: &[Tensor]) -> Result<Vec<Tensor>> {
        let _ = inputs;
        Err(Error::Msg(format!("internal: {} has a kernel on every backend", self.name())))
    }

    /// The gradient of each input that tracks one (`None` for the others), given the saved
    /// extra outputs, the output `y` and the gradient `g` of the loss with respect to it.
    fn backward(&self, inputs: &[Tensor], saved: &[Tensor], y: &Tensor, g: &Tensor) -> Result<Vec<Option<Tensor>>>;
}

/// Every kernel a fused op type can launch, for the compile test and the emulator tests.
pub(crate) trait FusedKernels {
    /// (variant label, source) of every kernel of this op type for `target`.
    fn variants(target: &Target) -> Vec<(String, KernelSource)>;
}

/// Declares the fused op modules and lists their kernels: one line per op.
macro_rules! fused_ops {
    ($($module:ident :: $ty:ident),* $(,)?) => {
        $(pub(crate) mod $module;)*

        /// Every kernel of every fused op for `target`.
        pub(crate) fn variants(target: &Target) -> Vec<(String, KernelSource)> {
            let mut all = Vec::new();
            $(all.extend(<$module::$ty as FusedKernels>::variants(target));)*
            all
        }
    };
}

fused_ops! {
    softmax::Softmax,
    linear::Linear,
    attention::Attention,
    norm::Norm,
    cross_entropy::CrossEntropy,
    bias_gelu::BiasGelu,
    conv::Conv2d,
    pool::Pool2d,
    batch_norm::BatchNorm,
}

// Kernels and helpers of the norms, cross entropy, bias + GELU, Linear's CPU forward and
// batch norm's CPU passes.
mod batch_norm_cpu;
mod linear_cpu;
mod norm_gpu;
// CPU kernel only: GPUs compose it (no kernels to list above).
pub(crate) mod relu_backward;
mod rows;

impl Tensor {
    /// Runs a fused op on `inputs` (all on one device) and records it for autograd.
    pub(crate) fn fused(op: Arc<dyn FusedOp>, inputs: &[&Tensor]) -> Result<Tensor> {
        Ok(Tensor::fused_outputs(op, inputs)?.swap_remove(0))
    }

    /// Runs a fused op on `inputs` (all on one device): its output, recorded for autograd,
    /// then the extra outputs it saved for the backward (not differentiable).
    pub(crate) fn fused_outputs(op: Arc<dyn FusedOp>, inputs: &[&Tensor]) -> Result<Vec<Tensor>> {
        if let Some(policy) = op.autocast().filter(|_| autocast::is_active()) {
            return autocast::autocast_op(policy, inputs, |cast| {
                Tensor::fused_outputs(op, &cast.iter().collect::<Vec<_>>())
            });
        }
        let (shape, _) = op.output(inputs)?;
        let saved_shapes = op.saved(inputs)?;
        if let Some(other) = inputs.iter().find(|t| t.device() != inputs[0].device()) {
            return Err(Error::DeviceMismatch { op: op.name(), lhs: inputs[0].device(), rhs: other.device() });
        }
        let owned: Vec<Tensor> = inputs.iter().map(|t| (*t).clone()).collect();
        let result = {
            let guards: Vec<_> = inputs.iter().map(|t| t.storage()).collect();
            let parts: Vec<_> = guards.iter().zip(inputs).map(|(g, t)| (&**g, t.layout())).collect();
            crate::storage::Storage::fused(op.as_ref(), &parts)?
        };
        let outputs: Vec<Tensor> = match result {
            Some(storages) => {
                let shapes = std::iter::once(shape).chain(saved_shapes.into_iter().map(|(s, _)| s));
                storages
                    .into_iter()
                    .zip(shapes)
                    .map(|(s, shape)| Tensor::from_parts(s, Layout::contiguous(shape), None))
                    .collect()
            }
            None => no_grad(|| op.compose(&owned))?,
        };
        let Some((y, saved)) = outputs.split_first() else {
            return Err(Error::Msg(format!("internal: {} gave no output", op.name())));
        };
        let record = Some(Op::Fused(op.clone(), owned, saved.to_vec()));
        let y = y.view(y.layout().clone(), record);
        Ok(std::iter::once(y).chain(saved.iter().cloned()).collect())
    }
}
