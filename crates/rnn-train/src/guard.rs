//! NaN and infinite values during training (see `NonFinitePolicy`): finding them in the
//! weights without an extra host sync, the error that names where they appeared, and the
//! copy of the last known-finite weights that is put back after a divergence.

use rnn_core::{no_grad, DType, Error, Result, Tensor};

/// A scalar that is 0 when every element of the float tensors of `state` is finite and NaN
/// otherwise (`x * 0` is 0 for a finite `x`, NaN for NaN and ±inf), so the check can ride on
/// a read-back the training loop makes anyway. None when there is no float tensor.
pub(crate) fn non_finite_probe(state: &[(String, Tensor)]) -> Result<Option<Tensor>> {
    no_grad(|| {
        let mut sum: Option<Tensor> = None;
        for (_, t) in state.iter().filter(|(_, t)| t.dtype().is_float()) {
            let part = t.mul_scalar(0.0)?.sum_all()?.to_dtype(DType::F32)?;
            sum = Some(match sum {
                Some(s) => s.add(&part)?,
                None => part,
            });
        }
        Ok(sum)
    })
}

/// The name of the first tensor of `state` holding a NaN or infinite value, if any (one
/// read-back when all are finite).
pub(crate) fn first_non_finite(state: &[(String, Tensor)]) -> Result<Option<String>> {
    let Some(probe) = non_finite_probe(state)? else { return Ok(None) };
    if probe.to_f64_scalar()?.is_finite() {
        return Ok(None);
    }
    for (name, t) in state.iter().filter(|(_, t)| t.dtype().is_float()) {
        if t.to_f64_vec()?.iter().any(|v| !v.is_finite()) {
            return Ok(Some(name.clone()));
        }
    }
    // A value changed between the probe and the scan: name no tensor rather than a wrong one.
    Ok(Some("a weight".into()))
}

/// Copies of a network's state at a point where it was finite: the start of `train`, then
/// the end of each epoch whose weights were checked.
pub(crate) struct GoodWeights {
    copies: Vec<Tensor>,
    /// The epoch (from 1) whose end the copies are; None for the weights `train` began with.
    epoch: Option<usize>,
}

impl GoodWeights {
    pub fn take(state: &[(String, Tensor)], epoch: Option<usize>) -> Result<GoodWeights> {
        let copies = state.iter().map(|(_, t)| t.deep_copy()).collect::<Result<Vec<_>>>()?;
        Ok(GoodWeights { copies, epoch })
    }

    /// Writes the copies back into `state` (the same network's tensors, in the same order).
    pub fn restore(&self, state: &[(String, Tensor)]) -> Result<()> {
        no_grad(|| {
            for ((_, t), saved) in state.iter().zip(&self.copies) {
                t.assign(saved)?;
            }
            Ok(())
        })
    }

    fn describe(&self) -> String {
        match self.epoch {
            Some(e) => format!("the weights of the end of epoch {e} were put back"),
            None => "the weights were put back as they were when train was called".into(),
        }
    }
}

/// The error of a run that met a NaN or infinite value: `what` says where, `restored` which
/// weights the network holds now.
pub(crate) fn diverged(what: &str, restored: &GoodWeights) -> Error {
    let msg = format!(
        "{what}: training diverged, or the data holds NaN or infinite values (lower the learning rate, \
         check the data, or set on_non_finite: NonFinitePolicy::SkipStep); {} and the optimizer state was reset",
        restored.describe()
    );
    Error::invalid("Network::train", msg)
}

/// `step 3 of 10`, or `steps 3 to 6 of 10` when the loss was read back once for several.
pub(crate) fn steps(first: usize, last: usize, total: usize) -> String {
    match first == last {
        true => format!("step {first} of {total}"),
        false => format!("steps {first} to {last} of {total}"),
    }
}
