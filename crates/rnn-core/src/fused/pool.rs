//! Fused 2-D pooling (`Tensor::max_pool2d`, `Tensor::avg_pool2d`). On the CPU (f32, f64)
//! forward and backward are direct kernels over the input planes (`cpu/pool.rs`: no
//! unfolded copy, selects instead of branches, the max-pool argmax recomputed in the
//! backward rather than saved). Elsewhere it is the composition it replaces: `unfold2d`, then
//! the window's first argmax gathered (max) or the mean over the window dim.

use super::conv::{cpu_slices, cpu_tensor};
use super::{FusedKernels, FusedOp};
use crate::cpu::pool::Pooling;
use crate::cpu::unary::contiguous_slice;
use crate::cpu::CpuStorage;
use crate::gpu::plan::{KernelSource, Program};
use crate::gpu::target::Target;
use crate::num::Float;
use crate::{DType, Error, Layout, Result, Shape, Tensor, WithDType, Window2d};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum PoolKind {
    /// Max over each window, padding counting as -inf; NaN wins.
    Max,
    /// Mean over each window, padding counting as 0 and every window divided by kh * kw.
    Avg,
}

#[derive(Clone, Copy, Debug)]
pub(crate) struct Pool2d {
    pub window: Window2d,
    pub kind: PoolKind,
}

impl Pool2d {
    fn op(&self) -> &'static str {
        match self.kind {
            PoolKind::Max => "max_pool2d",
            PoolKind::Avg => "avg_pool2d",
        }
    }

    /// `[N, C, H, W]` dims -> the `[N, C, Ho, Wo]` output dims, checked.
    fn out_dims(&self, dims: &[usize]) -> Result<[usize; 4]> {
        let &[n, c, h, w] = dims else {
            return Err(Error::invalid(self.op(), format!("expected a [N, C, H, W] input, got {dims:?}")));
        };
        let (ho, wo) = self.window.output_size(self.op(), (h, w))?;
        Shape::from(vec![n, c, ho, wo]).checked_elem_count(self.op())?;
        Ok([n, c, ho, wo])
    }

    /// The kernels' view of an input of `dims` (already checked by `out_dims`).
    fn pooling(&self, dims: &[usize]) -> Result<Pooling<'_>> {
        let [n, c, ho, wo] = self.out_dims(dims)?;
        Ok(Pooling::new((dims[2], dims[3]), (ho, wo), n * c, &self.window))
    }

    /// The composition's windows: `[N, C, kh * kw, Ho * Wo]`, padding at the pool's identity.
    fn windows(&self, x: &Tensor) -> Result<Tensor> {
        let pad = if self.kind == PoolKind::Max { f64::NEG_INFINITY } else { 0.0 };
        x.unfold2d_window(&self.window, pad)
    }
}

fn forward_typed<T: Float + WithDType>(op: &Pool2d, (s, l): (&CpuStorage, &Layout)) -> Result<CpuStorage> {
    let x = contiguous_slice(s.as_slice::<T>()?, l)?;
    let pooling = op.pooling(l.dims())?;
    Ok(T::into_storage(match op.kind {
        PoolKind::Max => pooling.max_forward(&x)?,
        PoolKind::Avg => pooling.avg_forward(&x)?,
    }))
}

fn backward_typed<T: Float + WithDType>(op: &Pool2d, x: &Tensor, g: &Tensor) -> Result<Tensor> {
    let tensors = [x, g];
    let guards: Vec<_> = tensors.iter().map(|t| t.storage()).collect();
    let v = cpu_slices::<T>(op.op(), &tensors, &guards)?;
    let pooling = op.pooling(x.dims())?;
    let gx = match op.kind {
        PoolKind::Max => pooling.max_backward(&v[0], &v[1])?,
        PoolKind::Avg => pooling.avg_backward(&v[1])?,
    };
    Ok(cpu_tensor(gx, x.shape()))
}

impl FusedOp for Pool2d {
    fn name(&self) -> &'static str {
        self.op()
    }

    fn output(&self, inputs: &[&Tensor]) -> Result<(Shape, DType)> {
        let x = inputs[0];
        if !x.dtype().is_float() {
            let hint = ": the input must be a float tensor";
            return Err(Error::UnsupportedDType { op: self.op(), dtype: x.dtype(), hint });
        }
        Ok((Shape::from(self.out_dims(x.dims())?.to_vec()), x.dtype()))
    }

    fn cpu(&self, inputs: &[(&CpuStorage, &Layout)]) -> Result<Option<Vec<CpuStorage>>> {
        Ok(match inputs[0].0.dtype() {
            DType::F32 => Some(vec![forward_typed::<f32>(self, inputs[0])?]),
            DType::F64 => Some(vec![forward_typed::<f64>(self, inputs[0])?]),
            _ => None,
        })
    }

    fn gpu(&self, _: &Target, _: &[(DType, &Layout, usize)]) -> Result<Option<Program>> {
        Ok(None)
    }

    fn compose(&self, inputs: &[Tensor]) -> Result<Vec<Tensor>> {
        let x = &inputs[0];
        let dims = self.out_dims(x.dims())?;
        let windows = self.windows(x)?;
        let y = match self.kind {
            // The first argmax gathered: its backward routes the gradient to that one element.
            PoolKind::Max => windows.gather(&windows.argmax_keepdim(2)?, 2)?,
            PoolKind::Avg => windows.mean_keepdim(2)?,
        };
        Ok(vec![y.reshape(dims.to_vec())?])
    }

    fn backward(&self, inputs: &[Tensor], _: &[Tensor], _: &Tensor, g: &Tensor) -> Result<Vec<Option<Tensor>>> {
        let x = &inputs[0];
        if !x.tracks_grad() {
            return Ok(vec![None]);
        }
        let gx = match (x.device().is_cpu(), x.dtype()) {
            (true, DType::F32) => backward_typed::<f32>(self, x, g)?,
            (true, DType::F64) => backward_typed::<f64>(self, x, g)?,
            _ => self.composed_grad(x, g)?,
        };
        Ok(vec![Some(gx)])
    }
}

impl Pool2d {
    /// The input gradient through the composition's ops: each window's gradient placed at
    /// its argmax (max) or spread evenly (mean) over `[N, C, kh * kw, L]`, then `fold2d`.
    fn composed_grad(&self, x: &Tensor, g: &Tensor) -> Result<Tensor> {
        let [n, c, ho, wo] = self.out_dims(x.dims())?;
        let taps = self.window.taps();
        let g = g.reshape((n, c, 1, ho * wo))?;
        let cols = match self.kind {
            PoolKind::Max => {
                let windows = self.windows(x)?;
                windows.zeros_like()?.scatter_add(&windows.argmax_keepdim(2)?, &g, 2)?
            }
            PoolKind::Avg => g.mul_scalar(1.0 / taps as f64)?.broadcast_as((n, c, taps, ho * wo))?.contiguous()?,
        };
        cols.fold2d_window((x.dims()[2], x.dims()[3]), &self.window)
    }
}

impl FusedKernels for Pool2d {
    /// No GPU kernels of its own: GPUs run the composition.
    fn variants(_: &Target) -> Vec<(String, KernelSource)> {
        Vec::new()
    }
}

impl Tensor {
    /// 2-D max pooling of a `[N, C, H, W]` tensor: `[N, C, Ho, Wo]`, padding counting as
    /// -inf. The gradient of a window goes to its max (the first in scan order on ties; a
    /// NaN wins the window, as in PyTorch).
    pub fn max_pool2d(&self, window: &Window2d) -> Result<Tensor> {
        Tensor::fused(std::sync::Arc::new(Pool2d { window: *window, kind: PoolKind::Max }), &[self])
    }

    /// 2-D average pooling of a `[N, C, H, W]` tensor: `[N, C, Ho, Wo]`, padding counting as
    /// zeros and every window divided by `kh * kw` (PyTorch's `count_include_pad=True`).
    pub fn avg_pool2d(&self, window: &Window2d) -> Result<Tensor> {
        Tensor::fused(std::sync::Arc::new(Pool2d { window: *window, kind: PoolKind::Avg }), &[self])
    }
}
