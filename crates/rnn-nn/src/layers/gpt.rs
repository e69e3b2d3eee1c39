//! A GPT decoder (GPT-2 / nanoGPT layout): token and learned position embeddings, a stack
//! of pre-norm [`TransformerBlock`]s, a final LayerNorm and a language-model head whose
//! weight *is* the token embedding (weight tying: one parameter, trained by both uses).
//!
//! Parameter names: `tok_emb.weight`, `pos_emb.weight`, `blocks.<i>.<block parameter>`,
//! `ln_f.weight`, `ln_f.bias`. The head has no parameter of its own.
//!
//! [`Gpt::forward_cached`] reads a sequence in pieces, keeping each block's keys and values
//! of the positions read in a [`KvCache`]; [`Gpt::generate`] uses it.

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use rnn_core::{no_grad, Error, Result, Tensor};
use serde::{Deserialize, Serialize};

use crate::init::bad_config;
use crate::layers::transformer::{GPT2_INIT_STD, LAYER_NORM_EPS};
use crate::{cross_entropy, prefixed, BlockConfig, Dropout, Embedding, Init, LayerNorm, Linear, Module};
use crate::{KvCache, TransformerBlock, VarBuilder};

const NAME: &str = "Gpt";

/// The shape of a [`Gpt`].
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct GptConfig {
    /// Number of token ids (`0..vocab_size`).
    pub vocab_size: usize,
    /// Longest sequence the model reads (the number of learned positions).
    pub context_length: usize,
    pub d_model: usize,
    pub num_heads: usize,
    pub num_layers: usize,
    /// Dropout after the embeddings, the attention and the MLP, in training mode.
    pub dropout: f64,
}

impl GptConfig {
    /// Checks every field; the error names the bad one.
    pub fn validate(&self) -> Result<()> {
        let c = self;
        let sizes = [("vocab_size", c.vocab_size), ("context_length", c.context_length), ("num_layers", c.num_layers)];
        if let Some((what, _)) = sizes.iter().find(|(_, n)| *n == 0) {
            return Err(bad_config(NAME, format!("{what} must be > 0")));
        }
        if c.d_model == 0 || c.num_heads == 0 || c.d_model % c.num_heads != 0 {
            let msg = format!("d_model {} must be a positive multiple of num_heads {}", c.d_model, c.num_heads);
            return Err(bad_config(NAME, msg));
        }
        if !(0.0..1.0).contains(&c.dropout) {
            return Err(bad_config(NAME, format!("dropout {} must be in [0, 1)", c.dropout)));
        }
        Ok(())
    }
}

/// How [`Gpt::generate`] picks each next token.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct SamplingOptions {
    /// Divides the logits: below 1 sharper, above 1 flatter; must be > 0 and finite.
    pub temperature: f64,
    /// Sample only among the `k` most likely tokens (`Some(1)` is greedy decoding); must be
    /// at least 1; a `k` above the vocabulary size means the whole vocabulary.
    pub top_k: Option<usize>,
    /// Seed of the sampling generator: the same seed, model and prompt give the same text.
    pub seed: u64,
}

impl Default for SamplingOptions {
    fn default() -> Self {
        SamplingOptions { temperature: 1.0, top_k: None, seed: 0 }
    }
}

/// The GPT decoder; see the module docs.
pub struct Gpt {
    config: GptConfig,
    tok_emb: Embedding,
    pos_emb: Embedding,
    blocks: Vec<TransformerBlock>,
    ln_f: LayerNorm,
    dropout: Dropout,
    training: bool,
}

impl Gpt {
    /// A model with GPT-2's initialization: embeddings N(0, 0.02), blocks as
    /// [`TransformerBlock::new`], final LayerNorm ones / zeros. Starts in training mode.
    pub fn new(config: GptConfig, vb: &mut VarBuilder) -> Result<Self> {
        config.validate()?;
        let d = config.d_model;
        let init = Init::Normal { mean: 0.0, std: GPT2_INIT_STD };
        let tok_emb = Embedding::from_tensors(vb.var(&[config.vocab_size, d], init)?)?;
        let pos_emb = Embedding::from_tensors(vb.var(&[config.context_length, d], init)?)?;
        let block = BlockConfig {
            d_model: d,
            num_heads: config.num_heads,
            dropout: config.dropout,
            num_layers: config.num_layers,
        };
        let blocks = (0..config.num_layers).map(|_| TransformerBlock::new(block, vb)).collect::<Result<_>>()?;
        let ln_f = LayerNorm::new(&[d], vb)?;
        let dropout = Dropout::new(config.dropout)?;
        Ok(Gpt { config, tok_emb, pos_emb, blocks, ln_f, dropout, training: true })
    }

    /// A model from its parameters by name (the names of `named_parameters`), e.g. taken
    /// from a checkpoint or handed to a gradient check; `get` fails for a missing name.
    /// Shapes are checked against `config`.
    pub fn from_parameters(config: GptConfig, get: &mut dyn FnMut(&str) -> Result<Tensor>) -> Result<Self> {
        config.validate()?;
        let d = config.d_model;
        let mut table = |name: &str, rows: usize| -> Result<Embedding> {
            let weight = get(name)?;
            if weight.dims() != [rows, d] {
                return Err(Error::invalid(NAME, format!("{name} is {:?}, expected [{rows}, {d}]", weight.dims())));
            }
            Embedding::from_tensors(weight)
        };
        let tok_emb = table("tok_emb.weight", config.vocab_size)?;
        let pos_emb = table("pos_emb.weight", config.context_length)?;
        let mut blocks = Vec::with_capacity(config.num_layers);
        for i in 0..config.num_layers {
            let mut in_block = |name: &str| get(&format!("blocks.{i}.{name}"));
            let block = TransformerBlock::from_parameters(&mut in_block, config.num_heads, config.dropout)?;
            if block.d_model() != d {
                return Err(Error::invalid(NAME, format!("block {i} has d_model {}, expected {d}", block.d_model())));
            }
            blocks.push(block);
        }
        let ln_f = LayerNorm::from_tensors(&[d], Some(get("ln_f.weight")?), Some(get("ln_f.bias")?), LAYER_NORM_EPS)?;
        let dropout = Dropout::new(config.dropout)?;
        Ok(Gpt { config, tok_emb, pos_emb, blocks, ln_f, dropout, training: true })
    }

    pub fn config(&self) -> &GptConfig {
        &self.config
    }

    /// The token embedding `[vocab, d_model]`, also the head's weight.
    pub fn token_embedding(&self) -> &Tensor {
        self.tok_emb.weight()
    }

    /// Logits `[B, T, vocab]` for token ids `[B, T]` (u8, u32 or i64), `1 <= T <= context`.
    pub fn forward_ids(&self, ids: &Tensor) -> Result<Tensor> {
        let steps = self.check_ids(ids)?;
        let mut x = self.embed(ids, 0, steps)?;
        for block in &self.blocks {
            x = block.forward(&x)?;
        }
        self.head(&x)
    }

    /// [`forward_ids`](Self::forward_ids) of ids `[B, T]` at the positions that follow the
    /// `caches[0].len()` positions held in `caches` (one [`KvCache`] per block, empty at the
    /// start of a sequence), which it extends by them. The logits equal the last `T` rows of
    /// `forward_ids` over the whole sequence, at the cost of the new positions alone; the
    /// sequence must fit the context (`past + T <= context_length`).
    pub fn forward_cached(&self, ids: &Tensor, caches: &mut [KvCache]) -> Result<Tensor> {
        let steps = self.check_ids(ids)?;
        if caches.len() != self.blocks.len() {
            let msg = format!("{} caches given, the model has {} blocks", caches.len(), self.blocks.len());
            return Err(Error::invalid(NAME, msg));
        }
        let past = caches[0].len();
        if caches.iter().any(|c| c.len() != past) || past + steps > self.config.context_length {
            let msg = format!(
                "cached positions {:?} + {steps} new must agree and fit the context length {}",
                caches.iter().map(KvCache::len).collect::<Vec<_>>(),
                self.config.context_length
            );
            return Err(Error::invalid(NAME, msg));
        }
        // On an error the caches go back to what they held (clones share the tensors).
        let before = caches.to_vec();
        let logits = self.read_into(ids, past, steps, caches);
        if logits.is_err() {
            caches.clone_from_slice(&before);
        }
        logits
    }

    /// The blocks over the new positions, extending each block's cache.
    fn read_into(&self, ids: &Tensor, past: usize, steps: usize, caches: &mut [KvCache]) -> Result<Tensor> {
        let mut x = self.embed(ids, past, steps)?;
        for (block, cache) in self.blocks.iter().zip(caches.iter_mut()) {
            x = block.forward_cached(&x, cache)?;
        }
        self.head(&x)
    }

    /// Token plus position embeddings of `ids`, at positions `first..first + steps`.
    fn embed(&self, ids: &Tensor, first: usize, steps: usize) -> Result<Tensor> {
        let positions = Tensor::arange(first as i64, (first + steps) as i64, ids.device())?;
        let embedded = self.tok_emb.forward(ids)?.add(&self.pos_emb.forward(&positions)?)?;
        self.dropout.forward(&embedded)
    }

    /// The final LayerNorm and the tied head: logits = ln_f(x) · tok_embᵀ.
    fn head(&self, x: &Tensor) -> Result<Tensor> {
        let x = self.ln_f.forward(x)?;
        Linear::from_tensors(self.tok_emb.weight().clone(), None).forward(&x)
    }

    /// Mean cross entropy of the next-token predictions: `targets` `[B, T]` holds the id that
    /// follows each position of `ids` `[B, T]`.
    pub fn loss(&self, ids: &Tensor, targets: &Tensor) -> Result<Tensor> {
        if targets.dims() != ids.dims() {
            let msg = format!("targets {:?} must have the shape of ids {:?}", targets.dims(), ids.dims());
            return Err(Error::invalid(NAME, msg));
        }
        let logits = self.forward_ids(ids)?;
        let rows = ids.elem_count();
        cross_entropy(&logits.reshape((rows, self.config.vocab_size))?, &targets.flatten_all()?)
    }

    /// `[B, T]` integer ids with `1 <= T <= context_length`; returns `T`.
    fn check_ids(&self, ids: &Tensor) -> Result<usize> {
        if ids.dtype().is_float() || ids.rank() != 2 {
            let msg = format!("ids must be integer [batch, time], got {:?} {:?}", ids.dtype(), ids.dims());
            return Err(Error::invalid(NAME, msg));
        }
        let (batch, steps) = (ids.dims()[0], ids.dims()[1]);
        if batch == 0 || steps == 0 || steps > self.config.context_length {
            let msg = format!(
                "ids [{batch}, {steps}]: need batch >= 1 and 1 <= time <= context_length {}",
                self.config.context_length
            );
            return Err(Error::invalid(NAME, msg));
        }
        Ok(steps)
    }

    /// Continues `prompt` (ids, at least one) by `max_new_tokens` sampled ids; returns only
    /// the new ids. Each step reads the last `context_length` ids; while all ids fit the
    /// context, through key-value caches, so a step costs one new position. Runs in
    /// evaluation mode (no dropout) without recording gradients, and restores the mode
    /// afterwards.
    pub fn generate(&mut self, prompt: &[u32], max_new_tokens: usize, options: &SamplingOptions) -> Result<Vec<u32>> {
        check_sampling(options)?;
        let vocab = self.config.vocab_size;
        if prompt.is_empty() {
            return Err(Error::invalid(NAME, "the prompt must hold at least one token"));
        }
        if let Some(bad) = prompt.iter().find(|&&id| id as usize >= vocab) {
            return Err(Error::invalid(NAME, format!("prompt id {bad} is outside the vocabulary (size {vocab})")));
        }
        let was_training = self.training;
        self.set_training(false);
        let result = no_grad(|| self.sample_tokens(prompt, max_new_tokens, options));
        self.set_training(was_training);
        result
    }

    /// While the ids fit the context, each step feeds only the ids not yet read to
    /// [`forward_cached`](Self::forward_cached). Past the context the window slides by one
    /// id a step, which moves every id to a new position: each step then reads its whole
    /// window afresh, as without a cache.
    fn sample_tokens(&self, prompt: &[u32], max_new_tokens: usize, options: &SamplingOptions) -> Result<Vec<u32>> {
        let mut rng = StdRng::seed_from_u64(options.seed);
        let mut ids: Vec<u32> = prompt.to_vec();
        let device = self.tok_emb.weight().device();
        let context = self.config.context_length;
        let mut caches = vec![KvCache::default(); self.blocks.len()];
        for _ in 0..max_new_tokens {
            let logits = if ids.len() <= context {
                let unread = &ids[caches[0].len()..];
                let input = Tensor::from_vec(unread.to_vec(), (1, unread.len()), device)?;
                self.forward_cached(&input, &mut caches)?.narrow(1, unread.len() - 1, 1)?
            } else {
                let window = &ids[ids.len() - context..];
                let input = Tensor::from_vec(window.to_vec(), (1, context), device)?;
                self.forward_ids(&input)?.narrow(1, context - 1, 1)?
            };
            let logits = logits.flatten_all()?.to_f64_vec()?;
            ids.push(sample_from_logits(&logits, options, &mut rng)? as u32);
        }
        Ok(ids.split_off(prompt.len()))
    }
}

fn check_sampling(options: &SamplingOptions) -> Result<()> {
    if !(options.temperature.is_finite() && options.temperature > 0.0) {
        let msg = format!("temperature must be > 0 and finite, got {}", options.temperature);
        return Err(Error::invalid(NAME, msg));
    }
    if options.top_k == Some(0) {
        return Err(Error::invalid(NAME, "top_k must be at least 1"));
    }
    Ok(())
}

/// Samples an index from `softmax(logits / temperature)` restricted to the `top_k` largest
/// logits (ties at the k-th value are all kept). With `top_k = 1` this is the first argmax,
/// whatever the generator.
pub fn sample_from_logits(logits: &[f64], options: &SamplingOptions, rng: &mut StdRng) -> Result<usize> {
    check_sampling(options)?;
    if logits.is_empty() || logits.iter().any(|x| x.is_nan()) {
        return Err(Error::invalid(NAME, "cannot sample from empty or NaN logits"));
    }
    let argmax = (0..logits.len()).fold(0, |best, i| if logits[i] > logits[best] { i } else { best });
    if options.top_k == Some(1) {
        return Ok(argmax);
    }
    let threshold = match options.top_k {
        Some(k) if k < logits.len() => {
            let mut sorted = logits.to_vec();
            sorted.sort_by(|a, b| b.total_cmp(a));
            sorted[k - 1]
        }
        _ => f64::NEG_INFINITY,
    };
    let top = logits[argmax];
    let weights: Vec<f64> =
        logits.iter().map(|&x| if x >= threshold { ((x - top) / options.temperature).exp() } else { 0.0 }).collect();
    let total: f64 = weights.iter().sum();
    let mut draw = rng.random::<f64>() * total;
    for (i, w) in weights.iter().enumerate() {
        if draw < *w {
            return Ok(i);
        }
        draw -= w;
    }
    Ok(argmax) // only reached through rounding at the very end of the range
}

impl Module for Gpt {
    /// [`forward_ids`](Gpt::forward_ids).
    fn forward(&self, xs: &Tensor) -> Result<Tensor> {
        self.forward_ids(xs)
    }

    fn named_parameters(&self) -> Vec<(String, Tensor)> {
        let mut named = prefixed("tok_emb", self.tok_emb.named_parameters());
        named.extend(prefixed("pos_emb", self.pos_emb.named_parameters()));
        for (i, block) in self.blocks.iter().enumerate() {
            named.extend(prefixed(&format!("blocks.{i}"), block.named_parameters()));
        }
        named.extend(prefixed("ln_f", self.ln_f.named_parameters()));
        named
    }

    fn set_training(&mut self, training: bool) {
        self.training = training;
        self.dropout.set_training(training);
        self.blocks.iter_mut().for_each(|b| b.set_training(training));
    }
}
