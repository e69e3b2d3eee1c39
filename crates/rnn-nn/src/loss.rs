//! Loss functions, each returning a scalar tensor (mean over the batch).

use rnn_core::{Result, Tensor};

/// Cross entropy from logits `[batch, classes]` and class ids `[batch]` (u32), averaged.
pub fn cross_entropy(logits: &Tensor, targets: &Tensor) -> Result<Tensor> {
    let log_probs = logits.log_softmax(-1)?;
    let picked = log_probs.gather(&targets.unsqueeze(1)?, 1)?;
    picked.mean_all()?.neg()
}

/// Mean squared error.
pub fn mse(prediction: &Tensor, target: &Tensor) -> Result<Tensor> {
    prediction.sub(target)?.sqr()?.mean_all()
}
