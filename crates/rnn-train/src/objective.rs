//! Labels, the loss and the accuracy metric of a `Network`, for each `LossFunction`.

use rnn_core::{DType, Error, Result, Tensor};

use crate::spec::LossFunction;

/// Labels prepared for a loss: class ids, or dense float targets shaped like the outputs.
#[derive(Clone)]
pub(crate) enum Targets {
    Ids(Tensor),
    Dense(Tensor),
}

impl Targets {
    /// Checks `y` against the network's per-sample output shape and converts it; `op`
    /// names the API in errors.
    pub fn prepare(y: &Tensor, loss: LossFunction, out_shape: &[usize], n: usize, op: &'static str) -> Result<Targets> {
        let bad = |msg: String| Err(Error::invalid(op, msg));
        if y.dims().first() != Some(&n) {
            return bad(format!("{n} input samples but labels of shape {:?}", y.dims()));
        }
        let per_sample = &y.dims()[1..];
        if loss == LossFunction::CategoricalCrossEntropy && per_sample.is_empty() {
            let classes = out_shape.first().copied().unwrap_or(0);
            let ids = class_ids(y, classes, op)?;
            return Ok(Targets::Ids(ids));
        }
        let y = match per_sample == out_shape {
            true => y.clone(),
            false if per_sample.is_empty() && out_shape == [1] => y.reshape((n, 1))?,
            false => {
                return bad(format!(
                    "labels of shape {:?} do not match outputs of shape [{n}, {}] for {loss:?}",
                    y.dims(),
                    out_shape.iter().map(|d| d.to_string()).collect::<Vec<_>>().join(", ")
                ))
            }
        };
        Ok(Targets::Dense(y.to_dtype(DType::F32)?))
    }

    pub fn rows(&self, ids: &Tensor) -> Result<Targets> {
        Ok(match self {
            Targets::Ids(t) => Targets::Ids(t.index_select(ids, 0)?),
            Targets::Dense(t) => Targets::Dense(t.index_select(ids, 0)?),
        })
    }

    pub fn narrow(&self, start: usize, len: usize) -> Result<Targets> {
        Ok(match self {
            Targets::Ids(t) => Targets::Ids(t.narrow(0, start, len)?),
            Targets::Dense(t) => Targets::Dense(t.narrow(0, start, len)?),
        })
    }

    pub fn to_device(&self, device: rnn_core::Device) -> Result<Targets> {
        Ok(match self {
            Targets::Ids(t) => Targets::Ids(t.to_device(device)?),
            Targets::Dense(t) => Targets::Dense(t.to_device(device)?),
        })
    }
}

/// Integer (or integral float) labels in `0..classes`, as u32.
fn class_ids(y: &Tensor, classes: usize, op: &'static str) -> Result<Tensor> {
    rnn_nn::check_ids(op, "label", y, classes)?;
    y.to_dtype(DType::U32)
}

/// The mean loss of a batch. `out` is what `Network::logits` returns (pre-softmax /
/// pre-sigmoid when the loss folds that activation in, see `folded`).
pub(crate) fn loss(kind: LossFunction, out: &Tensor, targets: &Targets, folded: bool) -> Result<Tensor> {
    match (kind, targets) {
        (LossFunction::CategoricalCrossEntropy, Targets::Ids(ids)) => rnn_nn::cross_entropy(out, ids),
        (LossFunction::CategoricalCrossEntropy, Targets::Dense(p)) => {
            out.log_softmax(-1)?.mul(p)?.sum(-1)?.mean_all()?.neg()
        }
        (LossFunction::BinaryCrossEntropy, Targets::Dense(y)) => match folded {
            true => rnn_nn::loss::binary_cross_entropy_with_logits(out, y),
            false => rnn_nn::loss::binary_cross_entropy(out, y),
        },
        (LossFunction::MeanSquaredError, Targets::Dense(y)) => rnn_nn::mse(out, y),
        (LossFunction::Huber(delta), Targets::Dense(y)) => rnn_nn::loss::huber_loss(out, y, delta),
        (kind, _) => Err(Error::invalid("Network", format!("{kind:?} cannot use class-id labels"))),
    }
}

/// Correct predictions in a batch (a scalar tensor, read later so the device need not
/// synchronize) and how many predictions were made; None when accuracy does not apply.
pub(crate) fn correct(
    kind: LossFunction,
    out: &Tensor,
    targets: &Targets,
    folded: bool,
) -> Result<Option<(Tensor, usize)>> {
    let hits = match (kind, targets) {
        // argmax gives i64 positions (as PyTorch's); the labels may be u32.
        (LossFunction::CategoricalCrossEntropy, Targets::Ids(ids)) => out.argmax(-1)?.eq(&ids.to_dtype(DType::I64)?)?,
        (LossFunction::CategoricalCrossEntropy, Targets::Dense(p)) => out.argmax(-1)?.eq(&p.argmax(-1)?)?,
        (LossFunction::BinaryCrossEntropy, Targets::Dense(y)) => {
            let threshold = if folded { 0.0 } else { 0.5 };
            out.gt_scalar(threshold)?.eq(&y.gt_scalar(0.5)?)?
        }
        _ => return Ok(None),
    };
    Ok(Some((hits.to_dtype(DType::F32)?.sum_all()?, hits.elem_count())))
}

/// Predicted classes from network outputs: argmax over the last dim, or `> 0.5` for a
/// single output; i64, as argmax gives.
pub(crate) fn classes(out: &Tensor) -> Result<Tensor> {
    match out.dims().last() {
        Some(1) => out.gt_scalar(0.5)?.to_dtype(DType::I64)?.flatten_all(),
        _ => out.argmax(-1),
    }
}
