//! `Network::train` and `Network::evaluate`: the training loop.

use std::time::Instant;

use rnn_core::{no_grad, Result, Tensor};
use rnn_nn::optim::{clip_grad_norm_on_device, LrScheduler, Optimizer};

use crate::config::{Monitor, TrainingConfig};
use crate::data::Batches;
use crate::history::History;
use crate::inputs::IntoTensor;
use crate::network::Network;
use crate::objective::{correct, loss, Targets};
use crate::progress::{EpochSummary, Progress, ProgressMode};

/// Loss and accuracy over a data set.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Evaluation {
    pub loss: f64,
    /// Fraction correct in 0..=1, for classification losses.
    pub accuracy: Option<f64>,
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
        let (loss, correct) = match (&self.loss, &self.correct) {
            (Some(l), Some(c)) if l.dtype() == c.dtype() => {
                let both = Tensor::stack(&[l.clone(), c.to_dtype(l.dtype())?], 0)?.to_f64_vec()?;
                (Some(both[0]), Some(both[1]))
            }
            (l, c) => {
                (l.as_ref().map(Tensor::to_f64_scalar).transpose()?, c.as_ref().map(Tensor::to_f64_scalar).transpose()?)
            }
        };
        Ok(Evaluation {
            loss: loss.map_or(f64::NAN, |l| l / self.samples.max(1) as f64),
            accuracy: correct.map(|c| c / self.predictions.max(1) as f64),
        })
    }
}

impl Network {
    /// Trains on `x` (`[n, ..input_shape]`) and `y` (class ids `[n]`, one-hot `[n, classes]`,
    /// or targets shaped like the outputs) as `config` says, and returns the history. The
    /// network ends on the training device, in evaluation mode.
    pub fn train(&mut self, x: &impl IntoTensor, y: &impl IntoTensor, config: &TrainingConfig) -> Result<History> {
        config.validate()?;
        let device = config.pick_device()?;
        let x = x.to_tensor()?;
        self.to_device(device)?;
        let x = self.check_inputs(&x)?;
        let n = x.dims()[0];
        let targets = Targets::prepare(&y.to_tensor()?, self.loss_function(), self.output_shape(), n)?;
        let targets = targets.to_device(device)?;
        let n_val = (n as f64 * config.validation_split).floor() as usize;
        let n_train = n - n_val;
        if n_train == 0 {
            let msg = format!("validation_split {} leaves no training samples of {n}", config.validation_split);
            return Err(rnn_core::Error::invalid("Network::train", msg));
        }
        let (x_train, t_train) = (x.narrow(0, 0, n_train)?, targets.narrow(0, n_train)?);
        let val = match n_val {
            0 => None,
            _ => Some((x.narrow(0, n_train, n_val)?, targets.narrow(n_train, n_val)?)),
        };
        if config.verbose {
            eprintln!(
                "training on {device}: {n_train} samples, {n_val} for validation, {} parameters",
                self.num_parameters()
            );
        }
        rnn_core::manual_seed(config.seed);
        let result = Trainer::new(self, config)?.run(&x_train, &t_train, val.as_ref());
        self.model.set_training(false);
        result
    }

    /// Loss and accuracy on `x`, `y` (evaluation mode, no gradients).
    pub fn evaluate(&self, x: &impl IntoTensor, y: &impl IntoTensor) -> Result<Evaluation> {
        let x = self.check_inputs(&x.to_tensor()?)?;
        let n = x.dims()[0];
        let targets = Targets::prepare(&y.to_tensor()?, self.loss_function(), self.output_shape(), n)?;
        self.evaluate_prepared(&x, &targets.to_device(self.device)?)
    }

    fn evaluate_prepared(&self, x: &Tensor, targets: &Targets) -> Result<Evaluation> {
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
        totals.read()
    }
}

/// State of one `train` call.
struct Trainer<'a> {
    net: &'a mut Network,
    config: &'a TrainingConfig,
    optimizer: Box<dyn Optimizer>,
    scheduler: Option<Box<dyn LrScheduler>>,
    history: History,
    best: Option<(f64, usize, Vec<Tensor>)>,
}

impl<'a> Trainer<'a> {
    fn new(net: &'a mut Network, config: &'a TrainingConfig) -> Result<Self> {
        let params: Vec<Tensor> = net.named_parameters().into_iter().map(|(_, t)| t).collect();
        let optimizer = config.optimizer.clone().with_learning_rate(config.learning_rate).build(params)?;
        let mut optimizer = optimizer;
        let scheduler = config.lr_schedule.as_ref().map(|s| s.build(config.learning_rate)).transpose()?;
        if let Some(s) = &scheduler {
            s.apply(optimizer.as_mut());
        }
        Ok(Trainer { net, config, optimizer, scheduler, history: History::default(), best: None })
    }

    fn run(mut self, x: &Tensor, t: &Targets, val: Option<&(Tensor, Targets)>) -> Result<History> {
        for epoch in 0..self.config.max_epochs {
            let started = Instant::now();
            let lr = self.optimizer.learning_rate();
            let (train, mut progress) = self.epoch(epoch, x, t)?;
            let train_seconds = started.elapsed().as_secs_f64();
            let val_eval = val.map(|(vx, vt)| self.net.evaluate_prepared(vx, vt)).transpose()?;
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
            });
            let monitored = self.monitored(train, val_eval);
            if let Some(s) = self.scheduler.as_mut() {
                s.step(self.optimizer.as_mut(), Some(monitored))?;
            }
            if self.should_stop(epoch, monitored)? {
                break;
            }
        }
        self.finish()
    }

    /// One pass over the training data; the progress display stays open for the summary.
    fn epoch(&mut self, epoch: usize, x: &Tensor, t: &Targets) -> Result<(Evaluation, Progress)> {
        let (n, bs) = (x.dims()[0], self.config.batch_size);
        let batches = Batches::epoch(n, bs, self.config.shuffle, self.config.seed, epoch as u64)?;
        let total_batches = n.div_ceil(bs);
        let mode = ProgressMode::auto(self.config.verbose);
        let mut progress = Progress::new(mode, epoch + 1, self.config.max_epochs, total_batches, n);
        let report_every = (total_batches / 50).max(1);
        self.net.model.set_training(true);
        let mut totals = Totals::new();
        // No host sync inside a step: the batch ids are in range by construction (`Batches`
        // draws them from 0..n on the host), the losses check class ids on the device, and
        // the sums stay on the device until a progress update (or, silent, the epoch's end)
        // reads them.
        for (b, ids) in batches.enumerate() {
            let rows = ids.len();
            let ids = Tensor::from_vec(ids, rows, self.net.device())?;
            self.step(&x.index_select(&ids, 0)?, &t.rows(&ids)?, &mut totals)?;
            if mode != ProgressMode::Silent && (b % report_every == 0 || b + 1 == total_batches) {
                let so_far = totals.read()?;
                progress.update(b, totals.samples, so_far.loss, so_far.accuracy);
            }
        }
        self.net.model.set_training(false);
        Ok((totals.read()?, progress))
    }

    fn step(&mut self, xb: &Tensor, tb: &Targets, totals: &mut Totals) -> Result<()> {
        let kind = self.net.loss_function();
        let folded = self.net.folds_last_activation();
        let out = self.net.logits(xb)?;
        let batch_loss = loss(kind, &out, tb, folded)?;
        let hits = no_grad(|| correct(kind, &out, tb, folded))?;
        let mut grads = batch_loss.backward()?;
        if let Some(max_norm) = self.config.clip_grad_norm {
            let params: Vec<Tensor> = self.net.named_parameters().into_iter().map(|(_, t)| t).collect();
            clip_grad_norm_on_device(&mut grads, &params, max_norm)?;
        }
        self.optimizer.step(&grads)?;
        totals.add(&batch_loss, hits, xb.dims()[0])
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

    fn finish(mut self) -> Result<History> {
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
                if self.config.verbose {
                    eprintln!("early stopping: restored the weights of epoch {}", best_epoch + 1);
                }
                self.history.best_epoch = Some(best_epoch);
            }
        }
        Ok(self.history)
    }
}
