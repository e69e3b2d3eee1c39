//! Mixed precision in the training loops (`Network::train`, `train_gpt`): the forward pass
//! and the loss under `rnn_core::autocast`, f32 weights and optimizer, and for f16 the
//! dynamic loss scaling of `GradScaler` around the backward pass and the step.

use rnn_core::{AutocastGuard, DType, Device, Error, GradStore, Result, Tensor};
use rnn_nn::optim::{GradScaler, GradScalerConfig, Optimizer};

use crate::config::MixedPrecision;

/// The precision of one training run; f32 when `mixed` is `None`.
#[derive(Clone, Debug)]
pub(crate) struct Precision {
    mixed: Option<MixedPrecision>,
    scaler: Option<GradScaler>,
}

impl Precision {
    /// Checks that `device` computes in the 16-bit dtype (a clear error where it does not).
    pub(crate) fn new(mixed: Option<MixedPrecision>, device: Device) -> Result<Self> {
        let Some(m) = mixed else { return Ok(Precision { mixed, scaler: None }) };
        check_device(m, device)?;
        let scaler = m.needs_loss_scaling().then(|| GradScaler::new(GradScalerConfig::default())).transpose()?;
        Ok(Precision { mixed, scaler })
    }

    /// Runs `f` (the forward pass and the loss) under autocast when mixed.
    pub(crate) fn forward<R>(&self, f: impl FnOnce() -> Result<R>) -> Result<R> {
        let _guard = self.mixed.map(|m| AutocastGuard::new(m.dtype())).transpose()?;
        f()
    }

    /// The loss to differentiate: scaled by the loss scale with f16, the loss otherwise.
    pub(crate) fn scaled(&self, loss: &Tensor) -> Result<Tensor> {
        match &self.scaler {
            Some(s) => s.scale(loss),
            None => Ok(loss.clone()),
        }
    }

    /// Divides scaled gradients back (before clipping); nothing without loss scaling.
    pub(crate) fn unscale(&mut self, grads: &mut GradStore, params: &[Tensor]) -> Result<()> {
        match &mut self.scaler {
            Some(s) => s.unscale(grads, params),
            None => Ok(()),
        }
    }

    /// The optimizer step, skipped when loss scaling found an inf or NaN gradient (the
    /// scale is then lowered); returns whether it stepped.
    pub(crate) fn step(
        &mut self,
        optimizer: &mut dyn Optimizer,
        grads: &mut GradStore,
        params: &[Tensor],
    ) -> Result<bool> {
        let Some(s) = &mut self.scaler else {
            optimizer.step(grads)?;
            return Ok(true);
        };
        let stepped = s.step(optimizer, grads, params)?;
        s.update()?;
        Ok(stepped)
    }
}

/// An error unless a matmul in `m`'s dtype runs on `device` (a wgpu adapter without 16-bit
/// floats, say): tried on a tiny product, so that training fails at once, not mid-epoch.
fn check_device(m: MixedPrecision, device: Device) -> Result<()> {
    let probe = || -> Result<()> {
        let a = Tensor::ones((2, 2), DType::F32, device)?.to_dtype(m.dtype())?;
        a.matmul(&a)?.to_dtype(DType::F32)?.to_vec2::<f32>()?;
        Ok(())
    };
    probe().map_err(|e| {
        let msg = format!("{} mixed precision is not available on {device} ({e}); train in f32 there", m.name());
        Error::invalid("mixed_precision", msg)
    })
}
