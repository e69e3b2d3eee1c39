//! `rnn train --model gpt`: a character-level GPT on a text file (or the built-in King James
//! Bible), with train / validation loss and a text sample as it trains; `rnn generate`
//! samples text from the checkpoint it writes.

use std::path::{Path, PathBuf};

use clap::Args;
use rnn::nn::{Gpt, GptConfig, Module, SamplingOptions, VarBuilder};
use rnn::train::data::text::{TextDataset, Vocab};
use rnn::train::{load_gpt, save_gpt, train_gpt, GptProgress, GptTrainConfig};
use rnn::{DType, Device};

use rnn::train::atomic_file::write_atomic;

use crate::train::{TrainArgs, CHECKPOINT_FILE, HISTORY_FILE, INIT_FILE};
use crate::CliResult;

/// The options of `rnn train` that only the GPT uses. The defaults make a ~0.8M-parameter
/// model that trains at a few steps per second on a 2-core CPU.
#[derive(Args, Debug)]
pub struct GptArgs {
    /// Training steps (one random batch of windows each).
    #[arg(long, default_value_t = 1000)]
    pub steps: usize,
    /// Context length: characters the model reads.
    #[arg(long, default_value_t = 64)]
    pub context: usize,
    #[arg(long, default_value_t = 128)]
    pub d_model: usize,
    #[arg(long, default_value_t = 4)]
    pub layers: usize,
    #[arg(long, default_value_t = 4)]
    pub heads: usize,
    #[arg(long, default_value_t = 0.0)]
    pub dropout: f64,
    /// Validation loss (and a progress line) every N steps.
    #[arg(long, default_value_t = 100)]
    pub eval_every: usize,
    /// A generated sample every N steps (a multiple of --eval-every; 0: only at the end).
    #[arg(long, default_value_t = 500)]
    pub sample_every: usize,
    /// Characters per sample.
    #[arg(long, default_value_t = 200)]
    pub sample_chars: usize,
    /// Also write the untrained model to <out>/init.safetensors (the PyTorch twin starts from it).
    #[arg(long)]
    pub save_init: bool,
}

/// The path part of `--data text:<file>`; `text:` alone is the built-in corpus.
pub fn load_text(data: &str, context: usize) -> CliResult<TextDataset> {
    let Some(path) = data.strip_prefix("text:") else {
        return Err(
            format!("--model gpt needs --data text:<file> (or text: for the built-in corpus), got '{data}'").into()
        );
    };
    Ok(match path {
        "" => TextDataset::builtin(context)?,
        file => TextDataset::load(file, context)?,
    })
}

pub fn run(args: &TrainArgs, device: Device) -> CliResult<()> {
    let gpt = &args.gpt;
    let data = load_text(&args.data, gpt.context)?;
    let chars = data.train.len() + data.val.len();
    println!("data: {} ({chars} characters, vocabulary {}, 90/10 split)", data.name, data.vocab.len());
    let config = GptConfig {
        vocab_size: data.vocab.len(),
        context_length: gpt.context,
        d_model: gpt.d_model,
        num_heads: gpt.heads,
        num_layers: gpt.layers,
        dropout: gpt.dropout,
    };
    check_fits_in_memory(gpt, data.vocab.len(), args.batch_size.unwrap_or(32))?;
    let mut model = Gpt::new(config, &mut VarBuilder::new(device, DType::F32, args.seed))?;
    println!(
        "model: GPT, {} layers, d_model {}, {} heads, context {}, {} parameters",
        gpt.layers,
        gpt.d_model,
        gpt.heads,
        gpt.context,
        model.num_parameters()
    );
    if gpt.save_init {
        save_gpt(args.out.join(INIT_FILE), &model, &data.vocab)?;
    }
    let mut train_config = GptTrainConfig {
        steps: gpt.steps,
        batch_size: args.batch_size.unwrap_or(32),
        context: gpt.context,
        seed: args.seed,
        eval_every: gpt.eval_every,
        mixed_precision: args.mixed_precision()?,
        ..GptTrainConfig::default()
    };
    train_config.optimizer.lr = args.lr;
    let history =
        train_gpt(&mut model, &data, &train_config, |progress, model| report(progress, model, &data.vocab, args))?;
    write_outputs(&args.out, &model, &data.vocab, &history, &train_config)
}

/// Refuses model and batch sizes whose training state cannot fit in this machine's memory,
/// before any of it is allocated: the layers are allocated one by one, so without this a
/// typo such as `--layers 100000000` would fill the memory before an allocation failed.
/// The estimate is a lower bound (weights, gradients and two Adam moments, 16 bytes per
/// parameter, plus 4 bytes per activation of each block's input and output), so a run
/// that fits is never refused.
fn check_fits_in_memory(gpt: &GptArgs, vocab: usize, batch: usize) -> CliResult<()> {
    // In f64: the product of four flags can exceed any integer type.
    let (d, layers, context) = (gpt.d_model as f64, gpt.layers as f64, gpt.context as f64);
    let params = 12.0 * d * d * layers + (vocab as f64 + context) * d;
    let needed = 16.0 * params + 8.0 * layers * batch as f64 * context * d;
    let Some(total) = total_memory_bytes() else { return Ok(()) };
    if needed <= total as f64 {
        return Ok(());
    }
    Err(format!(
        "--d-model {} --layers {} --context {} --batch-size {batch}: training needs at least {:.1} GiB of memory, \
         this machine has {:.1} GiB",
        gpt.d_model,
        gpt.layers,
        gpt.context,
        needed / GIB,
        total as f64 / GIB
    )
    .into())
}

const GIB: f64 = (1u64 << 30) as f64;

/// `MemTotal` of /proc/meminfo, where there is one.
fn total_memory_bytes() -> Option<u64> {
    let info = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = info.lines().find(|l| l.starts_with("MemTotal:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib.saturating_mul(1024))
}

/// One progress line, and a sample when due.
fn report(progress: &GptProgress, model: &mut Gpt, vocab: &Vocab, args: &TrainArgs) -> rnn::Result<()> {
    let gpt = &args.gpt;
    if !args.quiet {
        println!(
            "step {:>6}/{}  train loss {:.4}  val loss {:.4}  ({:.0} ms/step)",
            progress.step,
            gpt.steps,
            progress.train_loss,
            progress.val_loss,
            progress.step_seconds * 1e3
        );
    }
    let last = progress.step == gpt.steps;
    let due = gpt.sample_every > 0 && progress.step % gpt.sample_every == 0;
    if (due || last) && gpt.sample_chars > 0 && !args.quiet {
        let prompt = default_prompt(vocab)?;
        let options = SamplingOptions { temperature: 0.8, top_k: None, seed: args.seed ^ progress.step as u64 };
        let ids = model.generate(&vocab.encode(&prompt)?, gpt.sample_chars, &options)?;
        println!("--- sample at step {} ---\n{}{}\n---", progress.step, prompt, vocab.decode(&ids)?);
    }
    Ok(())
}

/// A newline when the vocabulary has one, else its first character.
fn default_prompt(vocab: &Vocab) -> rnn::Result<String> {
    let chars = vocab.as_string();
    Ok(if chars.contains('\n') { "\n".to_string() } else { chars.chars().take(1).collect() })
}

fn write_outputs(
    out: &Path,
    model: &Gpt,
    vocab: &Vocab,
    history: &[GptProgress],
    config: &GptTrainConfig,
) -> CliResult<()> {
    let checkpoint = out.join(CHECKPOINT_FILE);
    save_gpt(&checkpoint, model, vocab)?;
    let json = out.join(HISTORY_FILE);
    let value = serde_json::json!({
        "step": history.iter().map(|p| p.step).collect::<Vec<_>>(),
        "train_loss": history.iter().map(|p| p.train_loss).collect::<Vec<_>>(),
        "val_loss": history.iter().map(|p| p.val_loss).collect::<Vec<_>>(),
        "step_seconds": history.iter().map(|p| p.step_seconds).collect::<Vec<_>>(),
        "batch_size": config.batch_size, "context": config.context, "seed": config.seed,
        "val_windows": config.val_windows, "lr": config.optimizer.lr,
    });
    write_atomic(&json, serde_json::to_string_pretty(&value)?.as_bytes())?;
    if let Some(last) = history.last() {
        println!("final: train loss {:.4}  val loss {:.4}", last.train_loss, last.val_loss);
    }
    println!("wrote {} (weights, config, vocabulary) and {}", checkpoint.display(), json.display());
    println!("sample more with: rnn generate --checkpoint {} --prompt \"...\"", checkpoint.display());
    Ok(())
}

#[derive(Args, Debug)]
// `--temperature -1` reaches the range check instead of clap's "unexpected argument '-1'".
#[command(allow_negative_numbers = true)]
pub struct GenerateArgs {
    /// A checkpoint written by `rnn train --model gpt`.
    #[arg(long, default_value = "rnn-out/model.safetensors")]
    pub checkpoint: PathBuf,
    /// Text to continue (every character must be in the model's vocabulary; default: a newline).
    #[arg(long)]
    pub prompt: Option<String>,
    /// Characters to generate.
    #[arg(long, default_value_t = 500)]
    pub max_tokens: usize,
    /// Below 1: more predictable; above 1: more varied (must be > 0).
    #[arg(long, default_value_t = 0.8)]
    pub temperature: f64,
    /// Sample among the K most likely characters only (1: always the most likely).
    #[arg(long)]
    pub top_k: Option<usize>,
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// `cpu`, `cuda:N` or `wgpu:N` (default: the CPU).
    #[arg(long)]
    pub device: Option<String>,
}

pub fn generate(args: &GenerateArgs) -> CliResult<()> {
    let device = match &args.device {
        Some(name) => Device::parse(name)?,
        None => Device::Cpu,
    };
    device.check_available()?;
    let (mut model, vocab) = load_gpt(&args.checkpoint, device)?;
    let prompt = match &args.prompt {
        Some(p) => p.clone(),
        None => default_prompt(&vocab)?,
    };
    let prompt_ids = vocab.encode(&prompt).map_err(|e| format!("{e}; the model knows: {:?}", vocab.as_string()))?;
    let options = SamplingOptions { temperature: args.temperature, top_k: args.top_k, seed: args.seed };
    let ids = model.generate(&prompt_ids, args.max_tokens, &options)?;
    println!("{prompt}{}", vocab.decode(&ids)?);
    Ok(())
}
