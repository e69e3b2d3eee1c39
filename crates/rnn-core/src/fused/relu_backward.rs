//! ReLU's gradient in one pass: `g` where the ReLU's input `x` is above 0, else 0, as
//! PyTorch's `threshold_backward(g, x, 0)` (a NaN `x` passes `g` on; where `x <= 0` the
//! result is 0 even when `g` is NaN). The composition it replaces is a comparison, a zeros
//! tensor and a select: three passes and two temporaries. `relu`'s backward, the ReLU
//! epilogue of Linear and Conv2d's composed backward (where its CPU kernel, which masks as it
//! goes, does not run) use it; for the epilogues the output `relu(z)` stands for the input:
//! it is above 0 exactly where `z` is, and NaN where `z` is. The CPU has the kernel; GPUs
//! run the composition.

use std::sync::Arc;

use super::rows::{compute_slice, float_only, store, Compute};
use super::FusedOp;
use crate::cpu::parallel::{output_vec, par_fill};
use crate::cpu::simd::zip_slice;
use crate::cpu::CpuStorage;
use crate::gpu::plan::Program;
use crate::gpu::target::Target;
use crate::{DType, Error, Layout, Result, Shape, Tensor};

/// The gradient of `relu(x)` given the gradient `g` of its output: inputs x, g (one shape).
#[derive(Clone, Copy, Debug)]
pub(crate) struct ReluBackward;

/// `g` where `x > 0` (or x is NaN), else 0: one fused op.
pub(crate) fn relu_backward(x: &Tensor, g: &Tensor) -> Result<Tensor> {
    Tensor::fused(Arc::new(ReluBackward), &[x, g])
}

/// The CPU kernel in the compute type (halves in f32: the result is `g` or 0, exact).
fn masked<F: Compute>(inputs: &[(&CpuStorage, &Layout)]) -> Result<Vec<CpuStorage>> {
    let ((xs, xl), (gs, gl)) = (inputs[0], inputs[1]);
    let (x, g) = (compute_slice::<F>(xs, xl)?, compute_slice::<F>(gs, gl)?);
    // Every element is written below.
    let mut out = output_vec::<F>(x.len())?;
    par_fill(&mut out, 1, |chunk, first| {
        let range = first..first + chunk.len();
        // `x <= 0`, not `!(x > 0)`: NaN compares false, so a NaN x keeps g.
        zip_slice(&x[range.clone()], &g[range], chunk, &|x, g| if x <= F::c(0.0) { F::c(0.0) } else { g });
    });
    Ok(vec![store(out, gs.dtype())?])
}

impl FusedOp for ReluBackward {
    fn name(&self) -> &'static str {
        "relu_backward"
    }

    fn output(&self, inputs: &[&Tensor]) -> Result<(Shape, DType)> {
        let (x, g) = (inputs[0], inputs[1]);
        float_only(self.name(), g.dtype())?;
        if x.dtype() != g.dtype() {
            return Err(Error::DTypeMismatch { op: self.name(), lhs: x.dtype(), rhs: g.dtype() });
        }
        if x.shape() != g.shape() {
            return Err(Error::ShapeMismatch { op: self.name(), lhs: x.shape().clone(), rhs: g.shape().clone() });
        }
        Ok((g.shape().clone(), g.dtype()))
    }

    fn cpu(&self, inputs: &[(&CpuStorage, &Layout)]) -> Result<Option<Vec<CpuStorage>>> {
        let out = match inputs[1].0.dtype() {
            DType::F64 => masked::<f64>(inputs),
            _ => masked::<f32>(inputs),
        };
        out.map(Some)
    }

    fn gpu(&self, _: &Target, _: &[(DType, &Layout, usize)]) -> Result<Option<Program>> {
        Ok(None)
    }

    fn compose(&self, inputs: &[Tensor]) -> Result<Vec<Tensor>> {
        let (x, g) = (&inputs[0], &inputs[1]);
        Ok(vec![x.le_scalar(0.0)?.where_cond(&g.zeros_like()?, g)?])
    }

    fn backward(&self, _: &[Tensor], _: &[Tensor], _: &Tensor, _: &Tensor) -> Result<Vec<Option<Tensor>>> {
        Err(Error::invalid(self.name(), "the gradient of ReLU's gradient (double backward) is not supported"))
    }
}
