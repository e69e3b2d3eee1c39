//! Fused scaled dot-product attention, FlashAttention-2 style: `softmax(q kᵀ · scale + bias,
//! masked) v` computed over tiles of keys with an online softmax, never materializing the
//! `Nq x Nk` scores; the forward saves the per-row log-sum-exp, the backward recomputes the
//! tiles from it.
//!
//! - `Attention` is the forward (output `[B, H, Nq, Dv]`, saved log-sum-exp `[B, H, Nq]`);
//!   `AttentionBackward` its gradient (dq, then dk, dv and the bias gradient as extra outputs).
//! - CPU kernels: `cpu.rs` (shared parts), `cpu_forward.rs`, `cpu_backward.rs`; GPU programs (CUDA and WGSL): `gpu.rs`; the naive composition of
//!   primitives, used where a backend has no kernel and as the tests' reference: `compose.rs`.
//!
//! Semantics follow `torch.nn.functional.scaled_dot_product_attention`: causal masks are
//! top-left aligned (query `i` sees keys `j <= i`, also when `Nq != Nk`), and a query row with
//! every key masked gives a zero output and zero gradients (PyTorch >= 2.5).

mod compose;
pub(crate) mod cpu;
mod cpu_backward;
mod cpu_columns;
mod cpu_forward;
mod cpu_kernel;
mod cpu_kernel_avx512;
pub(crate) mod gpu;

use std::sync::Arc;

use super::{FusedKernels, FusedOp};
use crate::autocast::AutocastOp;
use crate::cpu::CpuStorage;
use crate::gpu::plan::{KernelSource, Program};
use crate::gpu::target::Target;
use crate::{DType, Device, Error, Layout, Result, Shape, Tensor};

/// Which keys each query may attend to, and an optional additive bias: the `mask` argument
/// of [`scaled_dot_product_attention`]. The parts combine (a causal mask with key padding,
/// say).
#[derive(Clone, Debug, Default)]
pub struct AttentionMask {
    /// Query `i` attends to keys `j <= i` (top-left aligned, as PyTorch's `is_causal`).
    pub causal: bool,
    /// `[B]` valid keys per batch element (u32, i64 or u8): keys at positions `>= length` are
    /// masked. Lengths above `Nk` mean every key; a length of 0 (or a negative i64) means
    /// none, and that element's output rows are zeros, as PyTorch's
    /// `scaled_dot_product_attention` gives for a boolean mask that hides every key. The
    /// lengths are never read back to the host, so they cost no GPU sync.
    pub key_lengths: Option<Tensor>,
    /// Added to the scaled scores; broadcastable to `[B, H, Nq, Nk]`, the dtype of `q`; may
    /// track gradients (ALiBi or learned relative positions). `-inf` masks a score.
    pub bias: Option<Tensor>,
}

impl AttentionMask {
    /// No mask: every query attends to every key.
    pub fn none() -> Self {
        Self::default()
    }

    /// The causal mask of a decoder.
    pub fn causal() -> Self {
        AttentionMask { causal: true, ..Self::default() }
    }

    /// Key padding: batch element `b` attends to its first `lengths[b]` keys.
    pub fn key_padding(lengths: &Tensor) -> Self {
        AttentionMask { key_lengths: Some(lengths.clone()), ..Self::default() }
    }

    /// An additive bias on the scores.
    pub fn bias(bias: &Tensor) -> Self {
        AttentionMask { bias: Some(bias.clone()), ..Self::default() }
    }

    /// This mask, also causal.
    pub fn with_causal(mut self) -> Self {
        self.causal = true;
        self
    }
}

/// `softmax(q kᵀ · scale + bias, mask) v` for `q` `[B, H, Nq, D]`, `k` `[B, H, Nk, D]`, `v`
/// `[B, H, Nk, Dv]` (f32, f64, f16 or bf16, one device); `scale` defaults to `1 / sqrt(D)`.
/// The result is `[B, H, Nq, Dv]`. Extra memory grows as O(N): the scores are never stored.
/// Differentiable in `q`, `k`, `v` and the bias.
pub fn scaled_dot_product_attention(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    mask: &AttentionMask,
    scale: Option<f64>,
) -> Result<Tensor> {
    if crate::autocast::is_active() {
        // The bias is cast with q, k and v: the kernels want one dtype.
        let inputs: Vec<&Tensor> = [q, k, v].into_iter().chain(mask.bias.as_ref()).collect();
        return crate::autocast::autocast_op(AutocastOp::ScaledDotProductAttention, &inputs, |t| {
            let mask = AttentionMask { bias: t.get(3).cloned(), ..mask.clone() };
            scaled_dot_product_attention(&t[0], &t[1], &t[2], &mask, scale)
        });
    }
    let d = q.dims().last().copied().unwrap_or(0);
    let scale = scale.unwrap_or(1.0 / (d.max(1) as f64).sqrt());
    if !scale.is_finite() {
        return Err(Error::invalid(OP, format!("scale {scale} is not finite")));
    }
    let mut inputs = vec![q.clone(), k.clone(), v.clone()];
    if let Some(lengths) = &mask.key_lengths {
        inputs.push(key_lengths(lengths, q)?);
    }
    if let Some(bias) = &mask.bias {
        inputs.push(bias_view(bias, q, k)?);
    }
    let needs_grad = crate::grad_enabled() && inputs.iter().any(Tensor::tracks_grad);
    let op = Attention {
        scale,
        causal: mask.causal,
        lengths: mask.key_lengths.is_some(),
        bias: mask.bias.is_some(),
        // The GPU programs always write it.
        saves_lse: needs_grad || q.device() != Device::Cpu,
    };
    let refs: Vec<&Tensor> = inputs.iter().collect();
    Tensor::fused(Arc::new(op), &refs)
}

const OP: &str = "scaled_dot_product_attention";

/// The lengths as a `[B]` u32 tensor; negative i64 lengths become 0 (the cast alone would
/// wrap them to "every key").
fn key_lengths(lengths: &Tensor, q: &Tensor) -> Result<Tensor> {
    let batch = q.dims().first().copied().unwrap_or(0);
    if lengths.dims() != [batch] {
        let msg = format!("key lengths must have shape [{batch}] (one per batch element), got {:?}", lengths.dims());
        return Err(Error::invalid(OP, msg));
    }
    match lengths.dtype() {
        DType::U32 => Ok(lengths.clone()),
        DType::I64 => lengths.maximum_scalar(0.0)?.to_dtype(DType::U32),
        DType::U8 => lengths.to_dtype(DType::U32),
        dtype => Err(Error::UnsupportedDType { op: OP, dtype, hint: ": key lengths are u32 or i64" }),
    }
}

/// The bias broadcast to `[B, H, Nq, Nk]` (a view: broadcast dims have stride 0).
fn bias_view(bias: &Tensor, q: &Tensor, k: &Tensor) -> Result<Tensor> {
    q.expect_rank(OP, 4)?;
    k.expect_rank(OP, 4)?;
    let (qd, kd) = (q.dims(), k.dims());
    if bias.dtype() != q.dtype() {
        return Err(Error::DTypeMismatch { op: OP, lhs: q.dtype(), rhs: bias.dtype() });
    }
    bias.broadcast_as(vec![qd[0], qd[1], qd[2], kd[2]])
}

/// The forward. Inputs: q, k, v, then the u32 key lengths when `lengths`, then the
/// `[B, H, Nq, Nk]` bias view when `bias`.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Attention {
    pub scale: f64,
    pub causal: bool,
    pub lengths: bool,
    pub bias: bool,
    /// Whether the log-sum-exp is saved for a backward: not when no gradient will be taken
    /// on the CPU, where it then costs neither memory nor stores (inference).
    pub saves_lse: bool,
}

/// The shapes of one attention problem.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Dims {
    pub batch: usize,
    pub heads: usize,
    pub nq: usize,
    pub nk: usize,
    pub d: usize,
    pub dv: usize,
}

impl Dims {
    /// The dims of q `[B, H, Nq, D]`, k `[B, H, Nk, D]`, v `[B, H, Nk, Dv]`.
    pub fn of(q: &[usize], k: &[usize], v: &[usize]) -> Dims {
        Dims { batch: q[0], heads: q[1], nq: q[2], nk: k[2], d: q[3], dv: v[3] }
    }
}

/// The dtype of the saved log-sum-exp: f64 for f64 inputs, f32 otherwise.
pub(crate) fn stat_dtype(dtype: DType) -> DType {
    if dtype == DType::F64 {
        DType::F64
    } else {
        DType::F32
    }
}

impl Attention {
    /// Checks q, k, v (and the mask inputs) and gives their dims.
    fn check(&self, inputs: &[&Tensor]) -> Result<Dims> {
        let want = 3 + self.lengths as usize + self.bias as usize;
        if inputs.len() != want {
            return Err(Error::Msg(format!("internal: {OP} takes {want} inputs, got {}", inputs.len())));
        }
        let (q, k, v) = (inputs[0], inputs[1], inputs[2]);
        for t in [q, k, v] {
            t.expect_rank(OP, 4)?;
            if !t.dtype().is_float() {
                return Err(Error::UnsupportedDType {
                    op: OP,
                    dtype: t.dtype(),
                    hint: ": attention needs a float dtype",
                });
            }
        }
        for t in [k, v] {
            if t.dtype() != q.dtype() {
                return Err(Error::DTypeMismatch { op: OP, lhs: q.dtype(), rhs: t.dtype() });
            }
        }
        let (qd, kd, vd) = (q.dims(), k.dims(), v.dims());
        let mismatch =
            |a: &Tensor, b: &Tensor| Error::ShapeMismatch { op: OP, lhs: a.shape().clone(), rhs: b.shape().clone() };
        if kd[..2] != qd[..2] || kd[3] != qd[3] {
            return Err(mismatch(q, k));
        }
        if vd[..3] != kd[..3] {
            return Err(mismatch(k, v));
        }
        Ok(Dims::of(qd, kd, vd))
    }

    /// The position of the lengths and bias inputs.
    pub fn lengths_input(&self) -> Option<usize> {
        self.lengths.then_some(3)
    }
    pub fn bias_input(&self) -> Option<usize> {
        self.bias.then_some(3 + self.lengths as usize)
    }
}

impl FusedOp for Attention {
    fn name(&self) -> &'static str {
        OP
    }

    fn output(&self, inputs: &[&Tensor]) -> Result<(Shape, DType)> {
        let d = self.check(inputs)?;
        Ok((Shape::from(vec![d.batch, d.heads, d.nq, d.dv]), inputs[0].dtype()))
    }

    fn saved(&self, inputs: &[&Tensor]) -> Result<Vec<(Shape, DType)>> {
        let d = self.check(inputs)?;
        let lse = (Shape::from(vec![d.batch, d.heads, d.nq]), stat_dtype(inputs[0].dtype()));
        Ok(self.saves_lse.then_some(lse).into_iter().collect())
    }

    fn cpu(&self, inputs: &[(&CpuStorage, &Layout)]) -> Result<Option<Vec<CpuStorage>>> {
        cpu::forward(self, inputs)
    }

    fn gpu(&self, target: &Target, inputs: &[(DType, &Layout, usize)]) -> Result<Option<Program>> {
        gpu::forward(self, target, inputs)
    }

    fn compose(&self, inputs: &[Tensor]) -> Result<Vec<Tensor>> {
        let mut outputs = compose::forward(self, inputs)?;
        outputs.truncate(1 + self.saves_lse as usize);
        Ok(outputs)
    }

    fn backward(&self, inputs: &[Tensor], saved: &[Tensor], y: &Tensor, g: &Tensor) -> Result<Vec<Option<Tensor>>> {
        let bias_grad = self.bias_input().is_some_and(|i| inputs[i].tracks_grad());
        let op = AttentionBackward { fwd: *self, bias_grad, atomic_dq: crate::attention_atomic_dq() };
        let (q, k, v) = (&inputs[0], &inputs[1], &inputs[2]);
        let lse = saved.first().ok_or_else(|| Error::Msg(format!("internal: {OP} saved no log-sum-exp")))?;
        // The CPU kernel reads dO by rows at any batch, head and row stride, so a strided or
        // broadcast gradient is not copied out whole there. The GPU kernels read it contiguous.
        let g = if g.device() == Device::Cpu { contiguous_rows(g)? } else { g.contiguous()? };
        let mut args: Vec<&Tensor> = vec![q, k, v, y, &g, lse];
        args.extend(inputs[3..].iter());
        let outs = Tensor::fused_outputs(Arc::new(op), &args)?;
        let mut grads: Vec<Option<Tensor>> =
            [q, k, v].iter().zip(&outs).map(|(t, d)| t.tracks_grad().then(|| d.clone())).collect();
        if self.lengths {
            grads.push(None);
        }
        if self.bias {
            grads.push(if bias_grad { outs.get(3).cloned() } else { None });
        }
        Ok(grads)
    }
}

/// `g` (`[B, H, N, Dv]`) as the CPU kernel reads it without a whole copy: rows contiguous,
/// batch, head and row at any stride, broadcast ones included (the `[B, H, N, D]` view of a
/// transformer's `[B, N, H, D]` gradient, the gradient of `o.sum()`). Only strided or
/// broadcast rows are copied, once per distinct row.
fn contiguous_rows(g: &Tensor) -> Result<Tensor> {
    let (dims, strides) = (g.dims(), g.layout().strides());
    let Some(last) = dims.len().checked_sub(1) else { return Ok(g.clone()) };
    if strides[last] == 1 || dims[last] <= 1 {
        return Ok(g.clone());
    }
    let mut rows = g.clone();
    for d in (0..last).filter(|&d| strides[d] == 0 && dims[d] > 1) {
        rows = rows.narrow(d, 0, 1)?;
    }
    rows.contiguous()?.broadcast_as(g.shape())
}

/// The gradient of `Attention`: inputs q, k, v, the output o, its gradient do (rows contiguous),
/// the saved log-sum-exp, then the forward's mask inputs; outputs dq, then dk, dv, and the
/// `[B, H, Nq, Nk]` bias gradient when `bias_grad`.
#[derive(Clone, Copy, Debug)]
pub(crate) struct AttentionBackward {
    pub fwd: Attention,
    pub bias_grad: bool,
    /// The f16 / bf16 CUDA kernels add dq with atomics in one pass (`attention_atomic_dq`);
    /// other kernels ignore it.
    pub atomic_dq: bool,
}

impl AttentionBackward {
    /// The position of the forward's lengths and bias inputs among this op's inputs.
    pub fn lengths_input(&self) -> Option<usize> {
        self.fwd.lengths_input().map(|i| i + 3)
    }
    pub fn bias_input(&self) -> Option<usize> {
        self.fwd.bias_input().map(|i| i + 3)
    }

    fn dims(&self, inputs: &[&Tensor]) -> Result<Dims> {
        let fwd_inputs: Vec<&Tensor> = inputs[..3].iter().chain(inputs[6..].iter()).copied().collect();
        self.fwd.check(&fwd_inputs)
    }
}

impl FusedOp for AttentionBackward {
    fn name(&self) -> &'static str {
        "scaled_dot_product_attention_backward"
    }

    fn output(&self, inputs: &[&Tensor]) -> Result<(Shape, DType)> {
        self.dims(inputs)?;
        Ok((inputs[0].shape().clone(), inputs[0].dtype()))
    }

    fn saved(&self, inputs: &[&Tensor]) -> Result<Vec<(Shape, DType)>> {
        let d = self.dims(inputs)?;
        let mut out =
            vec![(inputs[1].shape().clone(), inputs[1].dtype()), (inputs[2].shape().clone(), inputs[2].dtype())];
        if self.bias_grad {
            out.push((Shape::from(vec![d.batch, d.heads, d.nq, d.nk]), inputs[0].dtype()));
        }
        Ok(out)
    }

    fn cpu(&self, inputs: &[(&CpuStorage, &Layout)]) -> Result<Option<Vec<CpuStorage>>> {
        cpu::backward(self, inputs)
    }

    fn gpu(&self, target: &Target, inputs: &[(DType, &Layout, usize)]) -> Result<Option<Program>> {
        gpu::backward(self, target, inputs)
    }

    fn compose(&self, inputs: &[Tensor]) -> Result<Vec<Tensor>> {
        compose::backward(self, inputs)
    }

    fn backward(&self, _: &[Tensor], _: &[Tensor], _: &Tensor, _: &Tensor) -> Result<Vec<Option<Tensor>>> {
        Err(Error::invalid(self.name(), "the gradient of attention's gradient (double backward) is not supported"))
    }
}

impl FusedKernels for Attention {
    fn variants(target: &Target) -> Vec<(String, KernelSource)> {
        gpu::variants(target)
    }
}
