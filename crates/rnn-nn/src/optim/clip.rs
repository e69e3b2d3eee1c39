//! Gradient clipping, as `torch.nn.utils.clip_grad_norm_` and `clip_grad_value_`.

use std::collections::HashSet;

use rnn_core::{DType, Error, GradStore, Result, Tensor};

/// Scales the gradients of `params` (those present in `grads`) so that their total L2 norm,
/// taken over all of them as one vector, is at most `max_norm`: each is multiplied by
/// `max_norm / (norm + 1e-6)` when that is below 1. Returns the norm before clipping.
///
/// A non-finite norm (an inf or NaN gradient) leaves the gradients unchanged; the returned
/// norm lets the caller skip the step.
pub fn clip_grad_norm(grads: &mut GradStore, params: &[Tensor], max_norm: f64) -> Result<f64> {
    if !(max_norm.is_finite() && max_norm >= 0.0) {
        return Err(Error::invalid("clip_grad_norm", format!("max_norm must be finite and >= 0, got {max_norm}")));
    }
    // Each gradient counts once, even when its parameter is listed twice (tied weights).
    let mut seen = HashSet::new();
    let present: Vec<&Tensor> = params.iter().filter(|p| grads.get(p).is_some() && seen.insert(p.id())).collect();
    let norm = rnn_core::no_grad(|| total_norm(grads, &present))?;
    let scale = max_norm / (norm + 1e-6);
    if norm.is_finite() && scale < 1.0 {
        rnn_core::no_grad(|| {
            for p in &present {
                if let Some(g) = grads.get(p) {
                    let clipped = g.mul_scalar(scale)?;
                    grads.insert(p, clipped);
                }
            }
            Ok::<_, Error>(())
        })?;
    }
    Ok(norm)
}

/// The L2 norm of all the gradients of `params` together, accumulated on their device in f64
/// (f32 on GPUs, whose backends need not have f64) and read back once.
fn total_norm(grads: &GradStore, params: &[&Tensor]) -> Result<f64> {
    let mut sum: Option<Tensor> = None;
    for g in params.iter().filter_map(|p| grads.get(p)) {
        let wide = if g.device().is_cpu() { DType::F64 } else { DType::F32 };
        let squares = g.to_dtype(wide)?.sqr()?.sum_all()?;
        sum = Some(match sum {
            Some(s) => s.add(&squares)?,
            None => squares,
        });
    }
    match sum {
        Some(s) => Ok(s.to_f64_scalar()?.sqrt()),
        None => Ok(0.0),
    }
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
