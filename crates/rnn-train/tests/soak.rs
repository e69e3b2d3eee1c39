//! Soak test: rounds of train, save, load, predict and evaluate on small networks with
//! random valid and invalid inputs (wrong shapes and feature counts, empty batches, bad
//! labels, NaN data, bad configs, bad paths, corrupt checkpoint bytes, ...). No round may
//! panic; every invalid input must be an error that leaves the network and any existing
//! checkpoint as they were; every valid one must succeed with finite results; and resident
//! memory at the end must be within 5% of its value after a quarter of the run, once the
//! allocator has warmed up (Linux only).
//!
//! `RNN_SOAK_SECONDS` (default 100) bounds the run; the seed is printed, and
//! `RNN_SOAK_SEED=<seed>` replays a run (round by round: each round's choices depend only
//! on the seed and the round's number).

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use rnn_core::{DType, Device, Tensor};
use rnn_nn::optim::OptimizerConfig;
use rnn_train::ActivationFunction::{ReLU, Sigmoid, Softmax, Tanh};
use rnn_train::{LayerBuilder, LossFunction, Network, NonFinitePolicy, TrainingConfig};

/// A failed expectation of a round: what was done and what went wrong.
type Check = std::result::Result<(), String>;

/// Turns a library error into a failed check, naming the step that failed.
trait Context<T> {
    fn ctx(self, what: &str) -> std::result::Result<T, String>;
}

impl<T> Context<T> for rnn_core::Result<T> {
    fn ctx(self, what: &str) -> std::result::Result<T, String> {
        self.map_err(|e| format!("{what}: unexpected error: {e}"))
    }
}

macro_rules! ensure {
    ($cond:expr, $($msg:tt)+) => {
        if !$cond {
            return Err(format!($($msg)+));
        }
    };
}

const MAX_SAMPLES: usize = 48;
const ROUND_ACTIONS: usize = 8;

/// The labels an architecture trains on.
#[derive(Clone, Copy)]
enum Labels {
    Classes(usize),
    Regression,
    Binary,
}

/// A small architecture: its sample shape, builder and labels.
struct Arch {
    name: &'static str,
    input: &'static [usize],
    build: fn() -> rnn_core::Result<Network>,
    labels: Labels,
}

const ARCHS: [Arch; 4] = [
    Arch { name: "mlp", input: &[8], build: mlp, labels: Labels::Classes(3) },
    Arch { name: "regression", input: &[8], build: regression, labels: Labels::Regression },
    Arch { name: "cnn", input: &[1, 6, 6], build: cnn, labels: Labels::Classes(3) },
    Arch { name: "lstm", input: &[4, 3], build: lstm, labels: Labels::Binary },
];

fn mlp() -> rnn_core::Result<Network> {
    Network::with_input_size(8)?
        .add_layer(LayerBuilder::dense(16).activation(ReLU))
        .add_layer(LayerBuilder::dense(3).activation(Softmax))
        .build()
}

fn regression() -> rnn_core::Result<Network> {
    Network::with_input_size(8)?
        .add_layer(LayerBuilder::dense(6).activation(Tanh))
        .add_layer(LayerBuilder::dropout(0.2))
        .add_layer(LayerBuilder::dense(1))
        .loss(LossFunction::MeanSquaredError)
        .build()
}

fn cnn() -> rnn_core::Result<Network> {
    Network::with_input_shape(&[1, 6, 6])?
        .add_layer(LayerBuilder::conv2d(2, 3).padding(1).activation(ReLU))
        .add_layer(LayerBuilder::max_pool2d(2))
        .add_layer(LayerBuilder::flatten())
        .add_layer(LayerBuilder::dense(3).activation(Softmax))
        .build()
}

fn lstm() -> rnn_core::Result<Network> {
    Network::with_input_shape(&[4, 3])?
        .add_layer(LayerBuilder::lstm(5))
        .add_layer(LayerBuilder::dense(1).activation(Sigmoid))
        .loss(LossFunction::BinaryCrossEntropy)
        .build()
}

/// One round's network, data and scratch folder.
struct Round<'a> {
    arch: &'a Arch,
    net: Network,
    x: Tensor,
    y: Tensor,
    dir: &'a Path,
    rng: StdRng,
}

impl Round<'_> {
    fn n(&self) -> usize {
        self.x.dims()[0]
    }

    fn weights(&self) -> std::result::Result<Vec<Vec<f32>>, String> {
        self.net.state().iter().map(|(_, t)| t.to_vec::<f32>().ctx("reading the weights")).collect()
    }

    fn path(&mut self, name: &str) -> PathBuf {
        self.dir.join(format!("{}-{name}-{}.safetensors", self.arch.name, self.rng.random::<u32>()))
    }
}

fn inputs(rng: &mut StdRng, n: usize, sample: &[usize]) -> rnn_core::Result<Tensor> {
    let per: usize = sample.iter().product();
    let values: Vec<f32> = (0..n * per).map(|_| rng.random_range(-1.0..1.0)).collect();
    let shape: Vec<usize> = std::iter::once(n).chain(sample.iter().copied()).collect();
    Tensor::from_vec(values, shape, Device::Cpu)
}

fn labels(rng: &mut StdRng, n: usize, kind: Labels) -> rnn_core::Result<Tensor> {
    let values: Vec<f32> = match kind {
        Labels::Classes(k) => (0..n).map(|_| rng.random_range(0..k) as f32).collect(),
        Labels::Regression => (0..n).map(|_| rng.random_range(-1.0..1.0)).collect(),
        Labels::Binary => (0..n).map(|_| rng.random_range(0..2) as f32).collect(),
    };
    Tensor::from_vec(values, n, Device::Cpu)
}

fn random_config(rng: &mut StdRng, n: usize) -> TrainingConfig {
    let optimizer = match rng.random_range(0..5) {
        0 => OptimizerConfig::sgd_momentum(0.05, 0.9),
        1 => OptimizerConfig::adam(1e-2),
        2 => OptimizerConfig::adamw(1e-2),
        3 => OptimizerConfig::rmsprop(1e-3),
        _ => OptimizerConfig::adagrad(1e-2),
    };
    let batch_size = [1, 7, 32, n, usize::MAX][rng.random_range(0..5)];
    TrainingConfig {
        batch_size,
        max_epochs: rng.random_range(1..=2),
        learning_rate: optimizer.learning_rate(),
        optimizer,
        validation_split: if n >= 4 && rng.random_bool(0.5) { 0.25 } else { 0.0 },
        shuffle: rng.random_bool(0.5),
        seed: rng.random(),
        clip_grad_norm: rng.random_bool(0.3).then_some(1.0),
        on_non_finite: if rng.random_bool(0.5) { NonFinitePolicy::Stop } else { NonFinitePolicy::SkipStep },
        ..quiet()
    }
}

fn quiet() -> TrainingConfig {
    TrainingConfig { verbose: false, use_gpu: false, max_epochs: 1, ..Default::default() }
}

/// Valid training must succeed with finite weights.
fn train_valid(r: &mut Round) -> Check {
    let n = r.n();
    let config = random_config(&mut r.rng, n);
    let history = r.net.train(&r.x, &r.y, &config).ctx(&format!("train with {config:?}"))?;
    ensure!(history.epochs() >= 1 && history.epochs() <= config.max_epochs, "history {history:?}");
    ensure!(history.train_loss.iter().all(|l| l.is_finite()), "losses {:?}", history.train_loss);
    let bad = r.net.first_non_finite().ctx("checking the weights")?;
    ensure!(bad.is_none(), "train returned Ok with {bad:?} non-finite");
    Ok(())
}

/// An input and labels that `train` must refuse, and what they are.
fn invalid_training_data(r: &mut Round) -> rnn_core::Result<(Tensor, Tensor, &'static str)> {
    let (n, input) = (r.n(), r.arch.input);
    let mut wider = input.to_vec();
    if let Some(last) = wider.last_mut() {
        *last += 1;
    }
    Ok(match r.rng.random_range(0..6) {
        0 => (inputs(&mut r.rng, n, &wider)?, r.y.clone(), "one feature too many"),
        1 => (r.x.flatten_all()?, r.y.clone(), "inputs of the wrong rank"),
        2 => (r.x.narrow(0, 0, 0)?, r.y.narrow(0, 0, 0)?, "an empty batch"),
        3 => (r.x.clone(), labels(&mut r.rng, n + 1, r.arch.labels)?, "one label too many"),
        4 => (r.x.clone(), bad_labels(r)?, "bad labels"),
        _ => (with_nan(&r.x, r.rng.random_range(0..n))?, r.y.clone(), "a NaN input"),
    })
}

fn bad_labels(r: &mut Round) -> rnn_core::Result<Tensor> {
    let n = r.n();
    match r.arch.labels {
        Labels::Classes(k) => {
            let mut values = r.y.to_vec::<f32>()?;
            values[r.rng.random_range(0..n)] = [k as f32, -1.0, 0.5, f32::NAN][r.rng.random_range(0..4)];
            Tensor::from_vec(values, n, Device::Cpu)
        }
        Labels::Regression | Labels::Binary => Tensor::zeros((n, 3), DType::F32, Device::Cpu),
    }
}

fn with_nan(x: &Tensor, sample: usize) -> rnn_core::Result<Tensor> {
    let mut values = x.to_vec::<f32>()?;
    let per = values.len() / x.dims()[0];
    values[sample * per] = f32::NAN;
    Tensor::from_vec(values, x.dims(), Device::Cpu)
}

fn invalid_config(rng: &mut StdRng) -> TrainingConfig {
    match rng.random_range(0..6) {
        0 => TrainingConfig { max_epochs: 0, ..quiet() },
        1 => TrainingConfig { batch_size: 0, ..quiet() },
        2 => TrainingConfig { learning_rate: [0.0, -1.0, f64::NAN, f64::INFINITY][rng.random_range(0..4)], ..quiet() },
        3 => TrainingConfig { validation_split: [1.0, -0.1, f64::NAN][rng.random_range(0..3)], ..quiet() },
        4 => TrainingConfig { clip_grad_norm: Some([0.0, -1.0, f64::NAN][rng.random_range(0..3)]), ..quiet() },
        _ => TrainingConfig { device: Some(Device::Cuda(63)), ..quiet() },
    }
}

/// Invalid data or configs: an error, and the weights are unchanged.
fn train_invalid(r: &mut Round) -> Check {
    let before = r.weights()?;
    let (what, result) = match r.rng.random_bool(0.5) {
        true => {
            let (x, y, what) = invalid_training_data(r).ctx("making invalid data")?;
            // Stop, and no validation split: the NaN sample is trained on.
            (what.to_string(), r.net.train(&x, &y, &quiet()))
        }
        false => {
            let config = invalid_config(&mut r.rng);
            (format!("{config:?}"), r.net.train(&r.x, &r.y, &config))
        }
    };
    ensure!(result.is_err(), "train accepted {what}");
    ensure!(r.weights()? == before, "a refused train ({what}) changed the weights");
    Ok(())
}

/// NaN data with `SkipStep`: either finite weights, or an error that changed nothing.
fn train_skipping_nan(r: &mut Round) -> Check {
    let before = r.weights()?;
    let x = with_nan(&r.x, r.rng.random_range(0..r.n())).ctx("making NaN data")?;
    let config = TrainingConfig { on_non_finite: NonFinitePolicy::SkipStep, batch_size: 8, ..quiet() };
    match r.net.train(&x, &r.y, &config) {
        Ok(_) => {
            let bad = r.net.first_non_finite().ctx("checking the weights")?;
            ensure!(bad.is_none(), "SkipStep returned Ok with {bad:?} non-finite");
        }
        Err(_) => ensure!(r.weights()? == before, "a failed SkipStep run changed the weights"),
    }
    Ok(())
}

fn predict(r: &mut Round) -> Check {
    let rows = r.rng.random_range(1..=r.n());
    let out = r.net.predict(&r.x.narrow(0, 0, rows).ctx("narrow")?).ctx("predict")?;
    ensure!(out.dims()[0] == rows, "predict gave {:?} for {rows} rows", out.dims());
    let values = out.to_vec::<f32>().ctx("reading predictions")?;
    ensure!(values.iter().all(|v| v.is_finite()), "non-finite predictions from finite weights");
    let mut wider = r.arch.input.to_vec();
    wider[0] += 1;
    let bad = [inputs(&mut r.rng, rows, &wider), r.x.narrow(0, 0, 0), r.x.flatten_all()];
    for x in bad {
        let x = x.ctx("making invalid inputs")?;
        let err = r.net.predict(&x).err().ok_or(format!("predict accepted inputs {:?}", x.dims()))?;
        ensure!(err.to_string().starts_with("Network::predict: "), "{err}");
    }
    Ok(())
}

fn evaluate(r: &mut Round) -> Check {
    let eval = r.net.evaluate(&r.x, &r.y).ctx("evaluate")?;
    ensure!(eval.loss.is_finite(), "evaluate gave {eval:?}");
    let (x, y, what) = invalid_training_data(r).ctx("making invalid data")?;
    match r.net.evaluate(&x, &y) {
        // NaN inputs are data to evaluate, not an error (PyTorch returns NaN too).
        Ok(e) => ensure!(what == "a NaN input", "evaluate accepted {what}: {e:?}"),
        Err(e) => ensure!(e.to_string().starts_with("Network::evaluate: "), "{what}: {e}"),
    }
    Ok(())
}

/// Save, load: the loaded network predicts the same; `load_weights` of it works too.
fn save_and_load(r: &mut Round) -> Check {
    let path = r.path("model");
    r.net.save(&path).ctx("save")?;
    let loaded = Network::load(&path).ctx("load")?;
    let (a, b) = (loaded.predict(&r.x).ctx("predict")?, r.net.predict(&r.x).ctx("predict")?);
    ensure!(a.to_vec::<f32>().ctx("read")? == b.to_vec::<f32>().ctx("read")?, "the loaded network differs");
    r.net.load_weights(&path).ctx("load_weights")?;
    std::fs::remove_file(&path).map_err(|e| e.to_string())?;
    Ok(())
}

fn save_to_bad_paths(r: &mut Round) -> Check {
    let missing = r.dir.join("no-such-folder").join("model.safetensors");
    for path in [missing.as_path(), r.dir, Path::new("")] {
        ensure!(r.net.save(path).is_err(), "save to {} succeeded", path.display());
    }
    Ok(())
}

/// Bytes that are not a checkpoint of this network: every load is an error, and
/// `load_weights` leaves the network unchanged.
fn load_bad_files(r: &mut Round) -> Check {
    let good = r.path("good");
    r.net.save(&good).ctx("save")?;
    let bytes = std::fs::read(&good).map_err(|e| e.to_string())?;
    let garbage: Vec<u8> = (0..r.rng.random_range(0..256)).map(|_| r.rng.random()).collect();
    let other = (ARCHS[(ARCHS.iter().position(|a| a.name == r.arch.name).unwrap_or(0) + 1) % ARCHS.len()].build)()
        .ctx("building another network")?;
    let other_path = r.path("other");
    other.save(&other_path).ctx("save")?;
    let cases: [(&str, Vec<u8>); 3] = [
        ("an empty file", Vec::new()),
        ("random bytes", garbage),
        ("a truncated file", bytes[..r.rng.random_range(0..bytes.len())].to_vec()),
    ];
    let before = r.weights()?;
    for (what, contents) in cases {
        let path = r.path("bad");
        std::fs::write(&path, contents).map_err(|e| e.to_string())?;
        ensure!(Network::load(&path).is_err(), "load accepted {what}");
        ensure!(r.net.load_weights(&path).is_err(), "load_weights accepted {what}");
        std::fs::remove_file(&path).ok();
    }
    ensure!(r.net.load_weights(&other_path).is_err(), "load_weights accepted another architecture");
    ensure!(Network::load(r.dir.join("missing.safetensors")).is_err(), "load of a missing file");
    ensure!(r.weights()? == before, "a refused load changed the weights");
    for path in [good, other_path] {
        std::fs::remove_file(path).ok();
    }
    Ok(())
}

/// Random flipped bytes: loading may succeed (a flipped weight is still a weight) or
/// fail, but never panics, and a loaded network predicts without panicking.
fn load_flipped_bytes(r: &mut Round) -> Check {
    let path = r.path("flipped");
    r.net.save(&path).ctx("save")?;
    let mut bytes = std::fs::read(&path).map_err(|e| e.to_string())?;
    for _ in 0..r.rng.random_range(1..=8) {
        let i = r.rng.random_range(0..bytes.len());
        bytes[i] ^= r.rng.random_range(1..=255u8);
    }
    std::fs::write(&path, &bytes).map_err(|e| e.to_string())?;
    if let Ok(net) = Network::load(&path) {
        let _ = net.predict(&r.x);
    }
    std::fs::remove_file(&path).ok();
    Ok(())
}

/// Weights made non-finite are refused by `save`, and the checkpoint there stays intact.
fn save_non_finite(r: &mut Round) -> Check {
    let path = r.path("finite");
    r.net.save(&path).ctx("save")?;
    let saved = std::fs::read(&path).map_err(|e| e.to_string())?;
    let params = r.net.named_parameters();
    let (_, w) = &params[r.rng.random_range(0..params.len())];
    let poison = [f64::NAN, f64::INFINITY][r.rng.random_range(0..2)];
    rnn_core::no_grad(|| w.assign(&w.mul_scalar(poison)?)).ctx("assign")?;
    ensure!(r.net.save(&path).is_err(), "save accepted non-finite weights");
    ensure!(std::fs::read(&path).map_err(|e| e.to_string())? == saved, "a refused save changed the file");
    r.net.load_weights(&path).ctx("load_weights")?;
    std::fs::remove_file(&path).ok();
    Ok(())
}

type Action = fn(&mut Round) -> Check;

const ACTIONS: [(&str, Action); 10] = [
    ("train", train_valid),
    ("train (invalid)", train_invalid),
    ("train (NaN data, SkipStep)", train_skipping_nan),
    ("predict", predict),
    ("evaluate", evaluate),
    ("save and load", save_and_load),
    ("save to bad paths", save_to_bad_paths),
    ("load bad files", load_bad_files),
    ("load flipped bytes", load_flipped_bytes),
    ("save non-finite weights", save_non_finite),
];

/// One round: a random architecture and data, then `ROUND_ACTIONS` random actions; round 0
/// runs every action on every architecture at the largest size, so the memory measured
/// after it has seen every path.
fn round(seed: u64, number: u64, dir: &Path) -> Check {
    let mut rng = StdRng::seed_from_u64(seed ^ number.wrapping_mul(0x9E37_79B9_7F4A_7C15));
    let archs: Vec<&Arch> = match number {
        0 => ARCHS.iter().collect(),
        _ => vec![&ARCHS[rng.random_range(0..ARCHS.len())]],
    };
    for arch in archs {
        let n = if number == 0 { MAX_SAMPLES } else { rng.random_range(1..=MAX_SAMPLES) };
        let x = inputs(&mut rng, n, arch.input).ctx("making inputs")?;
        let y = labels(&mut rng, n, arch.labels).ctx("making labels")?;
        let net = (arch.build)().ctx("build")?;
        let mut r = Round { arch, net, x, y, dir, rng: StdRng::seed_from_u64(rng.random()) };
        let actions: Vec<usize> = match number {
            0 => (0..ACTIONS.len()).chain(0..ACTIONS.len()).collect(),
            _ => (0..ROUND_ACTIONS).map(|_| rng.random_range(0..ACTIONS.len())).collect(),
        };
        for a in actions {
            let (name, action) = ACTIONS[a];
            action(&mut r).map_err(|e| format!("{} ({n} samples), {name}: {e}", arch.name))?;
        }
    }
    Ok(())
}

/// Resident memory of this process in KiB (Linux), None elsewhere.
fn resident_kib() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

fn env_u64(name: &str) -> Option<u64> {
    std::env::var(name).ok().and_then(|v| v.trim().parse().ok())
}

#[test]
fn soak_train_save_load_predict_evaluate() {
    let seed = env_u64("RNN_SOAK_SEED").unwrap_or_else(|| {
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos() as u64)
    });
    let budget = Duration::from_secs(env_u64("RNN_SOAK_SECONDS").unwrap_or(100));
    println!("soak: seed {seed} (RNN_SOAK_SEED={seed} replays it), {budget:?}");
    let dir = std::env::temp_dir().join(format!("rnn-soak-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("a scratch folder");
    let started = Instant::now();
    let (mut rounds, mut baseline) = (0u64, None);
    while rounds < 3 || started.elapsed() < budget {
        let outcome = catch_unwind(AssertUnwindSafe(|| round(seed, rounds, &dir)));
        match outcome {
            Ok(Ok(())) => {}
            Ok(Err(failure)) => panic!("soak seed {seed}, round {rounds}: {failure}"),
            Err(panic) => {
                let msg = panic
                    .downcast_ref::<String>()
                    .cloned()
                    .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()));
                panic!("soak seed {seed}, round {rounds} panicked: {}", msg.unwrap_or_default());
            }
        }
        // The first rounds grow the heap while each architecture, shape and thread meets
        // the allocator for the first time; a leak keeps growing after that warm-up.
        if baseline.is_none() && started.elapsed() >= budget / 4 {
            baseline = resident_kib();
        }
        rounds += 1;
    }
    std::fs::remove_dir_all(&dir).ok();
    let end = resident_kib();
    println!(
        "soak: {rounds} rounds in {:.0?}; resident memory {baseline:?} KiB after a quarter of the time, {end:?} KiB at the end",
        started.elapsed()
    );
    match (baseline, end) {
        (Some(first), Some(last)) => {
            assert!(last * 20 <= first * 21, "resident memory grew from {first} KiB to {last} KiB after the warm-up")
        }
        _ => println!("soak: no /proc/self/status here; the memory check is skipped"),
    }
}
