//! `rnn train`: trains a digit classifier (MLP or small CNN) on the built-in drawn digits
//! or on MNIST IDX files, on the best device, and writes curves and a checkpoint; with
//! `--model gpt`, a character-level GPT on a text (see `gpt.rs`).

use std::path::{Path, PathBuf};

use clap::{Args, ValueEnum};
use rnn::train::atomic_file::write_atomic;
use rnn::train::data::{load_mnist, mnist_split_present, synthetic_digits, Dataset, MnistSplit};
use rnn::train::distributed::{DataParallel, ProcessGroup};
use rnn::train::plot::plot_history;
use rnn::{ActivationFunction, Device, LayerBuilder, LossFunction, MixedPrecision, Network, Tensor, TrainingConfig};

use crate::output::OutputDir;
use crate::CliResult;

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum ModelKind {
    /// 784-512-256-10 with ReLU.
    Mlp,
    /// conv(16, 3x3) - pool - conv(32, 3x3) - pool - dense(10).
    Cnn,
    /// A character-level GPT language model; needs `--data text:<file>` (`text:` alone: the
    /// built-in King James Bible).
    Gpt,
}

#[derive(Args, Debug)]
// `--lr -1` reaches the range check, which names the flag, instead of clap's "unexpected
// argument '-1'".
#[command(allow_negative_numbers = true)]
pub struct TrainArgs {
    /// `builtin` (procedurally drawn 28x28 digits, no download) or `mnist:<dir>` (IDX files,
    /// .gz or raw; when no train file is there, the first 8,000 t10k images train and the last
    /// 2,000 test); for `--model gpt`: `text:<file>` (UTF-8, raw or .gz, at most 1 GiB of
    /// text) or `text:` (the built-in corpus).
    #[arg(long, default_value = "builtin")]
    pub data: String,
    #[arg(long, value_enum, default_value_t = ModelKind::Mlp)]
    pub model: ModelKind,
    #[arg(long, default_value_t = 5)]
    pub epochs: usize,
    /// Samples per batch (default: 64; 32 windows for the GPT).
    #[arg(long)]
    pub batch_size: Option<usize>,
    /// Adam learning rate.
    #[arg(long, default_value_t = 1e-3)]
    pub lr: f64,
    /// `cpu`, `cuda:N` or `wgpu:N` (default: the best available, or RNN_GPU_DEVICE).
    #[arg(long)]
    pub device: Option<String>,
    /// Folder for curves.svg, model.safetensors and history.json (created if missing, and
    /// checked before training starts; existing files are replaced atomically, through a
    /// symbolic link to its target).
    #[arg(long, default_value = "rnn-out")]
    pub out: PathBuf,
    /// Training samples drawn for the built-in data set (a fifth as many more for testing;
    /// each takes 3,136 bytes, and a count that does not fit in memory is an error).
    #[arg(long, default_value_t = 10_000)]
    pub samples: usize,
    #[arg(long, default_value_t = 42)]
    pub seed: u64,
    /// No progress output, only the final summary.
    #[arg(long)]
    pub quiet: bool,
    /// Train as one rank of the processes `mpirun -np N` started (data parallel; a build with
    /// `--features mpi`): each rank trains on its share of every batch (`--batch-size` is per
    /// rank), gradients are averaged across ranks, rank 0 alone prints and writes `--out`.
    /// Not launched by mpirun: one rank. MLP and CNN only.
    #[arg(long)]
    pub distributed: bool,
    /// With --distributed: gradients travel in buckets of this many MiB.
    #[arg(long, default_value_t = 25.0)]
    pub bucket_mb: f64,
    /// `f32`, `bf16` or `f16`: bf16 and f16 run the forward pass under autocast with f32
    /// master weights (f16 with dynamic loss scaling).
    #[arg(long, default_value = "f32")]
    pub precision: String,
    #[command(flatten)]
    pub gpt: crate::gpt::GptArgs,
}

/// The files `rnn train` writes into `--out`.
pub const CURVES_FILE: &str = "curves.svg";
pub const CHECKPOINT_FILE: &str = "model.safetensors";
pub const HISTORY_FILE: &str = "history.json";
/// The untrained GPT, with `--save-init`.
pub const INIT_FILE: &str = "init.safetensors";

impl TrainArgs {
    /// `--precision`: `None` for f32.
    pub fn mixed_precision(&self) -> CliResult<Option<MixedPrecision>> {
        Ok(MixedPrecision::parse(&self.precision)?)
    }
}

pub fn run(args: &TrainArgs) -> CliResult<()> {
    let precision = args.mixed_precision()?;
    let group = match args.distributed {
        true if args.model == ModelKind::Gpt => {
            return Err("--distributed trains the MLP and the CNN, not the GPT".into())
        }
        true => Some(data_parallel(args)?),
        false => None,
    };
    let main = group.as_ref().is_none_or(|g| g.is_main());
    let device = match &args.device {
        Some(name) => Device::parse(name)?,
        None => crate::distributed::rank_device(Device::best()?),
    };
    device.check_available()?;
    // Only rank 0 writes: the others neither create nor check the folder.
    let out = main.then(|| OutputDir::prepare(&args.out, &output_files(args))).transpose()?;
    if main {
        println!("device: {device}{}", if device.is_cpu() { " (no GPU selected or available)" } else { "" });
        println!("precision: {}", precision.map_or("f32", |m| m.name()));
    }
    if let Some(dp) = &group {
        if main {
            println!(
                "data parallel: {} ranks ({:?}), batch {} per rank",
                dp.world_size(),
                dp.group.backend(),
                batch_size(args)
            );
        }
    }
    let result = match args.model {
        ModelKind::Gpt => crate::gpt::run(args, device),
        ModelKind::Mlp | ModelKind::Cnn => train_classifier(args, device, group),
    };
    match out {
        Some(out) => out.finish(result),
        None => result,
    }
}

/// The process group `mpirun` started this process in, with `--bucket-mb`.
fn data_parallel(args: &TrainArgs) -> CliResult<DataParallel> {
    let bytes = args.bucket_mb * (1 << 20) as f64;
    if !(1.0..1e15).contains(&bytes) {
        return Err(format!("--bucket-mb must be a positive size, got {}", args.bucket_mb).into());
    }
    Ok(DataParallel::new(ProcessGroup::from_env()?).with_bucket_bytes(bytes as usize))
}

fn batch_size(args: &TrainArgs) -> usize {
    args.batch_size.unwrap_or(64)
}

/// What the run will write into `--out`.
fn output_files(args: &TrainArgs) -> Vec<&'static str> {
    match args.model {
        ModelKind::Gpt if args.gpt.save_init => vec![CHECKPOINT_FILE, HISTORY_FILE, INIT_FILE],
        ModelKind::Gpt => vec![CHECKPOINT_FILE, HISTORY_FILE],
        ModelKind::Mlp | ModelKind::Cnn => vec![CURVES_FILE, CHECKPOINT_FILE, HISTORY_FILE],
    }
}

fn train_classifier(args: &TrainArgs, device: Device, group: Option<DataParallel>) -> CliResult<()> {
    let main = group.as_ref().is_none_or(|g| g.is_main());
    let (train, test) = load_data(args)?;
    let mut net = build_model(args.model, args.seed)?;
    if main {
        println!("data: {} ({} training, {} test samples)", train.name, train.len(), test.len());
        println!("{}", net.summary());
    }
    let config = TrainingConfig {
        distributed: group,
        batch_size: batch_size(args),
        max_epochs: args.epochs,
        learning_rate: args.lr,
        validation_split: 0.1,
        seed: args.seed,
        verbose: !args.quiet,
        device: Some(device),
        mixed_precision: args.mixed_precision()?,
        ..TrainingConfig::default()
    };
    let (x_train, x_test) = (shape_inputs(&train.inputs, args.model)?, shape_inputs(&test.inputs, args.model)?);
    let history = net.train(&x_train, &train.labels, &config)?;
    if !main {
        return Ok(());
    }
    let eval = net.evaluate(&x_test, &test.labels)?;
    let mean_rate = history.samples_per_sec.iter().sum::<f64>() / history.samples_per_sec.len().max(1) as f64;
    println!(
        "test accuracy: {:.2}%  test loss: {:.4}  ({:.0} samples/s, {:.1}s total)",
        eval.accuracy.unwrap_or(f64::NAN) * 100.0,
        eval.loss,
        mean_rate,
        history.epoch_times.iter().sum::<f64>()
    );
    write_outputs(&args.out, &net, &history)
}

fn load_data(args: &TrainArgs) -> CliResult<(Dataset, Dataset)> {
    if args.data == "builtin" {
        return builtin_digits(args.samples, args.seed);
    }
    let Some(dir) = args.data.strip_prefix("mnist:") else {
        return Err(format!("unknown --data '{}': use builtin or mnist:<dir>", args.data).into());
    };
    let dir = Path::new(dir);
    // Only missing train files mean "use the test files": a train file that is there but
    // cannot be read is an error, never a silent switch to other data.
    if mnist_split_present(dir, MnistSplit::Train) {
        return Ok((load_mnist(dir, MnistSplit::Train)?, load_mnist(dir, MnistSplit::Test)?));
    }
    let all = load_mnist(dir, MnistSplit::Test)?;
    let n_train = all.len() * 4 / 5;
    Ok(all.split_at(n_train)?)
}

/// `samples` drawn digits to train on and a fifth as many (at least 10) to test on.
fn builtin_digits(samples: usize, seed: u64) -> CliResult<(Dataset, Dataset)> {
    if samples < 10 {
        return Err("--samples must be at least 10".into());
    }
    let too_many = |e: rnn::Error| format!("--samples {samples} is too many for this machine's memory: {e}");
    let train = synthetic_digits(samples, seed).map_err(too_many)?;
    let test = synthetic_digits((samples / 5).max(10), seed.wrapping_add(1_000_003)).map_err(too_many)?;
    Ok((train, test))
}

/// The two models of the command; both end in a softmax over 10 classes.
pub fn build_model(kind: ModelKind, seed: u64) -> rnn::Result<Network> {
    use ActivationFunction::{ReLU, Softmax};
    let builder = match kind {
        ModelKind::Mlp => Network::with_input_size(784)?
            .add_layer(LayerBuilder::dense(512).activation(ReLU))
            .add_layer(LayerBuilder::dense(256).activation(ReLU)),
        ModelKind::Gpt => return Err(rnn::Error::invalid("rnn train", "the GPT is not a Network (see gpt.rs)")),
        ModelKind::Cnn => Network::with_input_shape(&[1, 28, 28])?
            .add_layer(LayerBuilder::conv2d(16, 3).padding(1).activation(ReLU))
            .add_layer(LayerBuilder::max_pool2d(2))
            .add_layer(LayerBuilder::conv2d(32, 3).padding(1).activation(ReLU))
            .add_layer(LayerBuilder::max_pool2d(2))
            .add_layer(LayerBuilder::flatten()),
    };
    builder
        .add_layer(LayerBuilder::dense(10).activation(Softmax))
        .loss(LossFunction::CategoricalCrossEntropy)
        .seed(seed)
        .build()
}

/// Flat `[n, 784]` rows for the MLP, `[n, 1, 28, 28]` images for the CNN.
pub fn shape_inputs(x: &Tensor, kind: ModelKind) -> rnn::Result<Tensor> {
    match kind {
        ModelKind::Mlp => x.flatten(1, -1),
        ModelKind::Cnn => x.reshape((x.dims()[0], 1, 28, 28)),
        ModelKind::Gpt => Err(rnn::Error::invalid("rnn train", "the GPT reads text, not images")),
    }
}

fn write_outputs(out: &Path, net: &Network, history: &rnn::History) -> CliResult<()> {
    let curves = out.join(CURVES_FILE);
    plot_history(history, &curves)?;
    let checkpoint = out.join(CHECKPOINT_FILE);
    net.save(&checkpoint)?;
    let json = out.join(HISTORY_FILE);
    write_atomic(&json, history_json(history)?.as_bytes())?;
    println!("wrote {}, {} and {}", curves.display(), checkpoint.display(), json.display());
    Ok(())
}

fn history_json(h: &rnn::History) -> CliResult<String> {
    let value = serde_json::json!({
        "train_loss": h.train_loss, "val_loss": h.val_loss,
        "train_metrics": h.train_metrics, "val_metrics": h.val_metrics,
        "epoch_times": h.epoch_times, "samples_per_sec": h.samples_per_sec,
        "learning_rates": h.learning_rates, "comm_wait_seconds": h.comm_wait_seconds,
    });
    Ok(serde_json::to_string_pretty(&value)?)
}
