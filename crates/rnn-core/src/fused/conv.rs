//! Fused 2-D convolution: `act(conv2d(x, w) + b)` as one op (`Tensor::conv2d`). On the CPU
//! (f32, f64; no activation or ReLU) forward and backward are direct kernels
//! (`cpu/conv.rs`: per-image im2col into per-thread scratch and packed gemm, the bias and
//! ReLU applied to the output in cache). Elsewhere (GPUs, f16 / bf16, GELU) it is the
//! composition it replaces: `unfold2d` (im2col), one batched matmul with groups as a batch
//! dim, the bias add and the activation; its backward is written in the same ops.

use std::borrow::Cow;

use super::{FusedKernels, FusedOp};
use crate::cpu::conv::{conv2d_forward, ConvBackward, ConvShape};
use crate::cpu::unary::contiguous_slice;
use crate::cpu::CpuStorage;
use crate::gpu::plan::{KernelSource, Program};
use crate::gpu::target::Target;
use crate::num::Float;
use crate::op_table::{Epilogue, UnaryOp};
use crate::storage::Storage;
use crate::{DType, Error, Layout, Result, Shape, Tensor, WithDType, Window2d};

const OP: &str = "conv2d";

/// `act(conv2d(x, w) + b)`: `x` `[N, C, H, W]`, `w` `[O, C / groups, kh, kw]` (the window's
/// kernel), optional bias `[O]`; the output is `[N, O, Ho, Wo]`.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Conv2d {
    pub window: Window2d,
    pub groups: usize,
    pub act: Epilogue,
}

impl Conv2d {
    /// The sizes of a convolution of `x` by `w`, checked (errors name `conv2d`).
    fn shape(&self, x: &[usize], w: &[usize]) -> Result<ConvShape> {
        let (&[n, c, h, wd], &[o, cg, kh, kw]) = (x, w) else {
            let msg = format!("expected a [N, C, H, W] input and a [O, C / groups, kh, kw] weight, got {x:?} and {w:?}");
            return Err(Error::invalid(OP, msg));
        };
        let g = self.groups;
        if g == 0 || c % g != 0 || o % g != 0 || cg != c / g || (kh, kw) != self.window.kernel {
            let msg = format!(
                "weight {w:?} does not fit an input of {c} channels in {g} groups with kernel {:?}",
                self.window.kernel
            );
            return Err(Error::invalid(OP, msg));
        }
        let out_hw = self.window.output_size(OP, (h, wd))?;
        Shape::from(vec![n, o, out_hw.0, out_hw.1]).checked_elem_count(OP)?;
        Ok(ConvShape { batch: n, in_c: c, out_c: o, groups: g, hw: (h, wd), out_hw, window: self.window })
    }

    /// Whether the CPU kernels cover this op in `dtype`.
    fn has_cpu_kernel(&self, dtype: DType) -> bool {
        matches!(dtype, DType::F32 | DType::F64) && self.act != Epilogue::Gelu
    }
}

/// The contiguous elements of CPU tensors of dtype `T` (views copied), or an error naming
/// `op` for a tensor on another device. The storage guards stay alive in `guards`.
pub(super) fn cpu_slices<'a, T: WithDType>(
    op: &'static str,
    tensors: &[&'a Tensor],
    guards: &'a [std::sync::RwLockReadGuard<'a, Storage>],
) -> Result<Vec<Cow<'a, [T]>>> {
    guards
        .iter()
        .zip(tensors)
        .map(|(guard, t)| match &**guard {
            Storage::Cpu(s) => contiguous_slice(s.as_slice::<T>()?, t.layout()),
            _ => Err(Error::invalid(op, format!("internal: expected a CPU tensor, got one on {}", t.device()))),
        })
        .collect()
}

/// A CPU tensor of `shape` holding `v`.
pub(super) fn cpu_tensor<T: WithDType>(v: Vec<T>, shape: impl Into<Shape>) -> Tensor {
    Tensor::from_parts(Storage::Cpu(T::into_storage(v)), Layout::contiguous(shape), None)
}

fn forward_typed<T: Float + WithDType>(op: &Conv2d, inputs: &[(&CpuStorage, &Layout)]) -> Result<CpuStorage> {
    let s = op.shape(inputs[0].1.dims(), inputs[1].1.dims())?;
    let x = contiguous_slice(inputs[0].0.as_slice::<T>()?, inputs[0].1)?;
    let w = contiguous_slice(inputs[1].0.as_slice::<T>()?, inputs[1].1)?;
    let b = inputs.get(2).map(|(s, l)| contiguous_slice(s.as_slice::<T>()?, l)).transpose()?;
    Ok(T::into_storage(conv2d_forward(&x, &w, b.as_deref(), &s, op.act == Epilogue::Relu)?))
}

impl FusedOp for Conv2d {
    fn name(&self) -> &'static str {
        OP
    }

    fn output(&self, inputs: &[&Tensor]) -> Result<(Shape, DType)> {
        let (x, w) = (inputs[0], inputs[1]);
        if !x.dtype().is_float() {
            return Err(Error::UnsupportedDType { op: OP, dtype: x.dtype(), hint: ": the input must be a float tensor" });
        }
        if let Some(other) = inputs[1..].iter().find(|t| t.dtype() != x.dtype()) {
            return Err(Error::DTypeMismatch { op: OP, lhs: x.dtype(), rhs: other.dtype() });
        }
        let s = self.shape(x.dims(), w.dims())?;
        if let Some(b) = inputs.get(2).filter(|b| b.dims() != [s.out_c]) {
            return Err(Error::ShapeMismatch { op: OP, lhs: w.shape().clone(), rhs: b.shape().clone() });
        }
        Ok((Shape::from(vec![s.batch, s.out_c, s.out_hw.0, s.out_hw.1]), x.dtype()))
    }

    fn cpu(&self, inputs: &[(&CpuStorage, &Layout)]) -> Result<Option<Vec<CpuStorage>>> {
        let dtype = inputs[0].0.dtype();
        if !self.has_cpu_kernel(dtype) {
            return Ok(None);
        }
        let y = match dtype {
            DType::F32 => forward_typed::<f32>(self, inputs)?,
            _ => forward_typed::<f64>(self, inputs)?,
        };
        Ok(Some(vec![y]))
    }

    fn gpu(&self, _: &Target, _: &[(DType, &Layout, usize)]) -> Result<Option<Program>> {
        Ok(None)
    }

    fn compose(&self, inputs: &[Tensor]) -> Result<Vec<Tensor>> {
        let (x, w) = (&inputs[0], &inputs[1]);
        let s = self.shape(x.dims(), w.dims())?;
        let (g, kg, l) = (s.groups, s.in_c / s.groups * self.window.taps(), s.out_hw.0 * s.out_hw.1);
        // [N, C, taps, L] -> [N, G, C/G * taps, L]: the rows one group's weights multiply.
        let cols = x.unfold2d_window(&self.window, 0.0)?.reshape((s.batch, g, kg, l))?;
        // [G, O/G, K] @ [N, G, K, L] -> [N, G, O/G, L], already in NCHW order.
        let wm = w.reshape((g, s.out_c / g, kg))?;
        let mut y = wm.matmul(&cols)?.reshape((s.batch, s.out_c, s.out_hw.0, s.out_hw.1))?;
        if let Some(b) = inputs.get(2) {
            y = y.add(&b.reshape((1, s.out_c, 1, 1))?)?;
        }
        Ok(vec![match self.act.unary() {
            Some(op) => y.unary(op)?,
            None => y,
        }])
    }

    fn backward(&self, inputs: &[Tensor], _: &[Tensor], y: &Tensor, g: &Tensor) -> Result<Vec<Option<Tensor>>> {
        let (x, w, b) = (&inputs[0], &inputs[1], inputs.get(2));
        if x.device().is_cpu() && self.has_cpu_kernel(x.dtype()) {
            return match x.dtype() {
                DType::F32 => self.cpu_grads::<f32>(x, w, b, y, g),
                _ => self.cpu_grads::<f64>(x, w, b, y, g),
            };
        }
        let gz = match self.act {
            Epilogue::None => g.clone(),
            // relu(z) <= 0 exactly where z <= 0 (NaN passes, as in relu's own backward).
            Epilogue::Relu => crate::grad_fns::unary_grad(UnaryOp::Relu, y, y, g)?,
            // The fused forward does not keep z: recompute it.
            Epilogue::Gelu => {
                let z = x.conv2d(w, b, &self.window, self.groups, Epilogue::None)?;
                crate::grad_fns::unary_grad(UnaryOp::Gelu, &z, y, g)?
            }
        };
        self.composed_grads(x, w, b, &gz)
    }
}

impl Conv2d {
    /// The gradients through the composition's ops, given the gradient `gz` before the
    /// activation: `gw = Σ_n gz_n @ cols_nᵀ`, `gx = fold2d(wᵀ @ gz)`, `gb = Σ gz` over N, Ho, Wo.
    fn composed_grads(&self, x: &Tensor, w: &Tensor, b: Option<&Tensor>, gz: &Tensor) -> Result<Vec<Option<Tensor>>> {
        let s = self.shape(x.dims(), w.dims())?;
        let (g, og, l) = (s.groups, s.out_c / s.groups, s.out_hw.0 * s.out_hw.1);
        let kg = s.in_c / g * self.window.taps();
        let gz4 = gz.reshape((s.batch, g, og, l))?;
        let gw = w.tracks_grad().then(|| -> Result<Tensor> {
            let cols = x.unfold2d_window(&self.window, 0.0)?.reshape((s.batch, g, kg, l))?;
            gz4.matmul(&cols.transpose(2, 3)?)?.sum(0)?.reshape(w.shape())
        });
        let gx = x.tracks_grad().then(|| -> Result<Tensor> {
            let wt = w.reshape((g, og, kg))?.transpose(1, 2)?;
            let cols = wt.matmul(&gz4)?.reshape((s.batch, s.in_c, self.window.taps(), l))?;
            cols.fold2d_window(s.hw, &self.window)
        });
        let gb = b.filter(|b| b.tracks_grad()).map(|_| gz.sum(vec![0, 2, 3]));
        let mut grads = vec![gx.transpose()?, gw.transpose()?];
        if b.is_some() {
            grads.push(gb.transpose()?);
        }
        Ok(grads)
    }

    /// The gradients from the CPU kernels (`cpu/conv.rs`), the ReLU applied inside.
    fn cpu_grads<T: Float + WithDType>(
        &self,
        x: &Tensor,
        w: &Tensor,
        b: Option<&Tensor>,
        y: &Tensor,
        g: &Tensor,
    ) -> Result<Vec<Option<Tensor>>> {
        let shape = self.shape(x.dims(), w.dims())?;
        let tensors = [x, w, y, g];
        let guards: Vec<_> = tensors.iter().map(|t| t.storage()).collect();
        let v = cpu_slices::<T>(OP, &tensors, &guards)?;
        let relu = self.act == Epilogue::Relu;
        let kernel = ConvBackward { x: &v[0], w: &v[1], y: relu.then_some(&*v[2]), g: &v[3], shape };
        let need_b = b.is_some_and(|b| b.tracks_grad());
        let grads = kernel.run(x.tracks_grad(), need_b)?;
        let mut out = vec![grads.x.map(|gx| cpu_tensor(gx, x.shape())), Some(cpu_tensor(grads.w, w.shape()))];
        if b.is_some() {
            out.push(grads.b.map(|gb| cpu_tensor(gb, vec![shape.out_c])));
        }
        Ok(out)
    }
}

impl FusedKernels for Conv2d {
    /// No GPU kernels of its own: GPUs run the composition.
    fn variants(_: &Target) -> Vec<(String, KernelSource)> {
        Vec::new()
    }
}

impl Tensor {
    /// 2-D convolution (cross-correlation, as PyTorch's `conv2d`) with the bias and
    /// activation fused: `act(conv2d(self, weight) + bias)`. `self` is `[N, C, H, W]`,
    /// `weight` `[O, C / groups, kh, kw]` with `(kh, kw) == window.kernel`, `bias` `[O]`;
    /// the result is `[N, O, Ho, Wo]` (`Window2d::output_size`). Differentiable in all three.
    pub fn conv2d(
        &self,
        weight: &Tensor,
        bias: Option<&Tensor>,
        window: &Window2d,
        groups: usize,
        act: Epilogue,
    ) -> Result<Tensor> {
        self.expect_rank(OP, 4)?;
        weight.expect_rank(OP, 4)?;
        let inputs: Vec<&Tensor> = [self, weight].into_iter().chain(bias).collect();
        Tensor::fused(std::sync::Arc::new(Conv2d { window: *window, groups, act }), &inputs)
    }
}
