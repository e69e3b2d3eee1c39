//! Fused batch normalization with batch statistics (`Tensor::batch_norm`, PyTorch's
//! `F.batch_norm(x, None, None, w, b, training=True, eps=eps)`, optionally plus a residual
//! and followed by a ReLU, as a ResNet block ends): the statistics over every dim but the
//! channels (dim 1).
//!
//! On the CPU (any float dtype; half types compute in f32) the forward takes each
//! channel's mean and biased variance in two passes over its planes, then writes the output
//! in one pass; it saves the mean and the variance (`[C]`, f32, f64 for f64 inputs). The
//! backward takes two sums per channel in one pass (`sum(g)`, `sum(g * (x - mean))`,
//! with ReLU's mask read from the output) and writes `dx` in one more
//! (`batch_norm_cpu.rs`). GPUs run the composition (mean, centered squares, normalize,
//! scale, shift) and a backward written in the same ops.

use std::sync::Arc;

use super::attention::stat_dtype;
use super::batch_norm_cpu::{self as kernels, Affine, BackwardInputs, Planes};
use super::rows::{compute_slice, float_only, store, Compute};
use super::{FusedKernels, FusedOp};
use crate::cpu::CpuStorage;
use crate::gpu::plan::{KernelSource, Program};
use crate::gpu::target::Target;
use crate::storage::Storage;
use crate::{DType, Error, Layout, Result, Shape, Tensor};

const OP: &str = "batch_norm";

/// Inputs: x `[N, C, ...]`, then the weight when `weight`, then the bias when `bias` (both
/// `[C]`, x's dtype), then the residual when `residual` (x's shape and dtype). Output:
/// `relu?(xhat * weight + bias + residual)`; saved: the batch mean and the biased batch
/// variance, `[C]` each.
#[derive(Clone, Copy, Debug)]
pub(crate) struct BatchNorm {
    pub eps: f64,
    pub weight: bool,
    pub bias: bool,
    pub residual: bool,
    pub relu: bool,
}

impl BatchNorm {
    /// Checks the inputs; gives the number of channels.
    fn check(&self, inputs: &[&Tensor]) -> Result<usize> {
        let want = self.residual_index() + self.residual as usize;
        if inputs.len() != want {
            return Err(Error::Msg(format!("internal: {OP} takes {want} inputs, got {}", inputs.len())));
        }
        let x = inputs[0];
        float_only(OP, x.dtype())?;
        if x.rank() < 2 || x.elem_count() == 0 {
            let msg = format!("expected a non-empty [N, C, ...] input, got shape {:?}", x.shape());
            return Err(Error::invalid(OP, msg));
        }
        let c = x.dims()[1];
        for (i, p) in inputs.iter().enumerate().skip(1) {
            if p.dtype() != x.dtype() {
                return Err(Error::DTypeMismatch { op: OP, lhs: x.dtype(), rhs: p.dtype() });
            }
            let want: &[usize] = if i == self.residual_index() { x.dims() } else { &[c] };
            if p.dims() != want {
                return Err(Error::ShapeMismatch { op: OP, lhs: x.shape().clone(), rhs: p.shape().clone() });
            }
        }
        Ok(c)
    }

    /// The position of the residual among the inputs (after x and the parameters).
    fn residual_index(&self) -> usize {
        1 + self.weight as usize + self.bias as usize
    }

    fn planes(dims: &[usize]) -> Planes {
        Planes { n: dims[0], c: dims[1], plane: dims[2..].iter().product() }
    }

    fn cpu_in<F: Compute>(&self, inputs: &[(&CpuStorage, &Layout)]) -> Result<Vec<CpuStorage>> {
        let (xs, xl) = inputs[0];
        let x = compute_slice::<F>(xs, xl)?;
        let mut rest = inputs[1..].iter();
        let mut next = |present: bool| match present {
            true => rest.next().map(|(s, l)| compute_slice::<F>(s, l)).transpose(),
            false => Ok(None),
        };
        let (w, b, r) = (next(self.weight)?, next(self.bias)?, next(self.residual)?);
        let p = Self::planes(xl.dims());
        let (mean, var) = kernels::statistics(&x, p);
        let affine = Affine { weight: w.as_deref(), bias: b.as_deref(), eps: self.eps, relu: self.relu };
        let y = kernels::normalize(&x, r.as_deref(), p, (&mean, &var), &affine)?;
        let stats = |v: Vec<f64>| store(v, stat_dtype(xs.dtype()));
        Ok(vec![store(y, xs.dtype())?, stats(mean)?, stats(var)?])
    }

    /// The dims the statistics are taken over, and the `[1, C, 1, ..]` shape that
    /// broadcasts a per-channel tensor against x.
    fn reduced_dims(x: &Tensor) -> (Vec<usize>, Vec<usize>) {
        let dims = (0..x.rank()).filter(|&d| d != 1).collect();
        let mut channel = vec![1; x.rank()];
        channel[1] = x.dims()[1];
        (dims, channel)
    }

    /// The per-channel scale `weight / sqrt(var + eps)` as `[1, C, 1, ..]`, from the
    /// variance in any shape of `C` elements.
    fn scale(&self, weight: Option<&Tensor>, var: &Tensor, channel: &[usize]) -> Result<Tensor> {
        let rstd = var.add_scalar(self.eps)?.sqrt()?.recip()?.flatten_all()?;
        let scale = match weight {
            Some(w) => rstd.mul(&w.to_dtype(rstd.dtype())?)?,
            None => rstd,
        };
        scale.reshape(channel.to_vec())
    }

    /// The gradients through ops (GPUs): the same formula as the CPU kernel.
    fn composed_grads(&self, inputs: &[Tensor], saved: &[Tensor], y: &Tensor, g: &Tensor) -> Result<Vec<Tensor>> {
        let x = &inputs[0];
        let st = stat_dtype(x.dtype());
        let (dims, channel) = Self::reduced_dims(x);
        let mut g = g.to_dtype(st)?;
        if self.relu {
            g = g.mul(&y.gt_scalar(0.0)?.to_dtype(st)?)?;
        }
        let (mean, var) = (saved[0].reshape(channel.clone())?, &saved[1]);
        let rstd = var.add_scalar(self.eps)?.sqrt()?.recip()?.reshape(channel.clone())?;
        let xhat = x.to_dtype(st)?.sub(&mean)?.mul(&rstd)?;
        let count = (x.elem_count() / x.dims()[1]) as f64;
        let sum_g = g.sum_keepdim(dims.clone())?;
        let sum_gxhat = g.mul(&xhat)?.sum_keepdim(dims)?;
        let weight = inputs.get(1).filter(|_| self.weight);
        let scale = self.scale(weight, var, &channel)?;
        let centered_g = g.sub(&sum_g.mul_scalar(1.0 / count)?)?;
        let dx = centered_g.sub(&xhat.mul(&sum_gxhat.mul_scalar(1.0 / count)?)?)?.mul(&scale)?;
        let c = x.dims()[1];
        let mut grads = vec![dx.to_dtype(x.dtype())?];
        if self.weight {
            grads.push(sum_gxhat.reshape(c)?.to_dtype(x.dtype())?);
        }
        if self.bias {
            grads.push(sum_g.reshape(c)?.to_dtype(x.dtype())?);
        }
        if self.residual {
            grads.push(g.to_dtype(x.dtype())?);
        }
        Ok(grads)
    }

    /// The gradients by the CPU kernel.
    fn cpu_grads<F: Compute>(&self, inputs: &[Tensor], saved: &[Tensor], y: &Tensor, g: &Tensor) -> Result<Vec<Tensor>> {
        let x = &inputs[0];
        let mut tensors = vec![x, y, g];
        tensors.extend(&inputs[1..self.residual_index()]);
        let guards: Vec<_> = tensors.iter().map(|t| t.storage()).collect();
        let slices = guards
            .iter()
            .zip(&tensors)
            .map(|(guard, t)| match &**guard {
                Storage::Cpu(s) => compute_slice::<F>(s, t.layout()),
                _ => Err(Error::invalid(OP, format!("internal: expected a CPU tensor, got one on {}", t.device()))),
            })
            .collect::<Result<Vec<_>>>()?;
        let stats = |t: &Tensor| t.to_dtype(DType::F64)?.to_vec::<f64>();
        let (mean, var) = (stats(&saved[0])?, stats(&saved[1])?);
        let mut params = slices[3..].iter();
        let w = if self.weight { params.next().map(|w| &w[..]) } else { None };
        let affine = Affine { weight: w, bias: None, eps: self.eps, relu: self.relu };
        let t = BackwardInputs { x: &slices[0], y: &slices[1], g: &slices[2] };
        let grads = kernels::backward(&t, Self::planes(x.dims()), (&mean, &var), &affine)?;
        let tensor = |v: Vec<F>, shape: Shape| -> Result<Tensor> {
            Ok(Tensor::from_parts(Storage::Cpu(store(v, x.dtype())?), Layout::contiguous(shape), None))
        };
        let per_channel = |v: Vec<f64>| tensor(v.into_iter().map(F::c).collect(), Shape::from(vec![x.dims()[1]]));
        let mut out = vec![tensor(grads.dx, x.shape().clone())?];
        if self.weight {
            out.push(per_channel(grads.dweight)?);
        }
        if self.bias {
            out.push(per_channel(grads.dbias)?);
        }
        if self.residual {
            // The residual's gradient: g itself, or g through ReLU's mask.
            out.push(match self.relu {
                true => tensor(kernels::masked_grad(&slices[2], &slices[1], Self::planes(x.dims()))?, x.shape().clone())?,
                false => g.clone(),
            });
        }
        Ok(out)
    }
}

impl FusedOp for BatchNorm {
    fn name(&self) -> &'static str {
        OP
    }

    fn output(&self, inputs: &[&Tensor]) -> Result<(Shape, DType)> {
        self.check(inputs)?;
        Ok((inputs[0].shape().clone(), inputs[0].dtype()))
    }

    fn saved(&self, inputs: &[&Tensor]) -> Result<Vec<(Shape, DType)>> {
        let c = self.check(inputs)?;
        Ok(vec![(Shape::from(vec![c]), stat_dtype(inputs[0].dtype())); 2])
    }

    fn cpu(&self, inputs: &[(&CpuStorage, &Layout)]) -> Result<Option<Vec<CpuStorage>>> {
        match inputs[0].0.dtype() {
            DType::F64 => self.cpu_in::<f64>(inputs).map(Some),
            _ => self.cpu_in::<f32>(inputs).map(Some),
        }
    }

    fn gpu(&self, _: &Target, _: &[(DType, &Layout, usize)]) -> Result<Option<Program>> {
        Ok(None)
    }

    fn compose(&self, inputs: &[Tensor]) -> Result<Vec<Tensor>> {
        let x = &inputs[0];
        let st = stat_dtype(x.dtype());
        let (dims, channel) = Self::reduced_dims(x);
        let xs = x.to_dtype(st)?;
        let mean = xs.mean_keepdim(dims.clone())?;
        let centered = xs.sub(&mean)?;
        let var = centered.sqr()?.mean_keepdim(dims)?;
        let weight = inputs.get(1).filter(|_| self.weight);
        let mut y = centered.mul(&self.scale(weight, &var, &channel)?)?;
        if self.bias {
            y = y.add(&inputs[self.residual_index() - 1].to_dtype(st)?.reshape(channel)?)?;
        }
        if self.residual {
            y = y.add(&inputs[self.residual_index()].to_dtype(st)?)?;
        }
        if self.relu {
            y = y.relu()?;
        }
        let c = x.dims()[1];
        Ok(vec![y.to_dtype(x.dtype())?, mean.reshape(c)?, var.reshape(c)?])
    }

    fn backward(&self, inputs: &[Tensor], saved: &[Tensor], y: &Tensor, g: &Tensor) -> Result<Vec<Option<Tensor>>> {
        if !inputs.iter().any(|t| t.tracks_grad()) {
            return Ok(vec![None; inputs.len()]);
        }
        let grads = match (inputs[0].device().is_cpu(), inputs[0].dtype()) {
            (true, DType::F64) => self.cpu_grads::<f64>(inputs, saved, y, g)?,
            (true, _) => self.cpu_grads::<f32>(inputs, saved, y, g)?,
            _ => self.composed_grads(inputs, saved, y, g)?,
        };
        Ok(inputs.iter().zip(grads).map(|(t, d)| t.tracks_grad().then_some(d)).collect())
    }
}

impl FusedKernels for BatchNorm {
    /// No GPU kernels of its own: GPUs run the composition.
    fn variants(_: &Target) -> Vec<(String, KernelSource)> {
        Vec::new()
    }
}

impl Tensor {
    /// Batch normalization with the batch's statistics (training mode), like PyTorch's
    /// `F.batch_norm(x, None, None, weight, bias, training=True, eps=eps)`, plus `residual`
    /// when given, followed by a ReLU when `relu`: per channel (dim 1 of a `[N, C, ...]`
    /// input), `(x - mean) / sqrt(var + eps) * weight + bias` with the mean and biased
    /// variance over every other dim. `weight` and `bias` are optional `[C]` tensors of x's
    /// dtype; `residual` (a ResNet block's shortcut) has x's shape and dtype.
    ///
    /// Returns the output, then the batch mean and the biased batch variance (`[C]`, f32 or
    /// f64 for f64 inputs; not differentiable), from which a layer updates its running
    /// statistics. Gradients flow to x, weight and bias.
    pub fn batch_norm(
        &self,
        weight: Option<&Tensor>,
        bias: Option<&Tensor>,
        residual: Option<&Tensor>,
        eps: f64,
        relu: bool,
    ) -> Result<(Tensor, Tensor, Tensor)> {
        if !(eps >= 0.0 && eps.is_finite()) {
            return Err(Error::invalid(OP, format!("eps must be finite and >= 0, got {eps}")));
        }
        let op = BatchNorm { eps, weight: weight.is_some(), bias: bias.is_some(), residual: residual.is_some(), relu };
        let inputs: Vec<&Tensor> = [Some(self), weight, bias, residual].into_iter().flatten().collect();
        let mut outs = Tensor::fused_outputs(Arc::new(op), &inputs)?.into_iter();
        match (outs.next(), outs.next(), outs.next()) {
            (Some(y), Some(mean), Some(var)) => Ok((y, mean, var)),
            _ => Err(Error::Msg(format!("internal: {OP} gave fewer than 3 outputs"))),
        }
    }
}
