//! Fused Linear forward: `act(x @ wᵀ + b)` as one op (`Tensor::linear`). On CUDA it is one
//! cuBLASLt product with a bias + ReLU / GELU epilogue (`CUBLASLT_EPILOGUE_BIAS`,
//! `_RELU_BIAS`, `_GELU_BIAS`); where cuBLASLt has no fused kernel for it (f64 on most
//! devices) the product runs alone and elementwise kernels add the bias and activation
//! (GELU: one fused `bias_gelu` kernel). On the CPU the product is written into the output,
//! then one pass adds the bias and applies the activation in place (`linear_cpu.rs`;
//! bf16 / f16 in an f32 accumulator, rounded once). On wgpu it is a matmul, then an add and
//! the activation, or `bias_gelu` for a GELU with a bias.

use std::sync::Arc;

use super::bias_gelu::bias_gelu_into;
use super::{FusedKernels, FusedOp};
use crate::autocast::AutocastOp;
use crate::cpu::CpuStorage;
use crate::gpu::elementwise::{binary_into, copy_into, unary_into};
use crate::gpu::gemm::{operand, row_major_product, BIAS_ALIGNMENT};
use crate::gpu::matmul::problem;
use crate::gpu::plan::{Arg, KernelSource, Launch, Program};
use crate::gpu::target::Target;
use crate::op_table::{BinaryOp, Epilogue, UnaryOp};
use crate::{DType, Error, Layout, Result, Shape, Tensor};

/// `act(x @ wᵀ + b)` (`Tensor::linear`): one fused op, except for GELU when a gradient will
/// be taken through it. GELU's backward needs the pre-activation `z = x wᵀ + b`, which the
/// one-op forward does not keep: its backward would recompute the product and differentiate
/// GELU through a dozen elementwise ops. So under autograd it is the product, then the fused
/// `bias_gelu`, which keeps `z` as its input and has a one-pass backward.
pub(crate) fn linear(x: &Tensor, w: &Tensor, b: Option<&Tensor>, act: Epilogue) -> Result<Tensor> {
    let inputs: Vec<&Tensor> = [x, w].into_iter().chain(b).collect();
    let needs_grad = crate::backprop::grad_enabled() && inputs.iter().any(|t| t.tracks_grad());
    if act != Epilogue::Gelu || !needs_grad {
        return Tensor::fused(Arc::new(Linear { act }), &inputs);
    }
    let z = x.linear(w, None, Epilogue::None)?;
    match b {
        // Autocast may have narrowed the product: the bias follows it.
        Some(b) => z.bias_gelu(&b.to_dtype(z.dtype())?, true),
        None => z.unary(UnaryOp::Gelu),
    }
}

/// `act(x @ wᵀ + b)` with `x` `[m, k]`, `w` `[n, k]` (PyTorch's `[out, in]`) and an
/// optional bias `[n]`.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Linear {
    pub act: Epilogue,
}

impl FusedOp for Linear {
    fn autocast(&self) -> Option<AutocastOp> {
        Some(AutocastOp::Linear)
    }

    fn name(&self) -> &'static str {
        "linear"
    }

    fn output(&self, inputs: &[&Tensor]) -> Result<(Shape, DType)> {
        const OP: &str = "linear";
        let (x, w, bias) = (inputs[0], inputs[1], inputs.get(2));
        x.expect_rank(OP, 2)?;
        w.expect_rank(OP, 2)?;
        for other in inputs[1..].iter() {
            if other.dtype() != x.dtype() {
                return Err(Error::DTypeMismatch { op: OP, lhs: x.dtype(), rhs: other.dtype() });
            }
        }
        if w.dims()[1] != x.dims()[1] {
            return Err(Error::ShapeMismatch { op: OP, lhs: x.shape().clone(), rhs: w.shape().clone() });
        }
        if let Some(b) = bias {
            if b.dims() != [w.dims()[0]] {
                return Err(Error::ShapeMismatch { op: OP, lhs: w.shape().clone(), rhs: b.shape().clone() });
            }
        }
        Ok((Shape::from(vec![x.dims()[0], w.dims()[0]]), x.dtype()))
    }

    fn cpu(&self, inputs: &[(&CpuStorage, &Layout)]) -> Result<Option<Vec<CpuStorage>>> {
        super::linear_cpu::forward(self.act, inputs)
    }

    fn gpu(&self, target: &Target, inputs: &[(DType, &Layout, usize)]) -> Result<Option<Program>> {
        let [x, w, bias] = inputs else {
            return Ok(None);
        };
        let (m, k, n) = (x.1.dims()[0], x.1.dims()[1], w.1.dims()[0]);
        if !target.gemm || m * n * k == 0 {
            return Ok(None);
        }
        self.gemm_program(target, *x, *w, *bias).map(Some)
    }

    fn compose(&self, inputs: &[Tensor]) -> Result<Vec<Tensor>> {
        let z = inputs[0].matmul(&inputs[1].t()?)?;
        let z = match (inputs.get(2), self.act) {
            // One pass for the bias and the activation.
            (Some(b), Epilogue::Gelu) => return Ok(vec![z.bias_gelu(b, true)?]),
            (Some(b), _) => z.add(b)?,
            (None, _) => z,
        };
        Ok(vec![match self.act.unary() {
            Some(op) => z.unary(op)?,
            None => z,
        }])
    }

    fn backward(&self, inputs: &[Tensor], _: &[Tensor], y: &Tensor, g: &Tensor) -> Result<Vec<Option<Tensor>>> {
        let (x, w, b) = (&inputs[0], &inputs[1], inputs.get(2));
        let gz = match self.act {
            Epilogue::None => g.clone(),
            // y > 0 exactly where z > 0, and y is NaN where z is: y stands for z (as in
            // Conv2d's epilogue).
            Epilogue::Relu => crate::grad_fns::unary_grad(UnaryOp::Relu, y, y, g)?,
            // `linear` fuses a GELU only when no gradient is taken (autograd gets the product
            // and `bias_gelu` instead), so no graph ever holds this case.
            Epilogue::Gelu => {
                return Err(Error::Msg("internal: a fused GELU linear was recorded for backward".into()))
            }
        };
        let gx = x.tracks_grad().then(|| gz.matmul(w)).transpose()?;
        let gw = w.tracks_grad().then(|| gz.t()?.matmul(x)).transpose()?;
        let gb = b.filter(|b| b.tracks_grad()).map(|_| gz.sum(0)).transpose()?;
        Ok([Some(gx), Some(gw), b.map(|_| gb)].into_iter().flatten().collect())
    }
}

impl Linear {
    /// One product with the bias and activation as its epilogue, and the elementwise
    /// fallback for runtimes that have no fused kernel for it.
    fn gemm_program(
        &self,
        target: &Target,
        (dtype, xl, x_len): (DType, &Layout, usize),
        (_, wl, w_len): (DType, &Layout, usize),
        (_, bl, b_len): (DType, &Layout, usize),
    ) -> Result<Program> {
        // `output` checked the dtypes and shapes; the storages' extents are checked here.
        let wt = wl.transpose(0, 1)?;
        problem("linear", (dtype, xl, x_len), (dtype, &wt, w_len))?;
        if bl.storage_extent() > b_len {
            return Err(Error::invalid("linear", format!("layout {bl:?} reaches past a storage of {b_len} elements")));
        }
        let (m, n) = (xl.dims()[0], wl.dims()[0]);
        let mut p = Program::new(target, "linear", dtype, m * n);
        let (bias, offset) = aligned_bias(&mut p, dtype, bl)?;
        let ox = operand(&mut p, Arg::Input(0), dtype, xl)?;
        let ow = operand(&mut p, Arg::Input(1), dtype, &wt)?;
        let mut g = row_major_product(dtype, 1, (m, n), ox, ow, Program::OUT);
        g.bias = Some((self.act, bias, offset));
        g.fallback = Some(Box::new(bias_act(target, dtype, (m, n), offset, self.act)?));
        p.launches.push(Launch::Gemm(g));
        Ok(p)
    }
}

/// The bias as cuBLASLt reads it: `n` contiguous elements starting `BIAS_ALIGNMENT`-aligned
/// (buffers start on 256 bytes). Any other view is first copied to a fresh buffer.
fn aligned_bias(p: &mut Program, dtype: DType, bl: &Layout) -> Result<(Arg, usize)> {
    let n = bl.dims()[0];
    let unit_stride = bl.strides()[0] == 1 || n == 1;
    if unit_stride && (bl.start_offset() * dtype.size_in_bytes()) % BIAS_ALIGNMENT == 0 {
        return Ok((Arg::Input(2), bl.start_offset()));
    }
    let copy = p.temp(dtype, n);
    copy_into(p, (Arg::Input(2), dtype, bl), (copy, dtype, &Layout::contiguous(vec![n])))?;
    Ok((copy, 0))
}

/// `act(z + bias)` for the contiguous `[m, n]` product `z` (input 0) and the bias (input 1,
/// `n` contiguous elements from `offset`): the fallback of the fused epilogue.
fn bias_act(target: &Target, dtype: DType, (m, n): (usize, usize), offset: usize, act: Epilogue) -> Result<Program> {
    let out = Layout::contiguous(vec![m, n]);
    // Every row reads the same bias vector.
    let rows_of_bias = Layout::new(out.shape().clone(), vec![0, 1], offset);
    let mut p = Program::new(target, "linear", dtype, m * n);
    if act == Epilogue::Gelu {
        let (z, bias) = ((Arg::Input(0), 0), (Arg::Input(1), offset));
        bias_gelu_into(&mut p, dtype, false, (z, bias, None), n, Program::OUT)?;
        return Ok(p);
    }
    let sum = match act.unary() {
        Some(_) => p.temp(dtype, m * n),
        None => Program::OUT,
    };
    binary_into(&mut p, BinaryOp::Add, dtype, [(Arg::Input(0), &out), (Arg::Input(1), &rows_of_bias)], sum)?;
    if let Some(op) = act.unary() {
        unary_into(&mut p, op, dtype, (sum, &out), Program::OUT)?;
    }
    Ok(p)
}

impl FusedKernels for Linear {
    /// The product is cuBLASLt's; the copies and the fallback are elementwise kernels.
    fn variants(_: &Target) -> Vec<(String, KernelSource)> {
        Vec::new()
    }
}
