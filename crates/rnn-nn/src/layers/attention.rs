//! Multi-head attention, like `torch.nn.MultiheadAttention(batch_first=True)` with
//! `need_weights=False`: the same parameter names, shapes, initialization and masks.
//!
//! `out = out_proj(concat_h(softmax(Q_h K_hᵀ / sqrt(d) + mask) V_h))` with
//! `Q, K, V = q W_qᵀ + b_q, k W_kᵀ + b_k, v W_vᵀ + b_v` (the three stacked in
//! `in_proj_weight`), `d = embed_dim / num_heads`. Dropout on the attention weights is not
//! supported. The attention itself is `rnn_core::scaled_dot_product_attention` (the fused
//! kernel where a backend has one).
//!
//! Masks (all optional, combined):
//! - `causal`: query `i` attends to keys `j <= i` (PyTorch's `is_causal`); handled inside
//!   the fused attention, no mask tensor is made.
//! - `key_lengths` `[B]` (u32 or i64): batch element `b` attends to its first `lengths[b]`
//!   keys, also inside the fused attention. The lengths are never read back (no GPU sync):
//!   a length of 0 (or a negative one) gives that element zero attention rows, so its
//!   output is `out_proj`'s bias, as PyTorch's `scaled_dot_product_attention` gives zero
//!   rows for a boolean mask that hides every key.
//! - `attn_mask` `[L, S]`, `[B, L, S]` or `[B * num_heads, L, S]` (PyTorch's 3-D layout):
//!   u8, where **1 means "may not attend"** (PyTorch's bool mask), or float, added to the
//!   scores (use -inf to forbid).
//! - `key_padding_mask` `[B, S]`: u8 with **1 marking padding keys**, or float, added.
//!
//! With mask tensors, a query row whose keys are all masked has no defined softmax;
//! `torch.nn.MultiheadAttention` returns NaN for it. We return an `InvalidArgument` error
//! naming the row instead, so NaNs never reach the weights silently. Only masks that forbid
//! with -inf can do that: a large finite negative float mask gives a uniform row. That
//! check reads a `[B, H, L]` flag back, a sync point on a GPU; the `causal` flag and
//! `key_lengths` need none.

use rnn_core::{scaled_dot_product_attention, AttentionMask, DType, Device, Epilogue, Error, Result, Tensor};

use crate::{Init, Linear, Module, VarBuilder};

const NAME: &str = "MultiHeadAttention";

/// The optional masks of [`MultiHeadAttention::forward_with`] (see the module docs).
#[derive(Clone, Copy, Debug, Default)]
pub struct AttentionMasks<'a> {
    /// `[L, S]`, `[B, L, S]` or `[B * num_heads, L, S]`; u8 (1 = may not attend) or float (added).
    pub attn_mask: Option<&'a Tensor>,
    /// `[B, S]`; u8 (1 = padding key) or float (added).
    pub key_padding_mask: Option<&'a Tensor>,
    /// Query `i` attends to keys `j <= i` only.
    pub causal: bool,
    /// `[B]` valid keys per batch element (u32 or i64); 0 gives that element zero attention rows.
    pub key_lengths: Option<&'a Tensor>,
}

impl AttentionMasks<'_> {
    /// The causal mask of a decoder, without a mask tensor.
    pub fn causal() -> Self {
        AttentionMasks { causal: true, ..Default::default() }
    }
}

/// A u8 `[len, len]` mask with 1 above the diagonal: query `i` may attend to keys `0..=i`.
pub fn causal_mask(len: usize, device: Device) -> Result<Tensor> {
    let positions = Tensor::arange(0i64, len as i64, device)?;
    positions.unsqueeze(0)?.gt(&positions.unsqueeze(1)?)
}

/// The keys and values, split into heads (`[B, H, T, head_dim]`), of the `T` positions a
/// causal self-attention has read so far: [`MultiHeadAttention::forward_cached`] reads only
/// the positions after them and appends theirs, as a decoder does when it generates one
/// token at a time (like the `past_key_values` of Hugging Face models).
#[derive(Clone, Debug, Default)]
pub struct KvCache {
    keys_values: Option<(Tensor, Tensor)>,
}

impl KvCache {
    /// The number of positions held.
    pub fn len(&self) -> usize {
        self.keys_values.as_ref().map_or(0, |(k, _)| k.dims()[2])
    }
    pub fn is_empty(&self) -> bool {
        self.keys_values.is_none()
    }
    /// Forgets every position.
    pub fn clear(&mut self) {
        self.keys_values = None;
    }
}

/// Multi-head scaled dot-product attention over `[batch, length, embed_dim]` inputs.
pub struct MultiHeadAttention {
    in_proj_weight: Tensor,
    in_proj_bias: Option<Tensor>,
    out_proj: Linear,
    num_heads: usize,
}

impl MultiHeadAttention {
    /// With biases, initialized like PyTorch: `in_proj_weight` Xavier-uniform, `out_proj`
    /// weight U(±1/sqrt(embed_dim)), both biases zero.
    pub fn new(embed_dim: usize, num_heads: usize, vb: &mut VarBuilder) -> Result<Self> {
        Self::with_bias(embed_dim, num_heads, true, vb)
    }

    pub fn with_bias(embed_dim: usize, num_heads: usize, bias: bool, vb: &mut VarBuilder) -> Result<Self> {
        check_heads(embed_dim, num_heads)?;
        let e = embed_dim;
        let in_proj_weight = vb.var(&[3 * e, e], Init::XAVIER)?;
        let in_proj_bias = bias.then(|| vb.var(&[3 * e], Init::Zeros)).transpose()?;
        let out_weight = vb.var(&[e, e], Init::FanInUniform)?;
        let out_bias = bias.then(|| vb.var(&[e], Init::Zeros)).transpose()?;
        let out_proj = Linear::from_tensors(out_weight, out_bias);
        Ok(MultiHeadAttention { in_proj_weight, in_proj_bias, out_proj, num_heads })
    }

    /// A layer from existing tensors: `in_proj_weight` `[3E, E]`, `in_proj_bias` `[3E]`,
    /// `out_proj` with weight `[E, E]` and bias `[E]`.
    pub fn from_tensors(
        in_proj_weight: Tensor,
        in_proj_bias: Option<Tensor>,
        out_proj: Linear,
        num_heads: usize,
    ) -> Result<Self> {
        let e = match in_proj_weight.dims() {
            &[rows, e] if rows == 3 * e => e,
            other => return Err(Error::invalid(NAME, format!("in_proj_weight must be [3E, E], got {other:?}"))),
        };
        check_heads(e, num_heads)?;
        let dtype = in_proj_weight.dtype();
        let mut expected = vec![("in_proj_bias", in_proj_bias.as_ref(), vec![3 * e])];
        expected.push(("out_proj.weight", Some(out_proj.weight()), vec![e, e]));
        expected.push(("out_proj.bias", out_proj.bias(), vec![e]));
        for (what, tensor, dims) in expected {
            let Some(t) = tensor else { continue };
            if t.dims() != dims.as_slice() || t.dtype() != dtype {
                let msg = format!("{what} is {:?} {:?}, expected {dims:?} {dtype:?}", t.dims(), t.dtype());
                return Err(Error::invalid(NAME, msg));
            }
        }
        Ok(MultiHeadAttention { in_proj_weight, in_proj_bias, out_proj, num_heads })
    }

    pub fn embed_dim(&self) -> usize {
        self.in_proj_weight.dims()[1]
    }

    pub fn num_heads(&self) -> usize {
        self.num_heads
    }

    pub fn head_dim(&self) -> usize {
        self.embed_dim() / self.num_heads
    }

    /// Attention of queries `q` `[B, L, E]` over keys `k` and values `v` `[B, S, E]`, with an
    /// optional `attn_mask` (see the module docs); `[B, L, E]`.
    pub fn forward_qkv(&self, q: &Tensor, k: &Tensor, v: &Tensor, attn_mask: Option<&Tensor>) -> Result<Tensor> {
        self.forward_with(q, k, v, AttentionMasks { attn_mask, ..Default::default() })
    }

    /// Like [`forward_qkv`](Self::forward_qkv), with every kind of mask.
    pub fn forward_with(&self, q: &Tensor, k: &Tensor, v: &Tensor, masks: AttentionMasks) -> Result<Tensor> {
        let (batch, len_q, len_k) = self.check_inputs(q, k, v)?;
        let mask = self.fused_mask(&masks, batch, len_q, len_k, q.dtype())?;
        let (queries, keys, values) = self.project_inputs(q, k, v)?;
        let attended = scaled_dot_product_attention(&queries, &keys, &values, &mask, None)?;
        self.merge_heads(&attended)
    }

    /// Causal self-attention of `x` `[B, L, E]`, the `L` positions that follow the
    /// `cache.len()` positions in `cache`, which it then extends by them: new position `i`
    /// attends to every cached position and to new positions `0..=i`. The result equals the
    /// rows of `forward_with(.., AttentionMasks::causal())` over all the positions, at the cost
    /// of the new rows alone.
    pub fn forward_cached(&self, x: &Tensor, cache: &mut KvCache) -> Result<Tensor> {
        let (_, len, _) = self.check_inputs(x, x, x)?;
        let past = cache.len();
        let (queries, keys, values) = self.project_inputs(x, x, x)?;
        let (keys, values) = match &cache.keys_values {
            None => (keys, values),
            Some((old_k, old_v)) => {
                if old_k.dims()[..2] != keys.dims()[..2] || old_k.dims()[3] != keys.dims()[3] {
                    let msg = format!("the cache holds keys {:?}, x gives {:?}", old_k.dims(), keys.dims());
                    return Err(Error::invalid(NAME, msg));
                }
                (Tensor::cat(&[old_k.clone(), keys], 2)?, Tensor::cat(&[old_v.clone(), values], 2)?)
            }
        };
        let mask = match (past, len) {
            (0, _) => AttentionMask::causal(),
            // One new position sees every key.
            (_, 1) => AttentionMask::none(),
            // Causal aligned to the last key: new position i sees keys 0..=past + i.
            _ => {
                let square = causal_mask(past + len, x.device())?;
                let bias = to_additive(&square.narrow(0, past, len)?, "causal", x.dtype())?;
                AttentionMask { bias: Some(bias.reshape((1, 1, len, past + len))?), ..AttentionMask::none() }
            }
        };
        let attended = scaled_dot_product_attention(&queries, &keys, &values, &mask, None)?;
        cache.keys_values = Some((keys, values));
        self.merge_heads(&attended)
    }

    /// The heads' outputs `[B, H, L, d]` side by side, `[B, L, H * d]`, through `out_proj`.
    fn merge_heads(&self, attended: &Tensor) -> Result<Tensor> {
        let (batch, len) = (attended.dims()[0], attended.dims()[2]);
        self.out_proj.forward(&attended.transpose(1, 2)?.reshape((batch, len, self.embed_dim()))?)
    }

    /// The masks as the fused attention takes them. The causal flag and key lengths go in
    /// as they are (no tensor of scores' size), unless a mask tensor is given too: then the
    /// causal mask is folded into the additive mask, so one check sees every forbidden key.
    fn fused_mask(
        &self,
        masks: &AttentionMasks,
        batch: usize,
        len_q: usize,
        len_k: usize,
        dtype: DType,
    ) -> Result<AttentionMask> {
        let mut mask = AttentionMask::none();
        if let Some(lengths) = masks.key_lengths {
            check_key_lengths(lengths, batch)?;
            mask.key_lengths = Some(lengths.clone());
        }
        match self.additive_mask(masks, batch, len_q, len_k, dtype)? {
            None => mask.causal = masks.causal,
            Some(bias) => {
                let bias = match masks.causal {
                    true => {
                        // Top-left aligned like the fused mask: query i sees keys j <= i.
                        let square = causal_mask(len_q.max(len_k), bias.device())?;
                        let causal = square.narrow(0, 0, len_q)?.narrow(1, 0, len_k)?;
                        bias.add(&to_additive(&causal, "causal", dtype)?)?
                    }
                    false => bias,
                };
                check_no_empty_row(&bias)?;
                mask.bias = Some(bias);
            }
        }
        Ok(mask)
    }

    /// Checks shapes and dtypes; returns (batch, query length, key length).
    fn check_inputs(&self, q: &Tensor, k: &Tensor, v: &Tensor) -> Result<(usize, usize, usize)> {
        let e = self.embed_dim();
        let dtype = self.in_proj_weight.dtype();
        for (what, t) in [("query", q), ("key", k), ("value", v)] {
            if t.rank() != 3 || t.dims()[2] != e {
                let msg = format!("{what} must be [batch, length, embed_dim = {e}], got {:?}", t.dims());
                return Err(Error::invalid(NAME, msg));
            }
            if t.dtype() != dtype {
                return Err(Error::DTypeMismatch { op: NAME, lhs: t.dtype(), rhs: dtype });
            }
            if t.elem_count() == 0 {
                return Err(Error::EmptyTensor { op: NAME, shape: t.shape().clone() });
            }
        }
        if k.dims() != v.dims() || q.dims()[0] != k.dims()[0] {
            let msg = format!("query {:?}, key {:?} and value {:?} disagree", q.dims(), k.dims(), v.dims());
            return Err(Error::invalid(NAME, msg));
        }
        Ok((q.dims()[0], q.dims()[1], k.dims()[1]))
    }

    /// `x W_iᵀ + b_i` for the i-th third of the packed projection, over `[B, L, E]`.
    fn project(&self, x: &Tensor, third: usize) -> Result<Tensor> {
        let e = self.embed_dim();
        let (b, l) = (x.dims()[0], x.dims()[1]);
        let weight = self.in_proj_weight.narrow(0, third * e, e)?;
        let bias = self.in_proj_bias.as_ref().map(|bias| bias.narrow(0, third * e, e)).transpose()?;
        // One op: on the CPU the product, then the bias added in one pass over the output.
        let y = x.reshape((b * l, e))?.linear(&weight, bias.as_ref(), Epilogue::None)?;
        y.reshape((b, l, e))
    }

    /// Q, K, V split into heads, `[B, H, *, d]`: three products, also for self-attention.
    /// One product with the packed weight would give Q, K and V as strided thirds of one
    /// tensor, which cost a copy each to split into heads, and whose gradients the backward
    /// pads to the packed size and adds (three full-size tensors).
    fn project_inputs(&self, q: &Tensor, k: &Tensor, v: &Tensor) -> Result<(Tensor, Tensor, Tensor)> {
        let heads = |x: &Tensor, third: usize| self.split_heads(&self.project(x, third)?);
        Ok((heads(q, 0)?, heads(k, 1)?, heads(v, 2)?))
    }

    /// `[B, L, E]` -> `[B, H, L, d]`.
    fn split_heads(&self, x: &Tensor) -> Result<Tensor> {
        let (b, l) = (x.dims()[0], x.dims()[1]);
        x.reshape((b, l, self.num_heads, self.head_dim()))?.transpose(1, 2)
    }

    /// Both mask tensors as one float tensor to add to the `[B, H, L, S]` scores (it
    /// broadcasts as `[B or 1, H or 1, L, S]`).
    fn additive_mask(
        &self,
        masks: &AttentionMasks,
        batch: usize,
        len_q: usize,
        len_k: usize,
        dtype: DType,
    ) -> Result<Option<Tensor>> {
        let heads = self.num_heads;
        let attn = match masks.attn_mask {
            None => None,
            Some(m) => {
                let dims = match m.dims() {
                    &[l, s] if (l, s) == (len_q, len_k) => vec![1, 1, l, s],
                    &[n, l, s] if (l, s) == (len_q, len_k) && n == batch => vec![n, 1, l, s],
                    &[n, l, s] if (l, s) == (len_q, len_k) && n == batch * heads => vec![batch, heads, l, s],
                    other => {
                        let msg = format!(
                            "attn_mask must be [L, S], [B, L, S] or [B * num_heads, L, S] = [{len_q}, {len_k}], \
                             [{batch}, {len_q}, {len_k}] or [{}, {len_q}, {len_k}], got {other:?}",
                            batch * heads
                        );
                        return Err(Error::invalid(NAME, msg));
                    }
                };
                Some(to_additive(m, "attn_mask", dtype)?.reshape(dims)?)
            }
        };
        let padding = match masks.key_padding_mask {
            None => None,
            Some(m) if m.dims() == [batch, len_k] => {
                Some(to_additive(m, "key_padding_mask", dtype)?.reshape((batch, 1, 1, len_k))?)
            }
            Some(m) => {
                let msg = format!("key_padding_mask must be [B, S] = [{batch}, {len_k}], got {:?}", m.dims());
                return Err(Error::invalid(NAME, msg));
            }
        };
        Ok(match (attn, padding) {
            (Some(a), Some(p)) => Some(a.add(&p)?),
            (Some(m), None) | (None, Some(m)) => Some(m),
            (None, None) => None,
        })
    }
}

/// Key lengths are `[B]` integers. Only their shape and dtype are checked: their values
/// stay where they are (on a GPU, reading them would wait for the device).
fn check_key_lengths(lengths: &Tensor, batch: usize) -> Result<()> {
    if lengths.dims() != [batch] || lengths.dtype().is_float() {
        let msg =
            format!("key_lengths must be [B] = [{batch}] integers, got {:?} {:?}", lengths.dims(), lengths.dtype());
        return Err(Error::invalid(NAME, msg));
    }
    Ok(())
}

fn check_heads(embed_dim: usize, num_heads: usize) -> Result<()> {
    if embed_dim == 0 || num_heads == 0 || embed_dim % num_heads != 0 {
        let msg = format!("embed_dim {embed_dim} must be > 0 and divisible by num_heads {num_heads} (> 0)");
        return Err(crate::init::bad_config(NAME, msg));
    }
    Ok(())
}

/// A u8 mask (1 = forbidden) becomes 0 / -inf; a float mask is used as given.
fn to_additive(mask: &Tensor, what: &str, dtype: DType) -> Result<Tensor> {
    match mask.dtype() {
        DType::U8 => {
            let forbidden = Tensor::full(f64::NEG_INFINITY, (), dtype, mask.device())?;
            mask.where_cond(&forbidden, &Tensor::zeros((), dtype, mask.device())?)
        }
        d if d.is_float() => mask.to_dtype(dtype),
        d => {
            let msg = format!("{what} must be u8 (1 = masked) or float (added to the scores), got {d:?}");
            Err(Error::invalid(NAME, msg))
        }
    }
}

/// Errors when a query row of the additive mask `[b, h, L, S]` is -inf everywhere: its
/// softmax would be 0/0.
fn check_no_empty_row(mask: &Tensor) -> Result<()> {
    let empty = mask.max(3)?.eq_scalar(f64::NEG_INFINITY)?;
    let flags = empty.to_vec::<u8>()?;
    let Some(flat) = flags.iter().position(|&f| f != 0) else { return Ok(()) };
    let (heads, rows) = (empty.dims()[1], empty.dims()[2]);
    let (b, h, l) = (flat / (heads * rows), flat / rows % heads, flat % rows);
    let msg = format!(
        "the masks forbid every key for query {l} (batch {b}, head {h}); its softmax is undefined \
         (PyTorch would return NaN). Let each query see at least one key."
    );
    Err(Error::invalid(NAME, msg))
}

impl Module for MultiHeadAttention {
    /// Self-attention of `xs` `[B, L, E]` without masks.
    fn forward(&self, xs: &Tensor) -> Result<Tensor> {
        self.forward_with(xs, xs, xs, AttentionMasks::default())
    }

    /// `in_proj_weight`, `in_proj_bias`, `out_proj.weight`, `out_proj.bias`.
    fn named_parameters(&self) -> Vec<(String, Tensor)> {
        let mut named = vec![("in_proj_weight".to_string(), self.in_proj_weight.clone())];
        named.extend(self.in_proj_bias.iter().map(|b| ("in_proj_bias".to_string(), b.clone())));
        named.extend(crate::prefixed("out_proj", self.out_proj.named_parameters()));
        named
    }
}
