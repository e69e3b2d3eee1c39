//! Gradient checks of layers, losses and any function of tensors, on every device.

use rand::Rng;
use rnn_core::gradcheck::GradCheck;
use rnn_core::{DType, Device, Result, Tensor};

use crate::{checked_floats, diff_summary, max_rel_err, rng, tol_on, tolerance, values, GRADCHECK_TOL};

/// Checks the gradients of `f` at `inputs` (f64 CPU tensors, each one a variable) on `device`:
///
/// - on the CPU by finite differences (`rnn_core::gradcheck::GradCheck::default()`, which
///   needs f64 on the CPU), failing above [`GRADCHECK_TOL`];
/// - in each other dtype of [`checked_floats`]`(device)` (f32 on every device, f64 too on a
///   GPU that has it) against the CPU: `f` runs forward and backward on `device` with the same
///   inputs rounded to the dtype and moved there, and its output and the gradients of
///   `sum(f(inputs) * w)` (`w` fixed random weights) must match the f64 CPU computation,
///   which the finite differences verify, within `tol_on(device, tolerance(dtype).grad)`.
///
/// So a device without f64 still has every gradient checked. `f` must run in any dtype on any
/// device: the extra tensors it captured (targets, masks, ids) go through
/// [`like`](crate::like)`(t, &xs[0])`. Returns `f`'s errors; panics naming the failing
/// input and element otherwise.
pub fn check_gradients(device: Device, inputs: &[Tensor], f: impl Fn(&[Tensor]) -> Result<Tensor>) -> Result<()> {
    for t in inputs {
        assert_eq!((t.dtype(), t.device()), (DType::F64, Device::Cpu), "check_gradients takes f64 CPU inputs");
    }
    if device.is_cpu() {
        let worst = GradCheck::default().run(inputs, &f)?;
        assert!(worst < GRADCHECK_TOL, "gradcheck error {worst:e}");
    }
    for dtype in checked_floats(device) {
        if device.is_cpu() && dtype == DType::F64 {
            continue; // the reference itself
        }
        compare_with_cpu(device, dtype, inputs, &f)?;
    }
    Ok(())
}

/// The output's shape and values, and the gradient of `sum(out * w)` for each input (`None`
/// where backward recorded none), with the inputs in `dtype` on `device`; `w` comes from
/// `weights(n)` for an output of `n` elements.
type Run = (Vec<usize>, Vec<f64>, Vec<Option<Vec<f64>>>);

fn forward_backward(
    inputs: &[Tensor],
    dtype: DType,
    device: Device,
    weights: &dyn Fn(usize) -> Vec<f64>,
    f: &dyn Fn(&[Tensor]) -> Result<Tensor>,
) -> Result<Run> {
    let leaves: Vec<Tensor> =
        inputs.iter().map(|t| Ok(crate::to(t, dtype, device)?.detach().requires_grad())).collect::<Result<_>>()?;
    let out = f(&leaves)?;
    assert_eq!((out.dtype(), out.device()), (dtype, device), "output of the checked function");
    let w = Tensor::from_vec(weights(out.elem_count()), out.dims(), Device::Cpu)?;
    let grads = out.mul(&crate::to(&w, dtype, device)?)?.sum_all()?.backward()?;
    let grads = leaves
        .iter()
        .map(|leaf| {
            grads.get(leaf).map(|g| {
                assert_eq!((g.dims(), g.dtype(), g.device()), (leaf.dims(), dtype, device), "gradient");
                values(g)
            })
        })
        .collect();
    Ok((out.dims().to_vec(), values(&out), grads))
}

fn compare_with_cpu(
    device: Device,
    dtype: DType,
    inputs: &[Tensor],
    f: &dyn Fn(&[Tensor]) -> Result<Tensor>,
) -> Result<()> {
    let weights = |n: usize| {
        let mut r = rng(0x9e3779b9);
        (0..n).map(|_| r.random_range(0.5..1.5)).collect::<Vec<f64>>()
    };
    let (want_dims, want, want_grads) = forward_backward(inputs, DType::F64, Device::Cpu, &weights, f)?;
    let (dims, got, grads) = forward_backward(inputs, dtype, device, &weights, f)?;
    let on = format!("{dtype} on {device}");
    assert_eq!(dims, want_dims, "{on}: output shape differs from the CPU's");
    let tol = tol_on(device, tolerance(dtype).grad);
    let e = max_rel_err(&got, &want);
    assert!(e <= tol, "{on}: output differs from f64 on the CPU by {e:.3e} > {tol:.1e}: {}", diff_summary(&got, &want));
    for (i, (g, w)) in grads.iter().zip(&want_grads).enumerate() {
        match (g, w) {
            (Some(g), Some(w)) => {
                let e = max_rel_err(g, w);
                assert!(
                    e <= tol,
                    "{on}: gradient of input {i} ({:?}) differs from f64 on the CPU by {e:.3e} > {tol:.1e}: {}",
                    inputs[i].dims(),
                    diff_summary(g, w)
                );
            }
            (None, None) => {}
            (g, _) => {
                panic!("{on}: input {i} has a gradient only on {}", if g.is_some() { device } else { Device::Cpu })
            }
        }
    }
    Ok(())
}
