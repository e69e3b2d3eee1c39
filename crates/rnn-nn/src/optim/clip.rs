//! Gradient clipping, as `torch.nn.utils.clip_grad_norm_` and `clip_grad_value_`.

use std::collections::HashSet;

use rnn_core::{DType, Error, GradStore, Result, Tensor};

/// Scales the gradients of `params` (those present in `grads`) so that their total L2 norm,
/// taken over all of them as one vector, is at most `max_norm`: each is multiplied by
/// `max_norm / (norm + 1e-6)` when that is below 1. Returns the norm before clipping.
///
/// A non-finite norm (an inf or NaN gradient) leaves the gradients unchanged; the returned
/// norm lets the caller skip the step. Reading the norm waits for the device: a training
/// loop on a GPU calls [`clip_grad_norm_on_device`], which reads nothing back.
pub fn clip_grad_norm(grads: &mut GradStore, params: &[Tensor], max_norm: f64) -> Result<f64> {
    match clip_grad_norm_on_device(grads, params, max_norm)? {
        Some(norm) => norm.to_f64_scalar(),
        None => Ok(0.0),
    }
}

/// [`clip_grad_norm`] without a host sync, as PyTorch's `clip_grad_norm_` does it: the norm
/// is a rank-0 tensor on the gradients' device (f64 on the CPU, f32 on GPUs, whose backends
/// need not have f64), and every gradient is multiplied on the device by
/// `min(1, max_norm / (norm + 1e-6))`, or by 1 when the norm is not finite. Returns the
/// norm before clipping, `None` when no parameter has a gradient.
pub fn clip_grad_norm_on_device(grads: &mut GradStore, params: &[Tensor], max_norm: f64) -> Result<Option<Tensor>> {
    if !(max_norm.is_finite() && max_norm >= 0.0) {
        return Err(Error::invalid("clip_grad_norm", format!("max_norm must be finite and >= 0, got {max_norm}")));
    }
    // Each gradient counts once, even when its parameter is listed twice (tied weights).
    let mut seen = HashSet::new();
    let present: Vec<&Tensor> = params.iter().filter(|p| grads.get(p).is_some() && seen.insert(p.id())).collect();
    rnn_core::no_grad(|| {
        let Some(norm) = total_norm(grads, &present)? else { return Ok(None) };
        let scale = clip_scale(&norm, max_norm)?;
        for p in &present {
            if let Some(g) = grads.get(p) {
                let clipped = g.mul(&scale.to_dtype(g.dtype())?)?;
                grads.insert(p, clipped);
            }
        }
        Ok(Some(norm))
    })
}

/// `min(1, max_norm / (norm + 1e-6))` where the norm is finite, else 1 (rank 0, on the device).
fn clip_scale(norm: &Tensor, max_norm: f64) -> Result<Tensor> {
    // NaN < inf is false too, so this is "finite" for a norm, which is never -inf.
    let finite = norm.lt_scalar(f64::INFINITY)?;
    let scale = norm.full_like(max_norm)?.div(&norm.add_scalar(1e-6)?)?.minimum_scalar(1.0)?;
    finite.where_cond(&scale, &norm.full_like(1.0)?)
}

/// The L2 norm of all the gradients of `params` together, accumulated on their device in f64
/// (f32 on GPUs), as a rank-0 tensor; `None` without gradients.
fn total_norm(grads: &GradStore, params: &[&Tensor]) -> Result<Option<Tensor>> {
    let mut sum: Option<Tensor> = None;
    for g in params.iter().filter_map(|p| grads.get(p)) {
        let wide = if g.device().is_cpu() { DType::F64 } else { DType::F32 };
        let squares = g.to_dtype(wide)?.sqr()?.sum_all()?;
        sum = Some(match sum {
            Some(s) => s.add(&squares)?,
            None => squares,
        });
    }
    sum.map(|s| s.sqrt()).transpose()
}

/// Clamps every gradient of `params` (those present in `grads`) to `[-clip, clip]`.
pub fn clip_grad_value(grads: &mut GradStore, params: &[Tensor], clip: f64) -> Result<()> {
    if !(clip.is_finite() && clip >= 0.0) {
        return Err(Error::invalid("clip_grad_value", format!("clip must be finite and >= 0, got {clip}")));
    }
    rnn_core::no_grad(|| {
        for p in params {
            if let Some(g) = grads.get(p) {
                let clamped = g.clamp(-clip, clip)?;
                grads.insert(p, clamped);
            }
        }
        Ok(())
    })
}
