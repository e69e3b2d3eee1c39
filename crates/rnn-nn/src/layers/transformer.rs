//! The pre-norm transformer decoder block of GPT-2 (and nanoGPT):
//!
//! ```text
//! x = x + dropout(attn(ln_1(x)))              causal multi-head self-attention
//! x = x + dropout(proj(gelu(fc(ln_2(x)))))    MLP, hidden width 4 * d_model
//! ```
//!
//! GELU is the tanh approximation (GPT-2's `gelu_new`, PyTorch's `GELU(approximate="tanh")`),
//! fused into `fc` (`Linear::with_activation`). Parameter names follow the module layout:
//! `ln_1.weight`, `attn.in_proj_weight`, `attn.out_proj.weight`, `mlp.fc.weight`,
//! `mlp.proj.bias`, ...

use rnn_core::{Epilogue, Error, Result, Tensor};

use crate::init::bad_config;
use crate::{
    prefixed, AttentionMasks, Dropout, Init, KvCache, LayerNorm, Linear, Module, MultiHeadAttention, VarBuilder,
};

const NAME: &str = "TransformerBlock";

/// The eps of every LayerNorm of the block (PyTorch's default).
pub const LAYER_NORM_EPS: f64 = 1e-5;

/// The standard deviation of GPT-2's initialization of weights and embeddings.
pub const GPT2_INIT_STD: f64 = 0.02;

/// The shape of a block, and of the stack it belongs to (its depth scales the init).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct BlockConfig {
    pub d_model: usize,
    pub num_heads: usize,
    /// Dropout probability after the attention and after the MLP (training mode only).
    pub dropout: f64,
    /// Blocks in the stack: the residual projections start with std `0.02 / sqrt(2 * num_layers)`.
    pub num_layers: usize,
}

/// One pre-norm decoder block over `[batch, time, d_model]`; its attention is causal.
pub struct TransformerBlock {
    ln_1: LayerNorm,
    attn: MultiHeadAttention,
    ln_2: LayerNorm,
    fc: Linear,
    proj: Linear,
    dropout: Dropout,
}

impl TransformerBlock {
    /// GPT-2's initialization: LayerNorms ones / zeros, every weight N(0, 0.02) except the two
    /// projections back into the residual stream (`attn.out_proj`, `mlp.proj`), which get
    /// N(0, 0.02 / sqrt(2 * num_layers)) so the residual's variance does not grow with depth;
    /// biases zero.
    pub fn new(config: BlockConfig, vb: &mut VarBuilder) -> Result<Self> {
        let BlockConfig { d_model: d, num_heads, dropout, num_layers } = config;
        if d == 0 || num_heads == 0 || d % num_heads != 0 || num_layers == 0 {
            let msg = format!(
                "d_model {d} must be a positive multiple of num_heads {num_heads}; num_layers {num_layers} > 0"
            );
            return Err(bad_config(NAME, msg));
        }
        let weight = Init::Normal { mean: 0.0, std: GPT2_INIT_STD };
        let residual = Init::Normal { mean: 0.0, std: GPT2_INIT_STD / (2.0 * num_layers as f64).sqrt() };
        let ln_1 = LayerNorm::new(&[d], vb)?;
        let in_proj = (vb.var(&[3 * d, d], weight)?, vb.var(&[3 * d], Init::Zeros)?);
        let out_proj = Linear::from_tensors(vb.var(&[d, d], residual)?, Some(vb.var(&[d], Init::Zeros)?));
        let attn = MultiHeadAttention::from_tensors(in_proj.0, Some(in_proj.1), out_proj, num_heads)?;
        let ln_2 = LayerNorm::new(&[d], vb)?;
        let fc = Linear::from_tensors(vb.var(&[4 * d, d], weight)?, Some(vb.var(&[4 * d], Init::Zeros)?));
        let proj = Linear::from_tensors(vb.var(&[d, 4 * d], residual)?, Some(vb.var(&[d], Init::Zeros)?));
        Self::from_layers(ln_1, attn, ln_2, fc, proj, dropout)
    }

    /// A block from existing layers; `fc` gets the GELU (tanh) activation.
    pub fn from_layers(
        ln_1: LayerNorm,
        attn: MultiHeadAttention,
        ln_2: LayerNorm,
        fc: Linear,
        proj: Linear,
        dropout: f64,
    ) -> Result<Self> {
        let d = attn.embed_dim();
        let (fc_dims, proj_dims) = (fc.weight().dims().to_vec(), proj.weight().dims().to_vec());
        let norms_fit = ln_1.normalized_shape() == [d] && ln_2.normalized_shape() == [d];
        if !norms_fit || fc_dims.len() != 2 || fc_dims[1] != d || proj_dims != [d, fc_dims[0]] {
            let msg = format!(
                "layers disagree: d_model {d}, ln_1 {:?}, ln_2 {:?}, fc {fc_dims:?}, proj {proj_dims:?}",
                ln_1.normalized_shape(),
                ln_2.normalized_shape()
            );
            return Err(Error::invalid(NAME, msg));
        }
        let fc = fc.with_activation(Epilogue::Gelu);
        Ok(TransformerBlock { ln_1, attn, ln_2, fc, proj, dropout: Dropout::new(dropout)? })
    }

    /// A block from its parameters by name (the names of `named_parameters`), e.g. taken
    /// from a checkpoint or handed to a gradient check; `get` fails for a missing name.
    pub fn from_parameters(
        get: &mut dyn FnMut(&str) -> Result<Tensor>,
        num_heads: usize,
        dropout: f64,
    ) -> Result<Self> {
        let in_proj_weight = get("attn.in_proj_weight")?;
        let d = in_proj_weight.dims().get(1).copied().unwrap_or(0);
        let mut norm = |name: &str| -> Result<LayerNorm> {
            let (weight, bias) = (get(&format!("{name}.weight"))?, get(&format!("{name}.bias"))?);
            LayerNorm::from_tensors(&[d], Some(weight), Some(bias), LAYER_NORM_EPS)
        };
        let (ln_1, ln_2) = (norm("ln_1")?, norm("ln_2")?);
        let mut linear = |name: &str| -> Result<Linear> {
            Ok(Linear::from_tensors(get(&format!("{name}.weight"))?, Some(get(&format!("{name}.bias"))?)))
        };
        let (out_proj, fc, proj) = (linear("attn.out_proj")?, linear("mlp.fc")?, linear("mlp.proj")?);
        let attn =
            MultiHeadAttention::from_tensors(in_proj_weight, Some(get("attn.in_proj_bias")?), out_proj, num_heads)?;
        Self::from_layers(ln_1, attn, ln_2, fc, proj, dropout)
    }

    pub fn d_model(&self) -> usize {
        self.attn.embed_dim()
    }

    pub fn attention(&self) -> &MultiHeadAttention {
        &self.attn
    }

    /// [`forward`](Module::forward) of the positions that follow those in `cache` (this
    /// block's keys and values of the positions before), which it extends by them (see
    /// [`MultiHeadAttention::forward_cached`]).
    pub fn forward_cached(&self, xs: &Tensor, cache: &mut KvCache) -> Result<Tensor> {
        self.forward_attending(xs, |normed| self.attn.forward_cached(normed, cache))
    }

    /// The block around `attend`, which maps `ln_1(xs)` to the attention's output.
    fn forward_attending(&self, xs: &Tensor, attend: impl FnOnce(&Tensor) -> Result<Tensor>) -> Result<Tensor> {
        let attended = attend(&self.ln_1.forward(xs)?)?;
        let xs = xs.add(&self.dropout.forward(&attended)?)?;
        let hidden = self.fc.forward(&self.ln_2.forward(&xs)?)?;
        xs.add(&self.dropout.forward(&self.proj.forward(&hidden)?)?)
    }
}

impl Module for TransformerBlock {
    /// `xs` `[B, T, d_model]` -> `[B, T, d_model]`; position `t` only sees positions `<= t`.
    fn forward(&self, xs: &Tensor) -> Result<Tensor> {
        self.forward_attending(xs, |normed| self.attn.forward_with(normed, normed, normed, AttentionMasks::causal()))
    }

    fn named_parameters(&self) -> Vec<(String, Tensor)> {
        let mut named = prefixed("ln_1", self.ln_1.named_parameters());
        named.extend(prefixed("attn", self.attn.named_parameters()));
        named.extend(prefixed("ln_2", self.ln_2.named_parameters()));
        named.extend(prefixed("mlp.fc", self.fc.named_parameters()));
        named.extend(prefixed("mlp.proj", self.proj.named_parameters()));
        named
    }

    fn set_training(&mut self, training: bool) {
        self.dropout.set_training(training);
    }
}
