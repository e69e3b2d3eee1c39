//! `rnn.TrainingConfig` and what `Network.train` / `evaluate` return (`History`,
//! `Evaluation`), mirroring rnn-train's types. Defaults come from
//! `rnn_train::TrainingConfig::default()` (Adam at 1e-3, batches of 32, 10 epochs, shuffling,
//! progress output, the best device).

use std::collections::HashMap;

use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::PyDict;
use rnn_core::Device;
use rnn_nn::optim::{LrSchedule, OptimizerConfig};
use rnn_train::{EarlyStopping, Evaluation, History, MixedPrecision, Monitor, NonFinitePolicy, TrainingConfig};

/// A learning-rate schedule for ``TrainingConfig.lr_schedule``, stepped once per epoch:
/// ``LrSchedule.step(step_size, gamma)``, ``.exponential(gamma)``, ``.cosine(t_max,
/// eta_min)``, ``.warmup(epochs, then)``, ``.plateau()``.
#[pyclass(name = "LrSchedule", module = "rnn", frozen)]
#[derive(Clone)]
pub struct PyLrSchedule(pub LrSchedule);

#[pymethods]
impl PyLrSchedule {
    #[staticmethod]
    fn step(step_size: usize, gamma: f64) -> Self {
        PyLrSchedule(LrSchedule::step(step_size, gamma))
    }
    #[staticmethod]
    fn exponential(gamma: f64) -> Self {
        PyLrSchedule(LrSchedule::Exponential { gamma })
    }
    #[staticmethod]
    #[pyo3(signature = (t_max, eta_min = 0.0))]
    fn cosine(t_max: usize, eta_min: f64) -> Self {
        PyLrSchedule(LrSchedule::cosine(t_max, eta_min))
    }
    /// A linear ramp from ``base / epochs`` over ``epochs`` epochs, then ``then``.
    #[staticmethod]
    #[pyo3(signature = (epochs, then = None))]
    fn warmup(epochs: usize, then: Option<PyLrSchedule>) -> Self {
        PyLrSchedule(LrSchedule::warmup(epochs, then.map_or(LrSchedule::Constant, |t| t.0)))
    }
    /// Reduce-on-plateau of the validation loss, with PyTorch's defaults.
    #[staticmethod]
    fn plateau() -> Self {
        PyLrSchedule(LrSchedule::plateau())
    }
    fn __repr__(&self) -> String {
        format!("{:?}", self.0)
    }
}

/// Stop when the monitored value (``"val_loss"`` or ``"val_accuracy"``) has not improved by
/// ``min_delta`` for ``patience`` epochs; optionally put back the best epoch's weights.
#[pyclass(name = "EarlyStopping", module = "rnn", frozen)]
#[derive(Clone)]
pub struct PyEarlyStopping(pub EarlyStopping);

#[pymethods]
impl PyEarlyStopping {
    #[new]
    #[pyo3(signature = (monitor = "val_loss", patience = 5, min_delta = 0.0, restore_best_weights = true))]
    fn new(monitor: &str, patience: usize, min_delta: f64, restore_best_weights: bool) -> PyResult<Self> {
        let monitor = match monitor {
            "val_loss" => Monitor::ValLoss,
            "val_accuracy" => Monitor::ValAccuracy,
            other => {
                return Err(PyValueError::new_err(format!(
                    "monitor must be 'val_loss' or 'val_accuracy', got '{other}'"
                )))
            }
        };
        Ok(PyEarlyStopping(EarlyStopping { monitor, patience, min_delta, restore_best_weights }))
    }
    fn __repr__(&self) -> String {
        format!("{:?}", self.0)
    }
}

/// How ``Network.train`` trains. Every field is a keyword of the constructor and an
/// attribute: ``batch_size``, ``max_epochs``, ``learning_rate``, ``optimizer`` (``"adam"``,
/// ``"adamw"``, ``"sgd"``, ``"rmsprop"``, ``"adagrad"``), ``momentum`` (SGD),
/// ``validation_split``, ``shuffle``, ``seed``, ``verbose`` (progress output on stderr),
/// ``use_gpu``, ``prefer_gpu``, ``device`` (a name such as ``"cpu"``; None: chosen by
/// ``use_gpu`` / ``prefer_gpu``), ``early_stopping``, ``lr_schedule``, ``clip_grad_norm``,
/// ``on_non_finite`` (``"stop"`` or ``"skip_step"``), ``mixed_precision`` (None for f32,
/// ``"bf16"`` or ``"f16"``: autocast with f32 master weights, f16 with loss scaling).
#[pyclass(name = "TrainingConfig", module = "rnn", get_all, set_all)]
#[derive(Clone)]
pub struct PyTrainingConfig {
    pub batch_size: usize,
    pub max_epochs: usize,
    pub learning_rate: f64,
    pub optimizer: String,
    pub momentum: f64,
    pub validation_split: f64,
    pub shuffle: bool,
    pub seed: u64,
    pub verbose: bool,
    pub use_gpu: bool,
    pub prefer_gpu: bool,
    pub device: Option<String>,
    pub early_stopping: Option<PyEarlyStopping>,
    pub lr_schedule: Option<PyLrSchedule>,
    pub clip_grad_norm: Option<f64>,
    pub on_non_finite: String,
    pub mixed_precision: Option<String>,
}

impl Default for PyTrainingConfig {
    fn default() -> Self {
        let d = TrainingConfig::default();
        PyTrainingConfig {
            batch_size: d.batch_size,
            max_epochs: d.max_epochs,
            learning_rate: d.learning_rate,
            optimizer: "adam".into(),
            momentum: 0.0,
            validation_split: d.validation_split,
            shuffle: d.shuffle,
            seed: d.seed,
            verbose: d.verbose,
            use_gpu: d.use_gpu,
            prefer_gpu: d.prefer_gpu,
            device: None,
            early_stopping: None,
            lr_schedule: None,
            clip_grad_norm: None,
            on_non_finite: "stop".into(),
            mixed_precision: None,
        }
    }
}

impl PyTrainingConfig {
    /// The rnn-train config (a ValueError for an unknown optimizer, device or policy name).
    pub fn to_rust(&self) -> PyResult<TrainingConfig> {
        let lr = self.learning_rate;
        let optimizer = match self.optimizer.to_ascii_lowercase().as_str() {
            "adam" => OptimizerConfig::adam(lr),
            "adamw" => OptimizerConfig::adamw(lr),
            "sgd" => OptimizerConfig::sgd_momentum(lr, self.momentum),
            "rmsprop" => OptimizerConfig::rmsprop(lr),
            "adagrad" => OptimizerConfig::adagrad(lr),
            other => return Err(PyValueError::new_err(format!("unknown optimizer '{other}'"))),
        };
        let on_non_finite = match self.on_non_finite.as_str() {
            "stop" => NonFinitePolicy::Stop,
            "skip_step" => NonFinitePolicy::SkipStep,
            other => {
                return Err(PyValueError::new_err(format!(
                    "on_non_finite must be 'stop' or 'skip_step', got '{other}'"
                )))
            }
        };
        let device = self.device.as_deref().map(Device::parse).transpose();
        let precision = self.mixed_precision.as_deref().map(MixedPrecision::parse).transpose().map(Option::flatten);
        Ok(TrainingConfig {
            batch_size: self.batch_size,
            max_epochs: self.max_epochs,
            learning_rate: lr,
            optimizer,
            validation_split: self.validation_split,
            shuffle: self.shuffle,
            seed: self.seed,
            verbose: self.verbose,
            use_gpu: self.use_gpu,
            prefer_gpu: self.prefer_gpu,
            device: crate::errors::PyErrExt::py_err(device)?,
            early_stopping: self.early_stopping.as_ref().map(|e| e.0),
            lr_schedule: self.lr_schedule.as_ref().map(|s| s.0.clone()),
            clip_grad_norm: self.clip_grad_norm,
            on_non_finite,
            // Data-parallel training is driven from Rust (a ProcessGroup per rank); the
            // Python API trains in one process.
            distributed: None,
            mixed_precision: crate::errors::PyErrExt::py_err(precision)?,
        })
    }

    /// A copy with the given keyword overrides (a TypeError names an unknown one).
    pub fn with_overrides(
        py: Python<'_>,
        base: PyTrainingConfig,
        kwargs: Option<&Bound<'_, PyDict>>,
    ) -> PyResult<Self> {
        let config = Bound::new(py, base)?;
        for (key, value) in kwargs.into_iter().flatten() {
            let name: String = key.extract()?;
            if config.getattr(name.as_str()).is_err() {
                return Err(PyTypeError::new_err(format!("unknown training option '{name}'")));
            }
            config.setattr(name.as_str(), value)?;
        }
        let config = config.borrow().clone();
        Ok(config)
    }
}

#[pymethods]
impl PyTrainingConfig {
    #[new]
    #[pyo3(signature = (**kwargs))]
    fn new(py: Python<'_>, kwargs: Option<&Bound<'_, PyDict>>) -> PyResult<Self> {
        PyTrainingConfig::with_overrides(py, PyTrainingConfig::default(), kwargs)
    }

    fn __repr__(&self) -> String {
        format!(
            "TrainingConfig(batch_size={}, max_epochs={}, learning_rate={}, optimizer='{}', validation_split={})",
            self.batch_size, self.max_epochs, self.learning_rate, self.optimizer, self.validation_split
        )
    }
}

/// Per-epoch records of one ``Network.train`` call; ``val_*`` are empty without a
/// validation split. Metrics are keyed by name (classification records ``"accuracy"``).
#[pyclass(name = "History", module = "rnn", frozen, get_all)]
pub struct PyHistory {
    pub train_loss: Vec<f64>,
    pub val_loss: Vec<f64>,
    pub train_metrics: HashMap<String, Vec<f64>>,
    pub val_metrics: HashMap<String, Vec<f64>>,
    pub epoch_times: Vec<f64>,
    pub samples_per_sec: Vec<f64>,
    pub learning_rates: Vec<f64>,
    /// Data-parallel runs: seconds per epoch spent waiting for the averaged gradients.
    pub comm_wait_seconds: Vec<f64>,
    pub best_epoch: Option<usize>,
}

impl From<History> for PyHistory {
    fn from(h: History) -> Self {
        PyHistory {
            train_loss: h.train_loss,
            val_loss: h.val_loss,
            train_metrics: h.train_metrics,
            val_metrics: h.val_metrics,
            epoch_times: h.epoch_times,
            samples_per_sec: h.samples_per_sec,
            learning_rates: h.learning_rates,
            comm_wait_seconds: h.comm_wait_seconds,
            best_epoch: h.best_epoch,
        }
    }
}

#[pymethods]
impl PyHistory {
    /// The number of epochs trained.
    fn epochs(&self) -> usize {
        self.train_loss.len()
    }
    fn __repr__(&self) -> String {
        format!(
            "History(epochs={}, train_loss={:?}, val_loss={:?})",
            self.train_loss.len(),
            self.train_loss,
            self.val_loss
        )
    }
}

/// Loss and accuracy (a fraction, None for regression losses) over a data set.
#[pyclass(name = "Evaluation", module = "rnn", frozen, get_all)]
pub struct PyEvaluation {
    pub loss: f64,
    pub accuracy: Option<f64>,
}

impl From<Evaluation> for PyEvaluation {
    fn from(e: Evaluation) -> Self {
        PyEvaluation { loss: e.loss, accuracy: e.accuracy }
    }
}

#[pymethods]
impl PyEvaluation {
    fn __repr__(&self) -> String {
        format!("Evaluation(loss={}, accuracy={:?})", self.loss, self.accuracy)
    }
}

pub fn register(_py: Python<'_>, m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PyLrSchedule>()?;
    m.add_class::<PyEarlyStopping>()?;
    m.add_class::<PyTrainingConfig>()?;
    m.add_class::<PyHistory>()?;
    m.add_class::<PyEvaluation>()
}
