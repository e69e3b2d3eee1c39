//! Loss functions, with PyTorch's semantics. Each takes the predictions first and the
//! targets second. The plain functions (`mse`, `cross_entropy`, ...) average over all
//! elements; the `_with` forms take a [`Reduction`] (and, for cross entropy, options).
//!
//! Every function checks its arguments before computing: shapes must match exactly (no
//! silent broadcasting of `[N, 1]` against `[N]`), targets must have the right dtype, class
//! ids must be in range, and empty batches are an error rather than a NaN.

use rnn_core::autocast::{cast, AutocastOp};
use rnn_core::{DType, Device, Error, Result, Tensor};

/// How per-element losses become the result.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Reduction {
    /// The average (for cross entropy with `ignore_index`: over the targets not ignored).
    #[default]
    Mean,
    Sum,
    /// No reduction: one loss per element (per sample for cross entropy and NLL).
    None,
}

impl Reduction {
    /// Reduces `per_element`; `count` is the divisor of the mean.
    fn apply(self, per_element: Tensor, count: usize) -> Result<Tensor> {
        match self {
            Reduction::Mean => per_element.sum_all()?.div_scalar(count as f64),
            Reduction::Sum => per_element.sum_all(),
            Reduction::None => Ok(per_element),
        }
    }
}

/// Options of [`cross_entropy_with`]; the default is plain cross entropy averaged.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct CrossEntropyOptions {
    /// In `[0, 1]`: the target becomes `(1 - s) * target + s / classes` (PyTorch's
    /// `label_smoothing`).
    pub label_smoothing: f64,
    pub reduction: Reduction,
    /// Targets equal to this id add nothing to the loss and are not counted by the mean
    /// (PyTorch's `ignore_index`, whose default there is -100; here `None` means every id
    /// must be a valid class). Only used with class-id targets.
    pub ignore_index: Option<i64>,
}

impl Default for CrossEntropyOptions {
    fn default() -> Self {
        CrossEntropyOptions { label_smoothing: 0.0, reduction: Reduction::Mean, ignore_index: None }
    }
}

/// Cross entropy from logits and class ids (u8, u32 or i64), averaged over the batch.
/// Same shapes as [`cross_entropy_with`]. A class id out of range is an
/// `Error::IndexOutOfRange`: on the CPU at once; on a GPU, which checks the ids on the
/// device rather than reading them back, at the next sync point.
pub fn cross_entropy(logits: &Tensor, targets: &Tensor) -> Result<Tensor> {
    cross_entropy_with(logits, targets, &CrossEntropyOptions::default())
}

/// Cross entropy of `softmax(logits)` against the targets, like `torch.nn.functional.cross_entropy`.
///
/// The class dim is dim 1 (dim 0 for 1-D logits): logits are `[N, C]`, `[C]` or
/// `[N, C, d1, ...]` (so `[B, T, C]` sequence logits need `flatten(0, 1)` or a transpose
/// first). Targets are either class ids (u8, u32 or i64) of the logits' shape without the
/// class dim, or class probabilities (the logits' float dtype and shape).
///
/// Class ids go through the fused `Tensor::cross_entropy_logits` (no probabilities stored,
/// no read-back of the ids); the mean is over the targets not ignored, NaN when every target
/// is ignored (as in PyTorch). Probability targets are composed from `log_softmax`.
pub fn cross_entropy_with(logits: &Tensor, targets: &Tensor, options: &CrossEntropyOptions) -> Result<Tensor> {
    let (logits, targets) = (&cast(AutocastOp::Loss, logits)?, &cast(AutocastOp::Loss, targets)?);
    const OP: &str = "cross_entropy";
    let class_dim = check_class_input(OP, logits)?;
    let smoothing = options.label_smoothing;
    if !(0.0..=1.0).contains(&smoothing) {
        return Err(Error::invalid(OP, format!("label_smoothing must be in [0, 1], got {smoothing}")));
    }
    if targets.dtype().is_float() {
        let log_probs = logits.log_softmax(class_dim)?;
        return probability_targets_loss(&log_probs, targets, class_dim, smoothing, options.reduction);
    }
    fused_class_ids_loss(OP, logits, targets, class_dim, options)
}

/// Class-id targets through the fused kernel: the logits with the class dim moved last and
/// the other dims flattened into rows, then the reduction.
fn fused_class_ids_loss(
    op: &'static str,
    logits: &Tensor,
    targets: &Tensor,
    class_dim: usize,
    options: &CrossEntropyOptions,
) -> Result<Tensor> {
    check_target_ids(op, logits, targets, class_dim)?;
    let classes = logits.dims()[class_dim];
    let rows = match logits.rank() {
        1 => logits.reshape((1, classes))?,
        2 => logits.clone(),
        r => {
            let mut perm: Vec<usize> = (0..r).filter(|&d| d != class_dim).collect();
            perm.push(class_dim);
            logits.permute(&perm)?.reshape((logits.elem_count() / classes, classes))?
        }
    };
    let ids = targets.flatten_all()?;
    let per_sample = rows.cross_entropy_logits(&ids, options.label_smoothing, options.ignore_index)?;
    let per_sample = per_sample.reshape(targets.shape().clone())?;
    match (options.reduction, options.ignore_index) {
        (Reduction::Mean, Some(ignore)) => {
            // The count of targets not ignored, on the device: no read-back in a training step.
            let kept = targets.to_dtype(DType::I64)?.ne_scalar(ignore as f64)?.to_dtype(logits.dtype())?.sum_all()?;
            per_sample.sum_all()?.div(&kept)
        }
        (reduction, _) => {
            let count = per_sample.elem_count();
            reduction.apply(per_sample, count)
        }
    }
}

/// Negative log likelihood of class ids, from log-probabilities (`log_softmax` output),
/// averaged. Shapes as for [`cross_entropy_with`] with class-id targets.
pub fn nll_loss(log_probs: &Tensor, targets: &Tensor) -> Result<Tensor> {
    nll_loss_with(log_probs, targets, Reduction::Mean, None)
}

/// [`nll_loss`] with a reduction and an optional id to ignore.
pub fn nll_loss_with(
    log_probs: &Tensor,
    targets: &Tensor,
    reduction: Reduction,
    ignore_index: Option<i64>,
) -> Result<Tensor> {
    let (log_probs, targets) = (&cast(AutocastOp::Loss, log_probs)?, &cast(AutocastOp::Loss, targets)?);
    const OP: &str = "nll_loss";
    let class_dim = check_class_input(OP, log_probs)?;
    let options = CrossEntropyOptions { label_smoothing: 0.0, reduction, ignore_index };
    class_ids_loss(OP, log_probs, targets, class_dim, 0.0, &options)
}

/// Mean squared error; `prediction` and `target` must have the same shape.
pub fn mse(prediction: &Tensor, target: &Tensor) -> Result<Tensor> {
    mse_with(prediction, target, Reduction::Mean)
}

pub fn mse_with(prediction: &Tensor, target: &Tensor, reduction: Reduction) -> Result<Tensor> {
    let (prediction, target) = (&cast(AutocastOp::Loss, prediction)?, &cast(AutocastOp::Loss, target)?);
    check_pair("mse", prediction, target)?;
    reduction.apply(prediction.sub(target)?.sqr()?, prediction.elem_count())
}

/// Mean absolute error; `prediction` and `target` must have the same shape.
pub fn l1_loss(prediction: &Tensor, target: &Tensor) -> Result<Tensor> {
    l1_loss_with(prediction, target, Reduction::Mean)
}

pub fn l1_loss_with(prediction: &Tensor, target: &Tensor, reduction: Reduction) -> Result<Tensor> {
    let (prediction, target) = (&cast(AutocastOp::Loss, prediction)?, &cast(AutocastOp::Loss, target)?);
    check_pair("l1_loss", prediction, target)?;
    reduction.apply(prediction.sub(target)?.abs()?, prediction.elem_count())
}

/// Huber loss, averaged: `0.5 d²` where `|d| < delta`, else `delta (|d| - 0.5 delta)`, with
/// `d = prediction - target` and `delta > 0`.
pub fn huber_loss(prediction: &Tensor, target: &Tensor, delta: f64) -> Result<Tensor> {
    huber_loss_with(prediction, target, delta, Reduction::Mean)
}

pub fn huber_loss_with(prediction: &Tensor, target: &Tensor, delta: f64, reduction: Reduction) -> Result<Tensor> {
    let (prediction, target) = (&cast(AutocastOp::Loss, prediction)?, &cast(AutocastOp::Loss, target)?);
    check_pair("huber_loss", prediction, target)?;
    if !(delta > 0.0 && delta.is_finite()) {
        return Err(Error::invalid("huber_loss", format!("delta must be finite and > 0, got {delta}")));
    }
    // With c = min(|d|, delta): 0.5 c² + delta (|d| - c), both pieces in one formula. A
    // select between the pieces would send 0 * d (NaN where d is infinite) back through the
    // unselected quadratic; this way an infinite d has PyTorch's finite gradient, ±delta.
    let abs = prediction.sub(target)?.abs()?;
    let c = abs.minimum_scalar(delta)?;
    let per_element = c.sqr()?.mul_scalar(0.5)?.add(&abs.sub(&c)?.mul_scalar(delta)?)?;
    reduction.apply(per_element, prediction.elem_count())
}

/// Binary cross entropy of probabilities in `[0, 1]` (e.g. sigmoid outputs) against targets
/// of the same shape, averaged. Each log is clamped to `>= -100`, as PyTorch does, so a
/// probability of exactly 0 or 1 gives a finite loss and gradient.
pub fn binary_cross_entropy(probs: &Tensor, targets: &Tensor) -> Result<Tensor> {
    binary_cross_entropy_with(probs, targets, Reduction::Mean)
}

pub fn binary_cross_entropy_with(probs: &Tensor, targets: &Tensor, reduction: Reduction) -> Result<Tensor> {
    let (probs, targets) = (&cast(AutocastOp::Loss, probs)?, &cast(AutocastOp::Loss, targets)?);
    const OP: &str = "binary_cross_entropy";
    check_pair(OP, probs, targets)?;
    let (lo, hi) = (probs.min_all()?.to_f64_scalar()?, probs.max_all()?.to_f64_scalar()?);
    if !(lo >= 0.0 && hi <= 1.0) {
        let msg = format!("probabilities must be in [0, 1], got values in [{lo}, {hi}] (use the _with_logits form)");
        return Err(Error::invalid(OP, msg));
    }
    let log_p = clamped_log(probs)?;
    let log_not_p = clamped_log(&probs.neg()?.add_scalar(1.0)?)?;
    let not_targets = targets.neg()?.add_scalar(1.0)?;
    let per_element = targets.mul(&log_p)?.add(&not_targets.mul(&log_not_p)?)?.neg()?;
    reduction.apply(per_element, probs.elem_count())
}

/// `max(log(x), -100)`. Inputs at or below `tiny` (e^-100, or the dtype's smallest normal
/// number where e^-100 is not a normal number of it, as in f32) give -100 through a select,
/// and the log only ever sees inputs of at least `tiny`: an input of 0 gets a zero gradient
/// instead of 0/0, and no subnormal reaches the log, whose result GPUs flush or approximate
/// (lavapipe returns log(2^-127) = -88.03 for every f32 subnormal).
fn clamped_log(x: &Tensor) -> Result<Tensor> {
    const LOG_FLOOR: f64 = -100.0;
    let tiny = LOG_FLOOR.exp().max(smallest_normal(x.dtype()));
    let log = x.maximum_scalar(tiny)?.log()?.maximum_scalar(LOG_FLOOR)?;
    let floor = Tensor::full(LOG_FLOOR, (), x.dtype(), x.device())?;
    x.gt_scalar(tiny)?.where_cond(&log, &floor)
}

/// The smallest positive normal number of a float dtype (0 for integers).
fn smallest_normal(dtype: DType) -> f64 {
    match dtype {
        DType::F64 => f64::MIN_POSITIVE,
        DType::F32 | DType::BF16 => f32::MIN_POSITIVE as f64,
        DType::F16 => 6.103515625e-5,
        DType::U8 | DType::U32 | DType::I64 => 0.0,
    }
}

/// Binary cross entropy of `sigmoid(logits)` against targets of the same shape, averaged,
/// computed stably as `softplus(x) - x y` = `max(x, 0) - x y + log(1 + exp(-|x|))`.
pub fn binary_cross_entropy_with_logits(logits: &Tensor, targets: &Tensor) -> Result<Tensor> {
    binary_cross_entropy_with_logits_with(logits, targets, Reduction::Mean)
}

pub fn binary_cross_entropy_with_logits_with(
    logits: &Tensor,
    targets: &Tensor,
    reduction: Reduction,
) -> Result<Tensor> {
    let (logits, targets) = (&cast(AutocastOp::Loss, logits)?, &cast(AutocastOp::Loss, targets)?);
    check_pair("binary_cross_entropy_with_logits", logits, targets)?;
    // The fused softplus is stable for large |x| and its gradient is sigmoid(x) everywhere,
    // also at x = 0 where the max/abs form has kinks.
    let per_element = logits.softplus()?.sub(&logits.mul(targets)?)?;
    reduction.apply(per_element, logits.elem_count())
}

/// A loss chosen at run time, e.g. by a training configuration. Every variant averages.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Loss {
    Mse,
    L1,
    /// Cross entropy from logits (class dim 1) against class ids or probabilities.
    CrossEntropy {
        label_smoothing: f64,
    },
    /// Negative log likelihood from log-probabilities against class ids.
    Nll,
    /// Binary cross entropy from probabilities.
    Bce,
    /// Binary cross entropy from logits.
    BceWithLogits,
    Huber {
        delta: f64,
    },
}

impl Loss {
    /// The loss of `prediction` against `target`, a scalar tensor.
    pub fn compute(&self, prediction: &Tensor, target: &Tensor) -> Result<Tensor> {
        match *self {
            Loss::Mse => mse(prediction, target),
            Loss::L1 => l1_loss(prediction, target),
            Loss::CrossEntropy { label_smoothing } => {
                let options = CrossEntropyOptions { label_smoothing, ..Default::default() };
                cross_entropy_with(prediction, target, &options)
            }
            Loss::Nll => nll_loss(prediction, target),
            Loss::Bce => binary_cross_entropy(prediction, target),
            Loss::BceWithLogits => binary_cross_entropy_with_logits(prediction, target),
            Loss::Huber { delta } => huber_loss(prediction, target, delta),
        }
    }

    /// A short name for logs ("mse", "cross_entropy", ...).
    pub fn name(&self) -> &'static str {
        match self {
            Loss::Mse => "mse",
            Loss::L1 => "l1",
            Loss::CrossEntropy { .. } => "cross_entropy",
            Loss::Nll => "nll",
            Loss::Bce => "bce",
            Loss::BceWithLogits => "bce_with_logits",
            Loss::Huber { .. } => "huber",
        }
    }
}

// ---------------------------------------------------------------- argument checks

/// Checks that prediction and target are non-empty float tensors of one shape and dtype.
fn check_pair(op: &'static str, prediction: &Tensor, target: &Tensor) -> Result<()> {
    if !prediction.dtype().is_float() {
        let hint = ": predictions must be a float tensor";
        return Err(Error::UnsupportedDType { op, dtype: prediction.dtype(), hint });
    }
    if prediction.dtype() != target.dtype() {
        return Err(Error::DTypeMismatch { op, lhs: prediction.dtype(), rhs: target.dtype() });
    }
    if prediction.shape() != target.shape() {
        return Err(Error::ShapeMismatch { op, lhs: prediction.shape().clone(), rhs: target.shape().clone() });
    }
    if prediction.elem_count() == 0 {
        return Err(Error::EmptyTensor { op, shape: prediction.shape().clone() });
    }
    Ok(())
}

/// Checks the logits / log-probabilities of a classification loss; returns the class dim.
fn check_class_input(op: &'static str, scores: &Tensor) -> Result<usize> {
    if !scores.dtype().is_float() {
        return Err(Error::UnsupportedDType { op, dtype: scores.dtype(), hint: ": scores must be a float tensor" });
    }
    if scores.rank() == 0 {
        let msg = "scores must be [C], [N, C] or [N, C, d1, ...], got a scalar";
        return Err(Error::invalid(op, msg));
    }
    if scores.elem_count() == 0 {
        return Err(Error::EmptyTensor { op, shape: scores.shape().clone() });
    }
    Ok(if scores.rank() == 1 { 0 } else { 1 })
}

/// Probability targets: `-sum_c t'_c log p_c` per sample, `t' = (1 - s) t + s / C`.
fn probability_targets_loss(
    log_probs: &Tensor,
    targets: &Tensor,
    class_dim: usize,
    smoothing: f64,
    reduction: Reduction,
) -> Result<Tensor> {
    check_pair("cross_entropy", log_probs, targets)?;
    let classes = log_probs.dims()[class_dim] as f64;
    let smoothed = match smoothing > 0.0 {
        true => targets.mul_scalar(1.0 - smoothing)?.add_scalar(smoothing / classes)?,
        false => targets.clone(),
    };
    let per_sample = log_probs.mul(&smoothed)?.sum(class_dim)?.neg()?;
    let count = per_sample.elem_count();
    reduction.apply(per_sample, count)
}

/// Class-id targets: `-(1 - s) log p_target - s mean_c log p_c` per sample, ignored
/// targets masked out (and not counted by the mean).
fn class_ids_loss(
    op: &'static str,
    log_probs: &Tensor,
    targets: &Tensor,
    class_dim: usize,
    smoothing: f64,
    options: &CrossEntropyOptions,
) -> Result<Tensor> {
    let ids = ClassIds::check(op, log_probs, targets, class_dim, options.ignore_index)?;
    let picked = log_probs.gather(&ids.safe.unsqueeze(class_dim)?, class_dim)?.squeeze(class_dim)?;
    let mut per_sample = picked.neg()?;
    if smoothing > 0.0 {
        let uniform_part = log_probs.mean(class_dim)?.neg()?;
        per_sample = per_sample.mul_scalar(1.0 - smoothing)?.add(&uniform_part.mul_scalar(smoothing)?)?;
    }
    if let Some(keep) = &ids.keep {
        per_sample = per_sample.mul(keep)?;
    }
    options.reduction.apply(per_sample, ids.kept)
}

/// Checks that class-id targets have an integer dtype and the scores' shape without the
/// class dim.
fn check_target_ids(op: &'static str, scores: &Tensor, targets: &Tensor, class_dim: usize) -> Result<()> {
    if targets.dtype().is_float() {
        let hint = ": class-id targets must be u8, u32 or i64";
        return Err(Error::UnsupportedDType { op, dtype: targets.dtype(), hint });
    }
    let mut expected = scores.dims().to_vec();
    expected.remove(class_dim);
    if targets.dims() != expected.as_slice() {
        let msg = format!(
            "targets of shape {:?} do not match scores of shape {:?}: expected {expected:?} (class dim {class_dim} removed)",
            targets.dims(),
            scores.dims()
        );
        return Err(Error::invalid(op, msg));
    }
    Ok(())
}

/// Class ids checked against the number of classes, ready for `gather`.
struct ClassIds {
    /// The ids as i64, with ignored ones replaced by 0 so `gather` stays in range.
    safe: Tensor,
    /// 1 where the target counts, 0 where it is ignored (`None` when none is ignored).
    keep: Option<Tensor>,
    kept: usize,
}

impl ClassIds {
    fn check(
        op: &'static str,
        scores: &Tensor,
        targets: &Tensor,
        class_dim: usize,
        ignore: Option<i64>,
    ) -> Result<ClassIds> {
        check_target_ids(op, scores, targets, class_dim)?;
        let classes = scores.dims()[class_dim] as i64;
        let ids = targets.to_dtype(DType::I64)?;
        if ignore.is_none() && !targets.device().is_cpu() {
            // No read-back in a training step: `gather` checks the ids on the device, and a
            // bad one is reported (`Error::IndexOutOfRange`) at the next sync point.
            let kept = ids.elem_count();
            return Ok(ClassIds { safe: ids, keep: None, kept });
        }
        let host = ids.to_vec::<i64>()?;
        let ignored = |id: i64| ignore == Some(id);
        if let Some((pos, id)) = host.iter().enumerate().find(|&(_, &id)| !ignored(id) && !(0..classes).contains(&id)) {
            let msg = format!("target {id} at flat position {pos} is out of range for {classes} classes");
            return Err(Error::invalid(op, msg));
        }
        let kept = host.iter().filter(|&&id| !ignored(id)).count();
        if kept == host.len() {
            return Ok(ClassIds { safe: ids, keep: None, kept });
        }
        if kept == 0 {
            let msg = format!("every target equals ignore_index {ignore:?}: the loss would be 0/0");
            return Err(Error::invalid(op, msg));
        }
        let device = scores.device();
        let safe: Vec<i64> = host.iter().map(|&id| if ignored(id) { 0 } else { id }).collect();
        let keep: Vec<f64> = host.iter().map(|&id| if ignored(id) { 0.0 } else { 1.0 }).collect();
        // Built on the host in f64, then cast and moved: the device need not hold f64.
        let keep = Tensor::from_vec(keep, targets.dims(), Device::Cpu)?.to_dtype(scores.dtype())?.to_device(device)?;
        Ok(ClassIds { safe: Tensor::from_vec(safe, targets.dims(), device)?, keep: Some(keep), kept })
    }
}
