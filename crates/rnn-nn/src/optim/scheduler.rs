//! Learning-rate schedules, as in `torch.optim.lr_scheduler`.
//!
//! A scheduler knows the learning rate of each epoch. Use it like this:
//! 1. `scheduler.apply(&mut opt)` once before training (a warmup starts below the base rate);
//! 2. `scheduler.step(&mut opt, metric)` once at the end of every epoch, which moves to the
//!    next epoch and sets the optimizer's rate. `metric` (e.g. the validation loss) is read
//!    only by `ReduceLrOnPlateau`, which requires it.
//!
//! `LrSchedule` is the same choice as a plain value for a training config.

use rnn_core::{Error, Result};

use super::{check, Optimizer};

/// A learning rate per epoch. See the module docs for the calling convention.
pub trait LrScheduler: Send {
    /// Moves to the next epoch and returns its learning rate.
    fn advance(&mut self, metric: Option<f64>) -> Result<f64>;

    /// The learning rate of the current epoch.
    fn current_lr(&self) -> f64;

    /// Call once per epoch, at its end: advances and sets `opt`'s learning rate.
    fn step(&mut self, opt: &mut dyn Optimizer, metric: Option<f64>) -> Result<()> {
        let lr = self.advance(metric)?;
        opt.set_learning_rate(lr);
        Ok(())
    }

    /// Sets `opt`'s learning rate to the current one; call before the first epoch.
    fn apply(&self, opt: &mut dyn Optimizer) {
        opt.set_learning_rate(self.current_lr());
    }
}

/// Which schedule to use, as a value (for configs); `build` makes the scheduler.
#[derive(Clone, Debug, PartialEq, Default)]
pub enum LrSchedule {
    /// The base rate throughout.
    #[default]
    Constant,
    /// Multiply by `gamma` every `step_size` epochs (`StepLR`).
    Step { step_size: usize, gamma: f64 },
    /// Multiply by `gamma` every epoch (`ExponentialLR`).
    Exponential { gamma: f64 },
    /// Half a cosine from the base rate down to `eta_min` over `t_max` epochs
    /// (`CosineAnnealingLR`, which continues periodically after `t_max`).
    CosineAnnealing { t_max: usize, eta_min: f64 },
    /// Linear ramp from `start_factor * base` to `base` over `warmup_steps` epochs
    /// (`LinearLR`), then the schedule `then`, whose epoch 0 is the end of the warmup.
    LinearWarmup { warmup_steps: usize, start_factor: f64, then: Box<LrSchedule> },
    /// Divide the rate when a metric stops improving (`ReduceLROnPlateau`).
    ReduceOnPlateau(PlateauConfig),
}

impl LrSchedule {
    pub fn step(step_size: usize, gamma: f64) -> Self {
        LrSchedule::Step { step_size, gamma }
    }

    pub fn cosine(t_max: usize, eta_min: f64) -> Self {
        LrSchedule::CosineAnnealing { t_max, eta_min }
    }

    /// A linear warmup from `base / warmup_steps`, then `then`.
    pub fn warmup(warmup_steps: usize, then: LrSchedule) -> Self {
        let start_factor = 1.0 / warmup_steps.max(1) as f64;
        LrSchedule::LinearWarmup { warmup_steps, start_factor, then: Box::new(then) }
    }

    /// Reduce-on-plateau with PyTorch's defaults.
    pub fn plateau() -> Self {
        LrSchedule::ReduceOnPlateau(PlateauConfig::default())
    }

    /// The scheduler starting at `base_lr` (normally the optimizer's configured rate).
    pub fn build(&self, base_lr: f64) -> Result<Box<dyn LrScheduler>> {
        Ok(match self {
            LrSchedule::Constant => Box::new(ConstantLr::new(base_lr)?),
            LrSchedule::Step { step_size, gamma } => Box::new(StepLr::new(base_lr, *step_size, *gamma)?),
            LrSchedule::Exponential { gamma } => Box::new(ExponentialLr::new(base_lr, *gamma)?),
            LrSchedule::CosineAnnealing { t_max, eta_min } => {
                Box::new(CosineAnnealingLr::new(base_lr, *t_max, *eta_min)?)
            }
            LrSchedule::LinearWarmup { warmup_steps, start_factor, then } => {
                Box::new(LinearWarmup::new(base_lr, *warmup_steps, *start_factor, then.build(base_lr)?)?)
            }
            LrSchedule::ReduceOnPlateau(config) => Box::new(ReduceLrOnPlateau::new(base_lr, config.clone())?),
        })
    }
}

fn check_base(name: &'static str, base_lr: f64) -> Result<()> {
    check::non_negative(name, "base learning rate", base_lr)
}

/// `base * factor^exponent` with the exponent an epoch count (saturating, not wrapping).
fn decayed(base: f64, factor: f64, exponent: usize) -> f64 {
    base * factor.powi(i32::try_from(exponent).unwrap_or(i32::MAX))
}

/// The same rate every epoch.
pub struct ConstantLr {
    lr: f64,
}

impl ConstantLr {
    pub fn new(lr: f64) -> Result<Self> {
        check_base("ConstantLr", lr)?;
        Ok(ConstantLr { lr })
    }
}

impl LrScheduler for ConstantLr {
    fn advance(&mut self, _: Option<f64>) -> Result<f64> {
        Ok(self.lr)
    }
    fn current_lr(&self) -> f64 {
        self.lr
    }
}

/// `base * gamma^(epoch / step_size)` (integer division), as `torch.optim.lr_scheduler.StepLR`.
pub struct StepLr {
    base: f64,
    step_size: usize,
    gamma: f64,
    epoch: usize,
}

impl StepLr {
    pub fn new(base_lr: f64, step_size: usize, gamma: f64) -> Result<Self> {
        check_base("StepLr", base_lr)?;
        check::positive("StepLr", "gamma", gamma)?;
        if step_size == 0 {
            return Err(Error::invalid("StepLr", "step_size must be at least 1"));
        }
        Ok(StepLr { base: base_lr, step_size, gamma, epoch: 0 })
    }
}

impl LrScheduler for StepLr {
    fn advance(&mut self, _: Option<f64>) -> Result<f64> {
        self.epoch += 1;
        Ok(self.current_lr())
    }
    fn current_lr(&self) -> f64 {
        decayed(self.base, self.gamma, self.epoch / self.step_size)
    }
}

/// `base * gamma^epoch`, as `ExponentialLR`.
pub struct ExponentialLr {
    base: f64,
    gamma: f64,
    epoch: usize,
}

impl ExponentialLr {
    pub fn new(base_lr: f64, gamma: f64) -> Result<Self> {
        check_base("ExponentialLr", base_lr)?;
        check::positive("ExponentialLr", "gamma", gamma)?;
        Ok(ExponentialLr { base: base_lr, gamma, epoch: 0 })
    }
}

impl LrScheduler for ExponentialLr {
    fn advance(&mut self, _: Option<f64>) -> Result<f64> {
        self.epoch += 1;
        Ok(self.current_lr())
    }
    fn current_lr(&self) -> f64 {
        decayed(self.base, self.gamma, self.epoch)
    }
}

/// `eta_min + (base - eta_min) * (1 + cos(pi * epoch / t_max)) / 2`, as
/// `CosineAnnealingLR`: the rate reaches `eta_min` at epoch `t_max`, and like PyTorch's
/// the schedule is periodic (it rises again after `t_max`).
pub struct CosineAnnealingLr {
    base: f64,
    t_max: usize,
    eta_min: f64,
    epoch: usize,
}

impl CosineAnnealingLr {
    pub fn new(base_lr: f64, t_max: usize, eta_min: f64) -> Result<Self> {
        check_base("CosineAnnealingLr", base_lr)?;
        check::non_negative("CosineAnnealingLr", "eta_min", eta_min)?;
        if t_max == 0 {
            return Err(Error::invalid("CosineAnnealingLr", "t_max must be at least 1"));
        }
        Ok(CosineAnnealingLr { base: base_lr, t_max, eta_min, epoch: 0 })
    }
}

impl LrScheduler for CosineAnnealingLr {
    fn advance(&mut self, _: Option<f64>) -> Result<f64> {
        self.epoch += 1;
        Ok(self.current_lr())
    }
    fn current_lr(&self) -> f64 {
        let phase = std::f64::consts::PI * self.epoch as f64 / self.t_max as f64;
        self.eta_min + (self.base - self.eta_min) * (1.0 + phase.cos()) / 2.0
    }
}

/// A linear ramp of the rate from `start_factor * base` at epoch 0 to `base` at epoch
/// `warmup_steps` (as `LinearLR`), after which `after` takes over: its epoch 0 is
/// epoch `warmup_steps` here (as `SequentialLR` with milestone `warmup_steps`).
pub struct LinearWarmup {
    base: f64,
    warmup_steps: usize,
    start_factor: f64,
    after: Box<dyn LrScheduler>,
    epoch: usize,
}

impl LinearWarmup {
    pub fn new(base_lr: f64, warmup_steps: usize, start_factor: f64, after: Box<dyn LrScheduler>) -> Result<Self> {
        check_base("LinearWarmup", base_lr)?;
        if warmup_steps == 0 {
            return Err(Error::invalid("LinearWarmup", "warmup_steps must be at least 1"));
        }
        if !(start_factor > 0.0 && start_factor <= 1.0) {
            return Err(Error::invalid("LinearWarmup", format!("start_factor must be in (0, 1], got {start_factor}")));
        }
        Ok(LinearWarmup { base: base_lr, warmup_steps, start_factor, after, epoch: 0 })
    }
}

impl LrScheduler for LinearWarmup {
    fn advance(&mut self, metric: Option<f64>) -> Result<f64> {
        self.epoch += 1;
        if self.epoch > self.warmup_steps {
            self.after.advance(metric)?;
        }
        Ok(self.current_lr())
    }
    fn current_lr(&self) -> f64 {
        if self.epoch >= self.warmup_steps {
            return self.after.current_lr();
        }
        let progress = self.epoch as f64 / self.warmup_steps as f64;
        self.base * (self.start_factor + (1.0 - self.start_factor) * progress)
    }
}

/// Whether a lower (`Min`, a loss) or higher (`Max`, an accuracy) metric is better.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum PlateauMode {
    #[default]
    Min,
    Max,
}

/// Settings of `ReduceLrOnPlateau`; `Default` is PyTorch's.
#[derive(Clone, Debug, PartialEq)]
pub struct PlateauConfig {
    pub mode: PlateauMode,
    /// The rate is multiplied by `factor` (< 1) on a plateau.
    pub factor: f64,
    /// Epochs without improvement tolerated before reducing.
    pub patience: usize,
    /// Relative improvement that counts: below `best * (1 - threshold)` in `Min` mode.
    pub threshold: f64,
    /// Epochs after a reduction during which bad epochs are not counted.
    pub cooldown: usize,
    /// The rate never goes below this.
    pub min_lr: f64,
}

impl Default for PlateauConfig {
    fn default() -> Self {
        PlateauConfig { mode: PlateauMode::Min, factor: 0.1, patience: 10, threshold: 1e-4, cooldown: 0, min_lr: 0.0 }
    }
}

/// Reductions smaller than this are skipped (PyTorch's `eps`).
const PLATEAU_EPS: f64 = 1e-8;

/// Multiplies the rate by `factor` once the metric has not improved for more than
/// `patience` epochs, as `ReduceLROnPlateau` with `threshold_mode="rel"`.
pub struct ReduceLrOnPlateau {
    config: PlateauConfig,
    lr: f64,
    best: f64,
    bad_epochs: usize,
    cooldown_left: usize,
}

impl ReduceLrOnPlateau {
    pub fn new(base_lr: f64, config: PlateauConfig) -> Result<Self> {
        check_base("ReduceLrOnPlateau", base_lr)?;
        if !(config.factor > 0.0 && config.factor < 1.0) {
            return Err(Error::invalid(
                "ReduceLrOnPlateau",
                format!("factor must be in (0, 1), got {}", config.factor),
            ));
        }
        check::non_negative("ReduceLrOnPlateau", "threshold", config.threshold)?;
        check::non_negative("ReduceLrOnPlateau", "min_lr", config.min_lr)?;
        let best = match config.mode {
            PlateauMode::Min => f64::INFINITY,
            PlateauMode::Max => f64::NEG_INFINITY,
        };
        Ok(ReduceLrOnPlateau { config, lr: base_lr, best, bad_epochs: 0, cooldown_left: 0 })
    }

    fn is_better(&self, metric: f64) -> bool {
        match self.config.mode {
            PlateauMode::Min => metric < self.best * (1.0 - self.config.threshold),
            PlateauMode::Max => metric > self.best * (1.0 + self.config.threshold),
        }
    }
}

impl LrScheduler for ReduceLrOnPlateau {
    fn advance(&mut self, metric: Option<f64>) -> Result<f64> {
        let metric = metric.ok_or_else(|| Error::invalid("ReduceLrOnPlateau", "step needs the metric to watch"))?;
        if self.is_better(metric) {
            self.best = metric;
            self.bad_epochs = 0;
        } else {
            self.bad_epochs += 1;
        }
        if self.cooldown_left > 0 {
            self.cooldown_left -= 1;
            self.bad_epochs = 0;
        }
        if self.bad_epochs > self.config.patience {
            let reduced = (self.lr * self.config.factor).max(self.config.min_lr);
            if self.lr - reduced > PLATEAU_EPS {
                self.lr = reduced;
            }
            self.cooldown_left = self.config.cooldown;
            self.bad_epochs = 0;
        }
        Ok(self.lr)
    }
    fn current_lr(&self) -> f64 {
        self.lr
    }
}
