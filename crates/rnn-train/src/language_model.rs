//! Training and saving a character-level [`Gpt`] on a [`TextDataset`].
//!
//! A GPT does not go through [`crate::Network`]: `Network` is a sequence of `LayerBuilder`
//! layers fed from one in-memory tensor of samples, trained by epochs with a classification
//! or regression loss; a language model reads ids, predicts every position of every window
//! and trains by steps over random windows. What they share is reused instead: safetensors
//! checkpoints with atomic writes and name / shape / dtype checks ([`crate::checkpoint`]),
//! the optimizers, gradient clipping and learning-rate handling of `rnn-nn`.
//!
//! A GPT checkpoint holds the parameters (`tok_emb.weight`, `blocks.0.ln_1.weight`, ...)
//! and, in its metadata, the format tag, the [`GptConfig`] as JSON and the vocabulary, so
//! [`load_gpt`] rebuilds the model and its tokenizer from the file alone.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Instant;

use rnn_core::{no_grad, Device, Error, Result, Tensor};
use rnn_nn::{clip_grad_norm, AdamConfig, AdamW, Gpt, GptConfig, Module, VarBuilder};

use crate::checkpoint;
use crate::config::MixedPrecision;
use crate::data::text::{TextDataset, TextSplit, Vocab, WindowSampler};
use crate::precision::Precision;

const FORMAT_KEY: &str = "rnn.format";
const FORMAT: &str = "rnn.gpt.v1";
const CONFIG_KEY: &str = "rnn.gpt.config";
const VOCAB_KEY: &str = "rnn.vocab";

/// Writes the model's parameters, config and vocabulary to `path` (atomically).
pub fn save_gpt(path: impl AsRef<Path>, model: &Gpt, vocab: &Vocab) -> Result<()> {
    if vocab.len() != model.config().vocab_size {
        let msg = format!("vocabulary of {} characters for a model of {}", vocab.len(), model.config().vocab_size);
        return Err(Error::invalid("save_gpt", msg));
    }
    if let Some(name) = crate::guard::first_non_finite(&model.named_parameters())? {
        let msg = format!("{name} holds NaN or infinite values; {} was not written", path.as_ref().display());
        return Err(Error::invalid("save_gpt", msg));
    }
    let config =
        serde_json::to_string(model.config()).map_err(|e| Error::Msg(format!("cannot encode the config: {e}")))?;
    let metadata = BTreeMap::from([
        (FORMAT_KEY.to_string(), FORMAT.to_string()),
        (CONFIG_KEY.to_string(), config),
        (VOCAB_KEY.to_string(), vocab.as_string()),
    ]);
    checkpoint::save(path, &model.named_parameters(), &metadata)
}

/// Rebuilds a model and its vocabulary saved by [`save_gpt`], on `device`. A file that is
/// missing, not safetensors, of another format or inconsistent is a clear error.
pub fn load_gpt(path: impl AsRef<Path>, device: Device) -> Result<(Gpt, Vocab)> {
    let path = path.as_ref();
    let ckpt = checkpoint::load(path)?;
    match ckpt.metadata.get(FORMAT_KEY).map(String::as_str) {
        Some(FORMAT) => {}
        Some(other) => {
            return Err(Error::bad_file(path, format!("format '{other}' is not a GPT checkpoint ({FORMAT})")))
        }
        None => return Err(Error::bad_file(path, "not a GPT checkpoint (no rnn.format metadata)")),
    }
    let field = |key: &str| ckpt.metadata.get(key).ok_or_else(|| Error::bad_file(path, format!("{key} is missing")));
    let config: GptConfig = serde_json::from_str(field(CONFIG_KEY)?)
        .map_err(|e| Error::bad_file(path, format!("the GPT config does not parse: {e}")))?;
    let vocab = Vocab::from_chars(field(VOCAB_KEY)?).map_err(|e| Error::bad_file(path, e.to_string()))?;
    if vocab.len() != config.vocab_size {
        let msg = format!("the vocabulary has {} characters, the config {}", vocab.len(), config.vocab_size);
        return Err(Error::bad_file(path, msg));
    }
    let dtype = ckpt.get("tok_emb.weight").map(|t| t.dtype()).unwrap_or(rnn_core::DType::F32);
    let model =
        Gpt::new(config, &mut VarBuilder::new(device, dtype, 0)).map_err(|e| Error::bad_file(path, e.to_string()))?;
    checkpoint::apply(&model.named_parameters(), &ckpt).map_err(|e| Error::bad_file(path, e.to_string()))?;
    Ok((model, vocab))
}

/// How [`train_gpt`] trains: AdamW over random windows, gradient-norm clipping.
#[derive(Clone, Debug, PartialEq)]
pub struct GptTrainConfig {
    pub steps: usize,
    pub batch_size: usize,
    /// Window length; at most the model's context length.
    pub context: usize,
    pub optimizer: AdamConfig,
    /// Gradients are rescaled to this global norm when above it (0 disables).
    pub clip_norm: f64,
    /// Seed of the window sampler.
    pub seed: u64,
    /// Validation loss every this many steps (and after the last); 0: only after the last.
    pub eval_every: usize,
    /// Validation windows (non-overlapping, from the start of the validation text).
    pub val_windows: usize,
    /// Train in bf16 or f16 with f32 master weights (`None`: f32); the validation loss is
    /// computed in f32 from the f32 weights either way.
    pub mixed_precision: Option<MixedPrecision>,
}

impl Default for GptTrainConfig {
    /// nanoGPT's character-level settings, scaled to a small CPU model.
    fn default() -> Self {
        let optimizer = AdamConfig { lr: 1e-3, beta1: 0.9, beta2: 0.99, weight_decay: 0.1, ..AdamConfig::adamw() };
        GptTrainConfig {
            steps: 1000,
            batch_size: 32,
            context: 64,
            optimizer,
            clip_norm: 1.0,
            seed: 1337,
            eval_every: 100,
            val_windows: 256,
            mixed_precision: None,
        }
    }
}

/// What happened at an evaluation point, for progress output.
#[derive(Clone, Debug, PartialEq)]
pub struct GptProgress {
    /// Steps done so far.
    pub step: usize,
    /// Mean training loss over the steps since the previous report.
    pub train_loss: f64,
    pub val_loss: f64,
    /// Wall-clock seconds per training step since the previous report (evaluation excluded).
    pub step_seconds: f64,
}

/// Trains `model` on `data`; calls `report` at each evaluation point with the model (in
/// evaluation mode, so it may sample text). Returns every report.
pub fn train_gpt(
    model: &mut Gpt,
    data: &TextDataset,
    config: &GptTrainConfig,
    mut report: impl FnMut(&GptProgress, &mut Gpt) -> Result<()>,
) -> Result<Vec<GptProgress>> {
    check_train_config(model, data, config)?;
    let device = model.token_embedding().device();
    let params = model.parameters();
    let mut optimizer = AdamW::new(params.clone(), config.optimizer.clone())?;
    let mut precision = Precision::new(config.mixed_precision, device)?;
    let mut sampler = WindowSampler::new(config.seed);
    let (mut history, mut since, mut loss_sum) = (Vec::new(), Instant::now(), None::<Tensor>);
    let mut last_report = 0;
    for step in 1..=config.steps {
        model.set_training(true);
        let (x, y) = data.random_batch(&mut sampler, config.batch_size, config.context, device)?;
        let loss = crate::step_thread(device, || -> Result<Tensor> {
            let loss = precision.forward(|| model.loss(&x, &y))?;
            let mut grads = precision.scaled(&loss)?.backward()?;
            precision.unscale(&mut grads, &params)?;
            if config.clip_norm > 0.0 {
                clip_grad_norm(&mut grads, &params, config.clip_norm)?;
            }
            precision.step(&mut optimizer, &mut grads, &params)?;
            Ok(loss)
        })?;
        // Summed on the device: read back once per report, not once per step.
        let detached = loss.detach();
        loss_sum = Some(match loss_sum {
            Some(sum) => sum.add(&detached)?,
            None => detached,
        });
        let due = config.eval_every > 0 && step % config.eval_every == 0;
        if due || step == config.steps {
            let steps = step - last_report;
            let train_loss = loss_sum.take().map(|s| s.to_f64_scalar()).transpose()?.unwrap_or(f64::NAN) / steps as f64;
            let step_seconds = since.elapsed().as_secs_f64() / steps as f64;
            let val_loss = validation_loss(model, data, config)?;
            check_finite_losses(last_report + 1, step, train_loss, val_loss)?;
            let progress = GptProgress { step, train_loss, val_loss, step_seconds };
            report(&progress, model)?;
            history.push(progress);
            (since, last_report) = (Instant::now(), step);
        }
    }
    model.set_training(true);
    Ok(history)
}

/// A NaN or infinite loss stops training: the weights are diverged or the data is bad, and
/// every later step would only spread it. Losses are read back at reports, so the error names
/// the steps since the previous one.
fn check_finite_losses(first: usize, step: usize, train_loss: f64, val_loss: f64) -> Result<()> {
    if train_loss.is_finite() && val_loss.is_finite() {
        return Ok(());
    }
    let msg = format!(
        "the training loss is {train_loss} and the validation loss {val_loss} after steps {first} to {step}: \
         training diverged (lower the learning rate, or clip gradients with a smaller clip_norm)"
    );
    Err(Error::invalid("train_gpt", msg))
}

fn check_train_config(model: &Gpt, data: &TextDataset, config: &GptTrainConfig) -> Result<()> {
    let c = model.config();
    let problem = if config.steps == 0 || config.batch_size == 0 {
        Some("steps and batch size must be at least 1".to_string())
    } else if config.context == 0 || config.context > c.context_length {
        Some(format!("context {} must be in 1..={}", config.context, c.context_length))
    } else if data.vocab.len() != c.vocab_size {
        Some(format!("the text has {} characters, the model's vocabulary {}", data.vocab.len(), c.vocab_size))
    } else if data.train.len() <= config.context || data.val.len() <= config.context {
        Some(format!("both parts of the text must be longer than the context {}", config.context))
    } else {
        None
    };
    match problem {
        Some(msg) => Err(Error::invalid("train_gpt", msg)),
        None => Ok(()),
    }
}

/// Mean loss over the fixed validation windows, in evaluation mode, in batches of the
/// training batch size.
pub fn validation_loss(model: &mut Gpt, data: &TextDataset, config: &GptTrainConfig) -> Result<f64> {
    model.set_training(false);
    let device = model.token_embedding().device();
    let starts = data.val_starts(config.context, config.val_windows.max(1));
    let mut total = 0.0;
    for chunk in starts.chunks(config.batch_size.max(1)) {
        let (x, y) = data.windows(TextSplit::Validation, chunk, config.context, device)?;
        let loss = no_grad(|| model.loss(&x, &y))?;
        total += loss.to_f64_scalar()? * chunk.len() as f64;
    }
    Ok(total / starts.len().max(1) as f64)
}
