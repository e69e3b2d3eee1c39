//! `Network::train` and `Network::evaluate`: the training loop.

use std::time::Instant;

use rnn_core::{no_grad, DType, Error, Result, Tensor};
use rnn_nn::optim::{clip_grad_norm_on_device, LrSchedule, LrScheduler, Optimizer, OptimizerConfig};

use crate::config::{MixedPrecision, Monitor, NonFinitePolicy, TrainingConfig};
use crate::data::Batches;
use crate::distributed::{rank_seed, ParallelRun};
use crate::guard::{self, GoodWeights};
use crate::history::History;
use crate::inputs::IntoTensor;
use crate::network::Network;
use crate::objective::{correct, loss, Targets};
use crate::precision::Precision;
use crate::progress::{EpochSummary, Progress, ProgressMode};

/// Loss and accuracy over a data set.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Evaluation {
    pub loss: f64,
    /// Fraction correct in 0..=1, for classification losses.
    pub accuracy: Option<f64>,
}

impl Evaluation {
    /// From the sums of `Totals::sums`: loss sum, correct predictions, predictions, samples.
    pub(crate) fn from_sums([loss, correct, predictions, samples]: [f64; 4]) -> Evaluation {
        Evaluation {
            loss: if samples > 0.0 { loss / samples } else { f64::NAN },
            accuracy: (predictions > 0.0).then(|| correct / predictions),
        }
    }
}

/// Running sums of one pass over data, kept as device tensors until read.
struct Totals {
    loss: Option<Tensor>,
    correct: Option<Tensor>,
    predictions: usize,
    samples: usize,
}

impl Totals {
    fn new() -> Self {
        Totals { loss: None, correct: None, predictions: 0, samples: 0 }
    }

    fn add(&mut self, batch_loss: &Tensor, hits: Option<(Tensor, usize)>, rows: usize) -> Result<()> {
        let weighted = batch_loss.detach().mul_scalar(rows as f64)?;
        self.loss = Some(match self.loss.take() {
            Some(sum) => sum.add(&weighted)?,
            None => weighted,
        });
        if let Some((h, count)) = hits {
            self.correct = Some(match self.correct.take() {
                Some(sum) => sum.add(&h)?,
                None => h,
            });
            self.predictions += count;
        }
        self.samples += rows;
        Ok(())
    }

    /// The mean loss and accuracy so far: one read-back (the only host sync of a progress
    /// update; training steps make none).
    fn read(&self) -> Result<Evaluation> {
        Ok(self.read_with(None)?.0)
    }

    /// `read`, plus the value of `probe` (a scalar) in the same read-back.
    fn read_with(&self, probe: Option<&Tensor>) -> Result<(Evaluation, Option<f64>)> {
        let parts: Vec<&Tensor> = [self.loss.as_ref(), self.correct.as_ref(), probe].into_iter().flatten().collect();
        let mut values = read_scalars(&parts)?.into_iter();
        let loss = self.loss.as_ref().and_then(|_| values.next());
        let correct = self.correct.as_ref().and_then(|_| values.next());
        let eval = Evaluation {
            loss: loss.map_or(f64::NAN, |l| l / self.samples.max(1) as f64),
            accuracy: correct.map(|c| c / self.predictions.max(1) as f64),
        };
        Ok((eval, probe.and_then(|_| values.next())))
    }

    /// Loss sum, correct predictions, predictions and samples, for adding up over ranks.
    fn sums(&self, eval: Evaluation) -> [f64; 4] {
        let loss = if self.samples > 0 { eval.loss * self.samples as f64 } else { 0.0 };
        let correct = eval.accuracy.map_or(0.0, |a| a * self.predictions as f64);
        [loss, correct.round(), self.predictions as f64, self.samples as f64]
    }
}

/// Scalar tensors of one device read back in one transfer (stacked as f64 when the first is
/// f64, else as f32, which counts exactly up to 2^24).
fn read_scalars(parts: &[&Tensor]) -> Result<Vec<f64>> {
    let Some(first) = parts.first() else { return Ok(Vec::new()) };
    let dtype = if first.dtype() == DType::F64 { DType::F64 } else { DType::F32 };
    let same = parts.iter().map(|t| t.to_dtype(dtype)).collect::<Result<Vec<_>>>()?;
    Tensor::stack(&same, 0)?.to_f64_vec()
}

impl Network {
    /// Trains on `x` (`[n, ..input_shape]`) and `y` (class ids `[n]`, one-hot `[n, classes]`,
    /// or targets shaped like the outputs) as `config` says, and returns the history. The
    /// network ends on the training device, in evaluation mode.
    ///
    /// A second call continues the first, as Keras' `fit` does: the optimizer keeps its
    /// state (Adam's moments and step count), the schedule its position, and shuffling and
    /// dropout go on with the next epoch's seeds, so two calls of one epoch train like one
    /// call of two. A call with another `optimizer`, `learning_rate` or `lr_schedule`, or on
    /// another device, starts afresh; so does one after `reset_optimizer`.
    ///
    /// A NaN or infinite loss or weight is handled as `config.on_non_finite` says; `train`
    /// never returns `Ok` with a NaN or infinite weight.
    pub fn train(&mut self, x: &impl IntoTensor, y: &impl IntoTensor, config: &TrainingConfig) -> Result<History> {
        const OP: &str = "Network::train";
        config.validate()?;
        let device = config.pick_device()?;
        let x = x.to_tensor()?;
        self.to_device(device)?;
        let x = self.check_inputs(&x, OP)?;
        let n = x.dims()[0];
        let targets = Targets::prepare(&y.to_tensor()?, self.loss_function(), self.output_shape(), n, OP)?;
        let targets = targets.to_device(device)?;
        let n_val = (n as f64 * config.validation_split).floor() as usize;
        let n_train = n - n_val;
        if n_train == 0 {
            let msg = format!("validation_split {} leaves no training samples of {n}", config.validation_split);
            return Err(rnn_core::Error::invalid(OP, msg));
        }
        let (x_train, t_train) = (x.narrow(0, 0, n_train)?, targets.narrow(0, n_train)?);
        let val = match n_val {
            0 => None,
            _ => Some((x.narrow(0, n_train, n_val)?, targets.narrow(n_train, n_val)?)),
        };
        if config.verbose && config.distributed.as_ref().is_none_or(|d| d.is_main()) {
            let precision = config.mixed_precision.map_or("f32", |m| m.name());
            eprintln!(
                "training on {device} in {precision}: {n_train} samples, {n_val} for validation, {} parameters",
                self.num_parameters()
            );
        }
        let result = Trainer::new(self, config, [n_train, n_val])?.run(&x_train, &t_train, val.as_ref());
        self.model.set_training(false);
        result
    }

    /// Loss and accuracy on `x`, `y` (evaluation mode, no gradients).
    pub fn evaluate(&self, x: &impl IntoTensor, y: &impl IntoTensor) -> Result<Evaluation> {
        const OP: &str = "Network::evaluate";
        let x = self.check_inputs(&x.to_tensor()?, OP)?;
        let n = x.dims()[0];
        let targets = Targets::prepare(&y.to_tensor()?, self.loss_function(), self.output_shape(), n, OP)?;
        self.evaluate_prepared(&x, &targets.to_device(self.device)?)
    }

    fn evaluate_prepared(&self, x: &Tensor, targets: &Targets) -> Result<Evaluation> {
        self.evaluate_totals(x, targets)?.read()
    }

    fn evaluate_totals(&self, x: &Tensor, targets: &Targets) -> Result<Totals> {
        let mut totals = Totals::new();
        let starts = self.map_batches(x, |xb| Ok(xb.dims()[0]))?;
        let mut start = 0;
        no_grad(|| -> Result<()> {
            for rows in starts {
                let out = self.logits(&x.narrow(0, start, rows)?)?;
                let tb = targets.narrow(start, rows)?;
                let folded = self.folds_last_activation();
                let batch_loss = loss(self.loss_function(), &out, &tb, folded)?;
                totals.add(&batch_loss, correct(self.loss_function(), &out, &tb, folded)?, rows)?;
                start += rows;
            }
            Ok(())
        })?;
        Ok(totals)
    }
}

/// What carries over from one `train` call to the next on the same network: the optimizer
/// with its state, the schedule's position, and the epochs done (they seed shuffling and
/// dropout).
pub(crate) struct TrainRun {
    settings: RunSettings,
    optimizer: Box<dyn Optimizer>,
    scheduler: Option<Box<dyn LrScheduler>>,
    /// Autocast and, for f16, the loss scaler (its scale carries over too).
    precision: Precision,
    epochs_done: u64,
}

/// The settings a `TrainRun` was started with: a call with other settings starts a new run.
#[derive(PartialEq)]
struct RunSettings {
    optimizer: OptimizerConfig,
    learning_rate: f64,
    lr_schedule: Option<LrSchedule>,
    mixed_precision: Option<MixedPrecision>,
}

impl TrainRun {
    /// `previous` when `config` has its settings, else a fresh optimizer for `net`.
    fn resume_or_start(previous: Option<TrainRun>, net: &Network, config: &TrainingConfig) -> Result<TrainRun> {
        let settings = RunSettings {
            optimizer: config.optimizer.clone(),
            learning_rate: config.learning_rate,
            lr_schedule: config.lr_schedule.clone(),
            mixed_precision: config.mixed_precision,
        };
        if let Some(run) = previous.filter(|run| run.settings == settings) {
            return Ok(run);
        }
        let params: Vec<Tensor> = net.named_parameters().into_iter().map(|(_, t)| t).collect();
        let mut optimizer = config.optimizer.clone().with_learning_rate(config.learning_rate).build(params)?;
        let scheduler = config.lr_schedule.as_ref().map(|s| s.build(config.learning_rate)).transpose()?;
        if let Some(s) = &scheduler {
            s.apply(optimizer.as_mut());
        }
        let precision = Precision::new(config.mixed_precision, net.device())?;
        Ok(TrainRun { settings, optimizer, scheduler, precision, epochs_done: 0 })
    }
}

/// The seed of dropout in epoch `epoch` of a run (counted over `train` calls): `seed` itself
/// in the first.
fn epoch_seed(seed: u64, epoch: u64) -> u64 {
    seed ^ epoch.wrapping_mul(0x9E37_79B9_7F4A_7C15)
}

/// Why the epochs stopped early.
enum Halt {
    /// A NaN or infinite value, where (see `guard::diverged`).
    NonFinite(String),
    Failed(Error),
}

impl From<Error> for Halt {
    fn from(e: Error) -> Self {
        Halt::Failed(e)
    }
}

/// State of one `train` call.
struct Trainer<'a> {
    net: &'a mut Network,
    config: &'a TrainingConfig,
    run: TrainRun,
    history: History,
    best: Option<(f64, usize, Vec<Tensor>)>,
    /// The last weights known to be finite, put back after a divergence.
    good: GoodWeights,
    /// Read each step's loss before its update: always on the CPU, where a read costs
    /// nothing; on a GPU only for `SkipStep`, which must know before updating; always in
    /// data-parallel training, where the ranks' losses travel with the gradients.
    check_each_step: bool,
    /// This rank's part in data-parallel training.
    dp: Option<ParallelRun>,
    /// Progress output (on rank 0 only).
    verbose: bool,
}

impl<'a> Trainer<'a> {
    /// `samples`: training and validation rows (ranks of a data-parallel group check that
    /// they agree).
    fn new(net: &'a mut Network, config: &'a TrainingConfig, samples: [usize; 2]) -> Result<Self> {
        let dp = config.distributed.as_ref().map(|d| ParallelRun::start(d, net, config, samples)).transpose()?;
        let run = TrainRun::resume_or_start(net.take_run(), net, config)?;
        let good = GoodWeights::take(&net.state(), None)?;
        let check_each_step =
            net.device().is_cpu() || config.on_non_finite == NonFinitePolicy::SkipStep || dp.is_some();
        let verbose = config.verbose && dp.as_ref().is_none_or(|d| d.is_main());
        let history = History::default();
        Ok(Trainer { net, config, run, history, best: None, good, check_each_step, dp, verbose })
    }

    /// Runs the epochs; keeps the run for the next call unless a NaN or infinite value ended
    /// it, in which case the last finite weights are put back and the run is dropped.
    fn run(mut self, x: &Tensor, t: &Targets, val: Option<&(Tensor, Targets)>) -> Result<History> {
        match self.epochs(x, t, val) {
            Ok(()) => {
                let history = self.finish();
                self.net.set_run(self.run);
                history
            }
            Err(Halt::Failed(e)) => {
                self.net.set_run(self.run);
                Err(e)
            }
            Err(Halt::NonFinite(what)) => {
                self.good.restore(&self.net.state())?;
                Err(guard::diverged(&what, &self.good))
            }
        }
    }

    fn epochs(&mut self, x: &Tensor, t: &Targets, val: Option<&(Tensor, Targets)>) -> std::result::Result<(), Halt> {
        for epoch in 0..self.config.max_epochs {
            let rank = self.dp.as_ref().map_or(0, |d| d.rank());
            rnn_core::manual_seed(rank_seed(epoch_seed(self.config.seed, self.run.epochs_done), rank));
            let started = Instant::now();
            let lr = self.run.optimizer.learning_rate();
            let (train, skipped, mut progress) = self.epoch(epoch, x, t)?;
            self.good = GoodWeights::take(&self.net.state(), Some(epoch + 1))?;
            self.run.epochs_done += 1;
            let train_seconds = started.elapsed().as_secs_f64();
            if let Some(dp) = &self.dp {
                self.history.comm_wait_seconds.push(dp.take_comm_wait());
            }
            let val_eval = val.map(|(vx, vt)| self.validate(vx, vt)).transpose()?;
            let seconds = started.elapsed().as_secs_f64();
            let samples_per_sec = x.dims()[0] as f64 / train_seconds.max(1e-9);
            self.record(train, val_eval, seconds, samples_per_sec, lr);
            progress.finish(&EpochSummary {
                train_loss: train.loss,
                train_acc: train.accuracy,
                val_loss: val_eval.map(|v| v.loss),
                val_acc: val_eval.and_then(|v| v.accuracy),
                seconds,
                samples_per_sec,
                lr: Some(lr),
                skipped_steps: skipped,
            });
            let monitored = self.monitored(train, val_eval);
            if let Some(s) = self.run.scheduler.as_mut() {
                s.step(self.run.optimizer.as_mut(), Some(monitored))?;
            }
            if self.should_stop(epoch, monitored)? {
                break;
            }
        }
        Ok(())
    }

    /// One pass over the training data; the progress display stays open for the summary.
    /// Returns the epoch's loss and accuracy and the number of steps skipped.
    fn epoch(
        &mut self,
        epoch: usize,
        x: &Tensor,
        t: &Targets,
    ) -> std::result::Result<(Evaluation, usize, Progress), Halt> {
        let (n, bs) = (x.dims()[0], self.config.batch_size);
        let batches = match &self.dp {
            Some(dp) => dp.batches(n, self.config, self.run.epochs_done)?,
            None => Batches::epoch(n, bs, self.config.shuffle, self.config.seed, self.run.epochs_done)?,
        };
        let total = batches.num_batches();
        let mode = ProgressMode::auto(self.verbose);
        let mut progress = Progress::new(mode, epoch + 1, self.config.max_epochs, total, batches.num_samples());
        let report_every = (total / 50).max(1);
        self.net.model.set_training(true);
        let (mut totals, mut skipped, mut unread) = (Totals::new(), 0, 1);
        // No host sync inside a step (except for the loss checks of `check_each_step`): the
        // batch ids are in range by construction (`Batches` draws them from 0..n on the
        // host), the losses check class ids on the device, and the sums stay on the device
        // until a progress update (or, silent, the epoch's end) reads them.
        for (b, ids) in batches.enumerate() {
            let rows = ids.len();
            let device = self.net.device();
            let ids = Tensor::from_vec(ids, rows, device)?;
            // A data-parallel step waits for the other ranks: when they are threads of this
            // process, they may need the pool's workers, so the step stays on this thread.
            let thread_ranks = self.dp.as_ref().is_some_and(|d| d.shares_process());
            let mut step = || self.step(&x.index_select(&ids, 0)?, &t.rows(&ids)?, &mut totals);
            let outcome = if thread_ranks { step() } else { crate::step_thread(device, step) };
            if let Some(value) = outcome? {
                if self.config.on_non_finite == NonFinitePolicy::Stop {
                    let at = guard::steps(b + 1, b + 1, total);
                    return Err(Halt::NonFinite(format!("the loss is {value} at epoch {}, {at}", epoch + 1)));
                }
                skipped += 1;
            }
            if mode != ProgressMode::Silent && (b % report_every == 0 || b + 1 == total) {
                let so_far = totals.read()?;
                if totals.samples > 0 {
                    self.check_loss(so_far.loss, epoch, unread, b + 1, total)?;
                    unread = b + 2;
                }
                progress.update(b, totals.samples, so_far.loss, so_far.accuracy);
            }
        }
        self.net.model.set_training(false);
        if let Some(dp) = &self.dp {
            dp.sync_buffers(self.net)?;
        }
        if skipped == total {
            let msg = format!("every one of the {total} steps of epoch {} had a NaN or infinite loss", epoch + 1);
            return Err(Halt::NonFinite(msg));
        }
        // The epoch's last read-back also checks the weights (an update can overflow them
        // even from a finite loss).
        let state = self.net.state();
        let (mut train, probe) = totals.read_with(guard::non_finite_probe(&state)?.as_ref())?;
        if let Some(dp) = &self.dp {
            train = dp.combine(totals.sums(train))?;
        }
        self.check_loss(train.loss, epoch, unread, total, total)?;
        if probe.is_some_and(|p| !p.is_finite()) {
            let name = guard::first_non_finite(&state)?.unwrap_or_else(|| "a weight".into());
            return Err(Halt::NonFinite(format!("{name} became NaN or infinite in epoch {}", epoch + 1)));
        }
        Ok((train, skipped, progress))
    }

    /// A non-finite running loss read back after steps `first..=last` (from 1) of `epoch`.
    fn check_loss(
        &self,
        loss: f64,
        epoch: usize,
        first: usize,
        last: usize,
        total: usize,
    ) -> std::result::Result<(), Halt> {
        if loss.is_finite() || first > last {
            return Ok(());
        }
        let mut what = format!("the loss is {loss} at epoch {}, {}", epoch + 1, guard::steps(first, last, total));
        if !self.check_each_step {
            what += &format!(" (on {} the loss is read back only at progress updates)", self.net.device());
        }
        Err(Halt::NonFinite(what))
    }

    /// One training step. A NaN or infinite loss found by `check_each_step` is returned,
    /// and the step makes no update.
    fn step(&mut self, xb: &Tensor, tb: &Targets, totals: &mut Totals) -> Result<Option<f64>> {
        let kind = self.net.loss_function();
        let folded = self.net.folds_last_activation();
        let (out, batch_loss) = self.run.precision.forward(|| {
            let out = self.net.logits(xb)?;
            let batch_loss = loss(kind, &out, tb, folded)?;
            Ok((out, batch_loss))
        })?;
        if self.check_each_step && self.dp.is_none() {
            let value = batch_loss.to_f64_scalar()?;
            if !value.is_finite() {
                return Ok(Some(value));
            }
        }
        let hits = no_grad(|| correct(kind, &out, tb, folded))?;
        let mut grads = match &self.dp {
            None => self.run.precision.scaled(&batch_loss)?.backward()?,
            Some(dp) => {
                // Every rank gets the same mean loss, so all skip (or stop at) the same steps.
                let (grads, mean_loss) = dp.backward(&self.run.precision.scaled(&batch_loss)?)?;
                if !mean_loss.is_finite() {
                    return Ok(Some(mean_loss));
                }
                grads
            }
        };
        let params: Vec<Tensor> = self.net.named_parameters().into_iter().map(|(_, t)| t).collect();
        // With f16 loss scaling the gradients are unscaled first, so clipping sees true norms.
        self.run.precision.unscale(&mut grads, &params)?;
        if let Some(max_norm) = self.config.clip_grad_norm {
            clip_grad_norm_on_device(&mut grads, &params, max_norm)?;
        }
        self.run.precision.step(self.run.optimizer.as_mut(), &mut grads, &params)?;
        totals.add(&batch_loss, hits, xb.dims()[0])?;
        Ok(None)
    }

    /// Loss and accuracy on the validation set; in data-parallel training each rank
    /// evaluates its slice and the sums are added up over the ranks.
    fn validate(&self, x: &Tensor, t: &Targets) -> Result<Evaluation> {
        let Some(dp) = &self.dp else { return self.net.evaluate_prepared(x, t) };
        let (start, len) = dp.slice(x.dims()[0]);
        let sums = match len {
            0 => [0.0; 4],
            _ => {
                let totals = self.net.evaluate_totals(&x.narrow(0, start, len)?, &t.narrow(start, len)?)?;
                totals.sums(totals.read()?)
            }
        };
        dp.combine(sums)
    }

    fn record(&mut self, train: Evaluation, val: Option<Evaluation>, seconds: f64, samples_per_sec: f64, lr: f64) {
        let h = &mut self.history;
        h.train_loss.push(train.loss);
        h.epoch_times.push(seconds);
        h.samples_per_sec.push(samples_per_sec);
        h.learning_rates.push(lr);
        if let Some(acc) = train.accuracy {
            h.train_metrics.entry("accuracy".into()).or_default().push(acc);
        }
        if let Some(v) = val {
            h.val_loss.push(v.loss);
            if let Some(acc) = v.accuracy {
                h.val_metrics.entry("accuracy".into()).or_default().push(acc);
            }
        }
    }

    /// The value early stopping and plateau schedules watch, as "lower is better".
    fn monitored(&self, train: Evaluation, val: Option<Evaluation>) -> f64 {
        let e = val.unwrap_or(train);
        let monitor = self.config.early_stopping.map(|s| s.monitor).unwrap_or(Monitor::ValLoss);
        match (monitor, e.accuracy) {
            (Monitor::ValAccuracy, Some(acc)) => -acc,
            _ => e.loss,
        }
    }

    /// Tracks the best epoch (snapshotting its weights) and says when patience has run out.
    fn should_stop(&mut self, epoch: usize, value: f64) -> Result<bool> {
        let Some(rule) = self.config.early_stopping else { return Ok(false) };
        let improved = match &self.best {
            None => true,
            Some((best, _, _)) => value < best - rule.min_delta,
        };
        if improved {
            let snapshot = match rule.restore_best_weights {
                true => self.net.state().iter().map(|(_, t)| t.deep_copy()).collect::<Result<Vec<_>>>()?,
                false => Vec::new(),
            };
            self.best = Some((value, epoch, snapshot));
        }
        let best_epoch = self.best.as_ref().map_or(epoch, |b| b.1);
        Ok(epoch - best_epoch >= rule.patience)
    }

    fn finish(&mut self) -> Result<History> {
        let last = self.history.epochs().saturating_sub(1);
        self.history.best_epoch = Some(last);
        if let (Some(rule), Some((_, best_epoch, snapshot))) = (self.config.early_stopping, self.best.take()) {
            if rule.restore_best_weights && best_epoch != last {
                no_grad(|| -> Result<()> {
                    for ((_, t), saved) in self.net.state().iter().zip(&snapshot) {
                        t.assign(saved)?;
                    }
                    Ok(())
                })?;
                if self.verbose {
                    eprintln!("early stopping: restored the weights of epoch {}", best_epoch + 1);
                }
                self.history.best_epoch = Some(best_epoch);
            }
        }
        Ok(std::mem::take(&mut self.history))
    }
}
