//! Attention composed from primitives, materializing the `Nq x Nk` scores: the path of
//! backends without a kernel and the reference the kernels are tested against. Half inputs
//! are computed in f32.

use super::{stat_dtype, Attention, AttentionBackward};
use crate::op_table::CmpOp;
use crate::{Result, Tensor};

/// `[B, H, Nq, Nk]` scaled scores plus the bias, `-inf` where the mask hides a key.
fn masked_scores(op: &Attention, q: &Tensor, k: &Tensor, mask_inputs: &[Tensor]) -> Result<Tensor> {
    let mut s = q.matmul(&k.transpose(-2, -1)?)?.mul_scalar(op.scale)?;
    let mut rest = mask_inputs.iter();
    let lengths = if op.lengths { rest.next() } else { None };
    if op.bias {
        if let Some(bias) = rest.next() {
            s = s.add(&bias.to_dtype(s.dtype())?)?;
        }
    }
    let (nq, nk, device) = (q.dims()[2], k.dims()[2], q.device());
    let keys = Tensor::arange(0u32, nk as u32, device)?.reshape((1, 1, 1, nk))?;
    if op.causal {
        let queries = Tensor::arange(0u32, nq as u32, device)?.reshape((1, 1, nq, 1))?;
        s = s.masked_fill(&keys.cmp(&queries, CmpOp::Gt)?, f64::NEG_INFINITY)?;
    }
    if let Some(lengths) = lengths {
        let lengths = lengths.reshape((q.dims()[0], 1, 1, 1))?;
        s = s.masked_fill(&keys.cmp(&lengths, CmpOp::Ge)?, f64::NEG_INFINITY)?;
    }
    Ok(s)
}

/// `t` with `value` where it is `-inf`.
fn replace_neg_inf(t: &Tensor, value: f64) -> Result<Tensor> {
    t.masked_fill(&t.cmp(&t.scalar_like(f64::NEG_INFINITY)?, CmpOp::Eq)?, value)
}

fn widen(t: &Tensor) -> Result<Tensor> {
    t.to_dtype(stat_dtype(t.dtype()))
}

/// The output and the per-row log-sum-exp (`-inf` for a row with every key masked).
pub(super) fn forward(op: &Attention, inputs: &[Tensor]) -> Result<Vec<Tensor>> {
    let dtype = inputs[0].dtype();
    let (q, k, v) = (widen(&inputs[0])?, widen(&inputs[1])?, widen(&inputs[2])?);
    if k.dims()[2] == 0 {
        // No keys: every row is fully masked (the max below would reject an empty dim).
        let (qd, dv) = (q.dims(), v.dims()[3]);
        let o = Tensor::zeros((qd[0], qd[1], qd[2], dv), dtype, q.device())?;
        return Ok(vec![o, Tensor::full(f64::NEG_INFINITY, qd[..3].to_vec(), q.dtype(), q.device())?]);
    }
    let s = masked_scores(op, &q, &k, &inputs[3..])?;
    // A fully masked row has max -inf; shifting it by 0 instead gives p = 0 there.
    let m = replace_neg_inf(&s.max_keepdim(-1)?, 0.0)?;
    let p = s.sub(&m)?.exp()?;
    let l = p.sum_keepdim(-1)?;
    let lse = m.add(&l.log()?)?.squeeze(-1)?;
    let inv = l.recip()?.masked_fill(&l.cmp(&l.zeros_like()?, CmpOp::Eq)?, 0.0)?;
    let o = p.matmul(&v)?.mul(&inv)?.to_dtype(dtype)?;
    Ok(vec![o, lse])
}

/// dq, dk, dv and (when asked) the bias gradient, from the scores recomputed with the saved
/// log-sum-exp.
pub(super) fn backward(op: &AttentionBackward, inputs: &[Tensor]) -> Result<Vec<Tensor>> {
    let wide: Vec<Tensor> = inputs[..5].iter().map(widen).collect::<Result<_>>()?;
    let (q, k, v, o, d_o) = (&wide[0], &wide[1], &wide[2], &wide[3], &wide[4]);
    let s = masked_scores(&op.fwd, q, k, &inputs[6..])?;
    let lse = replace_neg_inf(&inputs[5].unsqueeze(-1)?, 0.0)?;
    let p = s.sub(&lse)?.exp()?;
    let dv = p.transpose(-2, -1)?.matmul(d_o)?;
    let dp = d_o.matmul(&v.transpose(-2, -1)?)?;
    let delta = d_o.mul(o)?.sum_keepdim(-1)?;
    let ds = p.mul(&dp.sub(&delta)?)?;
    let dq = ds.matmul(k)?.mul_scalar(op.fwd.scale)?;
    let dk = ds.transpose(-2, -1)?.matmul(q)?.mul_scalar(op.fwd.scale)?;
    let mut out =
        vec![dq.to_dtype(inputs[0].dtype())?, dk.to_dtype(inputs[1].dtype())?, dv.to_dtype(inputs[2].dtype())?];
    if op.bias_grad {
        out.push(ds.to_dtype(inputs[0].dtype())?);
    }
    Ok(out)
}
