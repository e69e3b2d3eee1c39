//! TransformerBlock and Gpt on every device: forward against an f64 composition written here
//! from plain tensor ops, finite-difference gradient checks (CPU) and the CPU's f64 gradients
//! on other devices, the causal property, weight tying, overfitting a short text, the
//! key-value cache against the full forward, generation and error paths.

use std::collections::HashMap;

use rnn_core::{no_grad, DType, Device, Error, Result, Tensor};
use rnn_nn::{
    sample_from_logits, AdamConfig, AdamW, AttentionMasks, Gpt, GptConfig, KvCache, Module, Optimizer, SamplingOptions,
    TransformerBlock, VarBuilder,
};
use rnn_testutil::{assert_close_on, check_gradients, expect_err, rand64, test_device, to, tolerance, widest_float};

const CPU: Device = Device::Cpu;

/// The parameter names of a block, in the order the tests pass them around.
const BLOCK_NAMES: [&str; 12] = [
    "ln_1.weight",
    "ln_1.bias",
    "attn.in_proj_weight",
    "attn.in_proj_bias",
    "attn.out_proj.weight",
    "attn.out_proj.bias",
    "ln_2.weight",
    "ln_2.bias",
    "mlp.fc.weight",
    "mlp.fc.bias",
    "mlp.proj.weight",
    "mlp.proj.bias",
];

/// Random f64 CPU parameters of a block of width `d`, in `BLOCK_NAMES` order. LayerNorm
/// weights are near 1 so the normalization is not washed out.
fn block_params(seed: u64, d: usize) -> Result<Vec<Tensor>> {
    let shapes = [vec![d], vec![d], vec![3 * d, d], vec![3 * d], vec![d, d], vec![d]];
    let mut shapes = shapes.to_vec();
    shapes.extend([vec![d], vec![d], vec![4 * d, d], vec![4 * d], vec![d, 4 * d], vec![d]]);
    let each = shapes.iter().enumerate().map(|(i, s)| {
        let t = rand64(seed + i as u64, s)?;
        if BLOCK_NAMES[i].starts_with("ln") && BLOCK_NAMES[i].ends_with("weight") {
            t.mul_scalar(0.3)?.add_scalar(1.0)
        } else {
            Ok(t)
        }
    });
    each.collect()
}

/// A lookup by name over `(names, tensors)`, as `from_parameters` wants it.
fn lookup<'a>(names: &'a [String], tensors: &'a [Tensor]) -> impl FnMut(&str) -> Result<Tensor> + 'a {
    let map: HashMap<&str, &Tensor> = names.iter().map(String::as_str).zip(tensors).collect();
    move |name| map.get(name).map(|t| (*t).clone()).ok_or_else(|| Error::Msg(format!("no parameter {name}")))
}

fn block_from(params: &[Tensor], heads: usize) -> Result<TransformerBlock> {
    let names: Vec<String> = BLOCK_NAMES.iter().map(|s| s.to_string()).collect();
    let mut get = lookup(&names, params);
    let block = TransformerBlock::from_parameters(&mut get, heads, 0.0);
    drop(get);
    block
}

// ---------------------------------------------------------------- reference composition

fn layer_norm_ref(x: &Tensor, w: &Tensor, b: &Tensor) -> Result<Tensor> {
    let last = x.rank() - 1;
    let centered = x.sub(&x.mean_keepdim(last)?)?;
    let var = centered.sqr()?.mean_keepdim(last)?;
    centered.div(&var.add_scalar(1e-5)?.sqrt()?)?.mul(w)?.add(b)
}

fn linear_ref(x: &Tensor, w: &Tensor, b: Option<&Tensor>) -> Result<Tensor> {
    let y = x.matmul(&w.t()?.unsqueeze(0)?.broadcast_as(vec![x.dims()[0], w.dims()[1], w.dims()[0]])?)?;
    match b {
        Some(b) => y.add(b),
        None => Ok(y),
    }
}

/// GPT-2's GELU: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).
fn gelu_tanh_ref(x: &Tensor) -> Result<Tensor> {
    let inner = x.add(&x.sqr()?.mul(x)?.mul_scalar(0.044715)?)?.mul_scalar((2.0 / std::f64::consts::PI).sqrt())?;
    x.mul(&inner.tanh()?.add_scalar(1.0)?)?.mul_scalar(0.5)
}

/// Causal multi-head self-attention with an explicit -inf mask and softmax.
fn causal_attention_ref(x: &Tensor, p: &[Tensor], heads: usize) -> Result<Tensor> {
    let (b, t, d) = (x.dims()[0], x.dims()[1], x.dims()[2]);
    let qkv = linear_ref(x, &p[0], Some(&p[1]))?;
    let split = |i: usize| qkv.narrow(2, i * d, d)?.reshape((b, t, heads, d / heads))?.transpose(1, 2);
    let (q, k, v) = (split(0)?, split(1)?, split(2)?);
    let scores = q.matmul(&k.transpose(2, 3)?)?.mul_scalar(1.0 / ((d / heads) as f64).sqrt())?;
    let mut mask = vec![0.0; t * t];
    for i in 0..t {
        for j in i + 1..t {
            mask[i * t + j] = f64::NEG_INFINITY;
        }
    }
    let mask = Tensor::from_vec(mask, (t, t), x.device())?;
    let attended = scores.add(&mask)?.softmax(3)?.matmul(&v)?;
    linear_ref(&attended.transpose(1, 2)?.reshape((b, t, d))?, &p[2], Some(&p[3]))
}

/// The block written out in tensor ops, parameters in `BLOCK_NAMES` order.
fn block_ref(x: &Tensor, p: &[Tensor], heads: usize) -> Result<Tensor> {
    let x = x.add(&causal_attention_ref(&layer_norm_ref(x, &p[0], &p[1])?, &p[2..6], heads)?)?;
    let hidden = gelu_tanh_ref(&linear_ref(&layer_norm_ref(&x, &p[6], &p[7])?, &p[8], Some(&p[9]))?)?;
    x.add(&linear_ref(&hidden, &p[10], Some(&p[11]))?)
}

// ---------------------------------------------------------------- the block

fn block_matches_composition_and_gradients(device: Device) -> Result<()> {
    let (d, heads) = (4, 2);
    let mut inputs = vec![rand64(1, &[2, 3, d])?];
    inputs.extend(block_params(10, d)?);
    let ours = block_from(&inputs[1..], heads)?.forward(&inputs[0])?;
    let want = block_ref(&inputs[0], &inputs[1..], heads)?;
    assert_close_on("block vs composition", &ours, &want, 1e-12);
    // Finite differences on the CPU; other devices against the CPU's f64 gradients.
    check_gradients(device, &inputs, |xs| block_from(&xs[1..], heads)?.forward(&xs[0]))
}
test_device!(block_matches_composition_and_gradients_test, block_matches_composition_and_gradients);

fn block_init_and_names(device: Device) -> Result<()> {
    let mut vb = VarBuilder::new(device, widest_float(device), 3);
    let config = rnn_nn::BlockConfig { d_model: 16, num_heads: 4, dropout: 0.1, num_layers: 8 };
    let block = TransformerBlock::new(config, &mut vb)?;
    let named = block.named_parameters();
    let names: Vec<&str> = named.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(names, BLOCK_NAMES);
    assert_eq!(block.num_parameters(), 12 * 16 * 16 + 13 * 16);
    let std = |name: &str| -> Result<f64> {
        let t = &named.iter().find(|(n, _)| n == name).expect("named").1;
        t.to_dtype(DType::F32)?.sqr()?.mean_all()?.sqrt()?.to_f64_scalar()
    };
    // 0.02 for weights, 0.02 / sqrt(2 * 8) = 0.005 for the residual projections.
    assert!((std("mlp.fc.weight")? - 0.02).abs() < 0.003, "fc std {}", std("mlp.fc.weight")?);
    assert!((std("mlp.proj.weight")? - 0.005).abs() < 0.001, "proj std {}", std("mlp.proj.weight")?);
    assert_eq!(std("attn.in_proj_bias")?, 0.0);
    expect_err(TransformerBlock::new(rnn_nn::BlockConfig { num_heads: 3, ..config }, &mut vb), "multiple");
    Ok(())
}
test_device!(block_init_and_names_test, block_init_and_names);

// ---------------------------------------------------------------- MultiHeadAttention options

/// The fused causal flag and key lengths give what the equivalent mask tensors give, alone
/// and combined with a mask tensor; a length of 0 (or below) gives zero attention rows.
fn attention_causal_and_key_length_options(device: Device) -> Result<()> {
    let dtype = widest_float(device);
    let p: Vec<Tensor> = block_params(30, 4)?[2..6].iter().map(|t| to(t, dtype, device)).collect::<Result<_>>()?;
    let out_proj = rnn_nn::Linear::from_tensors(p[2].clone(), Some(p[3].clone()));
    let attn = rnn_nn::MultiHeadAttention::from_tensors(p[0].clone(), Some(p[1].clone()), out_proj, 2)?;
    let x = to(&rand64(31, &[2, 3, 4])?, dtype, device)?;
    let tol = tolerance(dtype).op;
    let causal_u8 = rnn_nn::causal_mask(3, device)?;
    let with_tensor = attn.forward_qkv(&x, &x, &x, Some(&causal_u8))?;
    assert_close_on("causal flag", &attn.forward_with(&x, &x, &x, AttentionMasks::causal())?, &with_tensor, tol);
    let lengths = Tensor::from_vec(vec![3u32, 2], 2, device)?;
    let padding = Tensor::from_vec(vec![0u8, 0, 0, 0, 0, 1], (2, 3), device)?;
    let by_lengths = AttentionMasks { key_lengths: Some(&lengths), causal: true, ..Default::default() };
    let by_tensors =
        AttentionMasks { attn_mask: Some(&causal_u8), key_padding_mask: Some(&padding), ..Default::default() };
    let want = attn.forward_with(&x, &x, &x, by_tensors)?;
    assert_close_on("key lengths", &attn.forward_with(&x, &x, &x, by_lengths)?, &want, tol);
    let mixed = AttentionMasks { key_padding_mask: Some(&padding), causal: true, ..Default::default() };
    assert_close_on("causal flag + padding tensor", &attn.forward_with(&x, &x, &x, mixed)?, &want, tol);
    // A length of 0, or a negative i64 one, leaves batch 1 no key: zero attention rows, so
    // its output is out_proj's bias; batch 0 (every key) is as without a mask.
    let unmasked = attn.forward_with(&x, &x, &x, AttentionMasks::default())?;
    let bias_rows = p[3].reshape((1, 4))?.broadcast_as((3, 4))?;
    for empty in [Tensor::from_vec(vec![3u32, 0], 2, device)?, Tensor::from_vec(vec![7i64, -2], 2, device)?] {
        let masks = AttentionMasks { key_lengths: Some(&empty), ..Default::default() };
        let out = attn.forward_with(&x, &x, &x, masks)?;
        assert_close_on("length 0: bias rows", &out.narrow(0, 1, 1)?.squeeze(0)?, &bias_rows, tol);
        assert_close_on("full length", &out.narrow(0, 0, 1)?, &unmasked.narrow(0, 0, 1)?, tol);
    }
    let float_lengths = Tensor::from_vec(vec![3.0f32, 1.0], 2, device)?;
    let masks = AttentionMasks { key_lengths: Some(&float_lengths), ..Default::default() };
    expect_err(attn.forward_with(&x, &x, &x, masks), "integers");
    Ok(())
}
test_device!(attention_causal_and_key_length_options_test, attention_causal_and_key_length_options);

// ---------------------------------------------------------------- GPT

fn tiny_config() -> GptConfig {
    GptConfig { vocab_size: 5, context_length: 4, d_model: 4, num_heads: 2, num_layers: 2, dropout: 0.0 }
}

/// Parameter names and random f64 CPU values of a tiny GPT.
fn gpt_params(config: &GptConfig, seed: u64) -> Result<(Vec<String>, Vec<Tensor>)> {
    let d = config.d_model;
    let mut names = vec!["tok_emb.weight".to_string(), "pos_emb.weight".to_string()];
    let mut values = vec![rand64(seed, &[config.vocab_size, d])?, rand64(seed + 1, &[config.context_length, d])?];
    for i in 0..config.num_layers {
        names.extend(BLOCK_NAMES.iter().map(|n| format!("blocks.{i}.{n}")));
        values.extend(block_params(seed + 100 * (i as u64 + 1), d)?);
    }
    names.extend(["ln_f.weight".to_string(), "ln_f.bias".to_string()]);
    values.extend([rand64(seed + 7, &[d])?.mul_scalar(0.3)?.add_scalar(1.0)?, rand64(seed + 8, &[d])?]);
    Ok((names, values))
}

fn gpt_from(config: GptConfig, names: &[String], values: &[Tensor]) -> Result<Gpt> {
    Gpt::from_parameters(config, &mut lookup(names, values))
}

/// The whole model written out: embeddings, blocks, final norm, logits against tok_emb.
fn gpt_ref(ids: &Tensor, values: &[Tensor], config: &GptConfig) -> Result<Tensor> {
    let t = ids.dims()[1];
    let mut x = values[0].index_select(&ids.flatten_all()?, 0)?.reshape((ids.dims()[0], t, config.d_model))?;
    x = x.add(&values[1].narrow(0, 0, t)?)?;
    for i in 0..config.num_layers {
        x = block_ref(&x, &values[2 + 12 * i..14 + 12 * i], config.num_heads)?;
    }
    let n = values.len();
    linear_ref(&layer_norm_ref(&x, &values[n - 2], &values[n - 1])?, &values[0], None)
}

fn gpt_matches_composition_and_gradients(device: Device) -> Result<()> {
    let config = tiny_config();
    let (names, values) = gpt_params(&config, 20)?;
    let ids = Tensor::from_vec(vec![0i64, 3, 4, 1, 2, 2, 0, 4], (2, 4), CPU)?;
    let ours = gpt_from(config, &names, &values)?.forward(&ids)?;
    assert_eq!(ours.dims(), &[2, 4, 5]);
    assert_close_on("GPT vs composition", &ours, &gpt_ref(&ids, &values, &config)?, 1e-12);
    // The gradient of tok_emb sums its two uses (lookup and head): finite differences see both.
    check_gradients(device, &values, |xs| {
        let model = gpt_from(config, &names, xs)?;
        model.forward(&ids.to_device(xs[0].device())?)
    })
}
test_device!(gpt_matches_composition_and_gradients_test, gpt_matches_composition_and_gradients);

fn gpt_is_causal(device: Device) -> Result<()> {
    let mut vb = VarBuilder::new(device, widest_float(device), 5);
    let config = GptConfig { context_length: 6, ..tiny_config() };
    let model = Gpt::new(config, &mut vb)?;
    let logits = |ids: Vec<u32>| model.forward(&Tensor::from_vec(ids, (1, 6), device)?);
    let base = logits(vec![1, 2, 3, 4, 0, 1])?;
    let changed = logits(vec![1, 2, 3, 0, 0, 1])?; // position 3 differs
    let (dtype, tol) = (base.dtype(), tolerance(base.dtype()).op);
    assert_close_on("logits before the change", &changed.narrow(1, 0, 3)?, &base.narrow(1, 0, 3)?, tol);
    let later_diff = changed.narrow(1, 3, 3)?.sub(&base.narrow(1, 3, 3)?)?.abs()?.max_all()?;
    assert!(later_diff.to_f64_scalar()? > 1e-6, "a later logit must change ({dtype:?})");
    Ok(())
}
test_device!(gpt_is_causal_test, gpt_is_causal);

fn gpt_ties_head_to_token_embedding(device: Device) -> Result<()> {
    let mut vb = VarBuilder::new(device, widest_float(device), 6);
    let config = tiny_config();
    let model = Gpt::new(config, &mut vb)?;
    let named = model.named_parameters();
    assert_eq!(named.iter().filter(|(n, _)| n.contains("tok_emb") || n.contains("head")).count(), 1);
    let (d, v, c) = (config.d_model, config.vocab_size, config.context_length);
    let per_block = 12 * d * d + 13 * d;
    assert_eq!(model.num_parameters(), v * d + c * d + config.num_layers * per_block + 2 * d);
    // Token 4 appears only as a target, never as an input: its embedding row still gets a
    // gradient, through the head.
    let ids = Tensor::from_vec(vec![0u32, 1, 2, 3], (1, 4), device)?;
    let targets = Tensor::from_vec(vec![1u32, 2, 3, 4], (1, 4), device)?;
    let grads = model.loss(&ids, &targets)?.backward()?;
    let grad = grads.get(model.token_embedding()).expect("tok_emb has a gradient");
    let row4 = grad.narrow(0, 4, 1)?.abs()?.sum_all()?.to_f64_scalar()?;
    assert!(row4 > 0.0, "the head's use of tok_emb must reach its gradient");
    Ok(())
}
test_device!(gpt_ties_head_to_token_embedding_test, gpt_ties_head_to_token_embedding);

/// Ids of `text` over its sorted characters.
fn encode(text: &str) -> (Vec<char>, Vec<u32>) {
    let mut chars: Vec<char> = text.chars().collect();
    chars.sort_unstable();
    chars.dedup();
    let ids = text.chars().map(|c| chars.binary_search(&c).expect("in vocab") as u32).collect();
    (chars, ids)
}

fn gpt_overfits_a_short_text(device: Device) -> Result<()> {
    let (vocab, ids) = encode("hello world, hello rust. ");
    let config = GptConfig {
        vocab_size: vocab.len(),
        context_length: 8,
        d_model: 16,
        num_heads: 2,
        num_layers: 1,
        dropout: 0.0,
    };
    let mut vb = VarBuilder::new(device, DType::F32, 7);
    let mut model = Gpt::new(config, &mut vb)?;
    // Every window of 8 characters with its next-character targets, as one batch.
    let windows: Vec<usize> = (0..ids.len() - 8).collect();
    let gather =
        |shift: usize| -> Vec<u32> { windows.iter().flat_map(|&s| ids[s + shift..s + shift + 8].to_vec()).collect() };
    let x = Tensor::from_vec(gather(0), (windows.len(), 8), device)?;
    let y = Tensor::from_vec(gather(1), (windows.len(), 8), device)?;
    let mut opt = AdamW::new(model.parameters(), AdamConfig { lr: 1e-2, ..AdamConfig::adamw() })?;
    let first = model.loss(&x, &y)?.to_f64_scalar()?;
    for _ in 0..60 {
        let loss = model.loss(&x, &y)?;
        opt.step(&loss.backward()?)?;
    }
    let last = no_grad(|| model.loss(&x, &y))?.to_f64_scalar()?;
    assert!(first > 2.0 && last < 0.5, "loss {first} -> {last}");
    // Greedy decoding reproduces the memorized text.
    let options = SamplingOptions { temperature: 1.0, top_k: Some(1), seed: 0 };
    let new = model.generate(&ids[..8], 8, &options)?;
    let text: String = new.iter().map(|&i| vocab[i as usize]).collect();
    assert_eq!(text, "rld, hel", "greedy continuation of 'hello wo'");
    Ok(())
}
test_device!(gpt_overfits_a_short_text_test, gpt_overfits_a_short_text);

fn generate_is_deterministic_and_checked(device: Device) -> Result<()> {
    let mut vb = VarBuilder::new(device, widest_float(device), 9);
    let mut model = Gpt::new(GptConfig { dropout: 0.2, ..tiny_config() }, &mut vb)?;
    let greedy = |seed| SamplingOptions { temperature: 0.7, top_k: Some(1), seed };
    // Longer than the context: the model reads the last 4 ids.
    let a = model.generate(&[1, 2], 7, &greedy(1))?;
    assert_eq!(a, model.generate(&[1, 2], 7, &greedy(99))?, "top_k = 1 ignores the seed");
    assert_eq!(a.len(), 7);
    let mut sampled = |seed| model.generate(&[3], 10, &SamplingOptions { temperature: 1.5, top_k: Some(3), seed });
    let first = sampled(5)?;
    assert_eq!(first, sampled(5)?, "same seed, same text");
    assert!(first.iter().all(|&id| id < 5));
    // generate leaves the model in training mode (dropout on) as it found it.
    assert_eq!(model.generate(&[0], 0, &greedy(0))?, Vec::<u32>::new());
    let bad = |t: f64, k: Option<usize>| SamplingOptions { temperature: t, top_k: k, seed: 0 };
    expect_err(model.generate(&[1], 3, &bad(0.0, None)), "temperature must be > 0");
    expect_err(model.generate(&[1], 3, &bad(-1.0, None)), "temperature must be > 0");
    expect_err(model.generate(&[1], 3, &bad(f64::NAN, None)), "temperature must be > 0");
    expect_err(model.generate(&[1], 3, &bad(1.0, Some(0))), "top_k must be at least 1");
    expect_err(model.generate(&[], 3, &greedy(0)), "at least one token");
    expect_err(model.generate(&[5], 3, &greedy(0)), "outside the vocabulary");
    Ok(())
}
test_device!(generate_is_deterministic_and_checked_test, generate_is_deterministic_and_checked);

/// Logits read in pieces through key-value caches (a prompt of 3, then 1, 2 and 1 more
/// positions, the third piece under the causal mask aligned to the cached keys) equal the
/// full forward's rows; bad caches are errors that leave the caches as they were, also when
/// a later block fails after an earlier one extended its cache.
fn cached_forward_matches_the_full_forward(device: Device) -> Result<()> {
    let mut vb = VarBuilder::new(device, widest_float(device), 12);
    let config = GptConfig { context_length: 7, vocab_size: 6, ..tiny_config() };
    let model = Gpt::new(config, &mut vb)?;
    let ids: Vec<u32> = vec![1, 5, 2, 0, 3, 3, 4, 2, 1, 0, 5, 4, 1, 2];
    let ids = Tensor::from_vec(ids, (2, 7), device)?;
    let full = model.forward_ids(&ids)?;
    let mut caches = vec![KvCache::default(); config.num_layers];
    let mut pieces = Vec::new();
    for (start, len) in [(0, 3), (3, 1), (4, 2), (6, 1)] {
        pieces.push(model.forward_cached(&ids.narrow(1, start, len)?, &mut caches)?);
        assert!(caches.iter().all(|c| c.len() == start + len));
    }
    let tol = tolerance(full.dtype()).op;
    assert_close_on("cached logits vs full forward", &Tensor::cat(&pieces, 1)?, &full, tol);
    // Errors, each leaving the caches at 7 positions.
    expect_err(model.forward_cached(&ids.narrow(1, 0, 1)?, &mut caches), "fit the context length 7");
    let mut short = caches[..1].to_vec();
    expect_err(model.forward_cached(&ids.narrow(1, 0, 1)?, &mut short), "1 caches given");
    let mut fresh = vec![KvCache::default(); config.num_layers];
    model.forward_cached(&ids.narrow(1, 0, 2)?, &mut fresh)?;
    expect_err(model.forward_cached(&ids.narrow(0, 0, 1)?.narrow(1, 2, 1)?, &mut fresh), "the cache holds keys");
    assert!(fresh.iter().all(|c| c.len() == 2) && caches.iter().all(|c| c.len() == 7));
    // Block 1's cache is of batch 1: block 0 has extended its cache when block 1 fails, and
    // gets its two positions back.
    let mut one = vec![KvCache::default(); config.num_layers];
    model.forward_cached(&ids.narrow(0, 0, 1)?.narrow(1, 0, 2)?, &mut one)?;
    let mut mixed = vec![fresh[0].clone(), one[1].clone()];
    expect_err(model.forward_cached(&ids.narrow(1, 2, 1)?, &mut mixed), "the cache holds keys");
    assert_eq!(mixed.iter().map(KvCache::len).collect::<Vec<_>>(), [2, 2]);
    fresh.iter_mut().for_each(KvCache::clear);
    assert!(fresh.iter().all(KvCache::is_empty));
    Ok(())
}
test_device!(cached_forward_matches_the_full_forward_test, cached_forward_matches_the_full_forward);

/// Greedy generation, which reads through the cache while the ids fit the context, picks
/// the ids that a loop over whole windows picks, before and after the window starts to slide.
fn generate_with_the_cache_picks_what_whole_windows_pick(device: Device) -> Result<()> {
    let mut vb = VarBuilder::new(device, widest_float(device), 13);
    let config = GptConfig { context_length: 6, vocab_size: 6, ..tiny_config() };
    let mut model = Gpt::new(config, &mut vb)?;
    let greedy = SamplingOptions { temperature: 1.0, top_k: Some(1), seed: 0 };
    let (prompt, new) = ([2u32, 4], 9);
    let mut ids = prompt.to_vec();
    for _ in 0..new {
        let window = &ids[ids.len().saturating_sub(config.context_length)..];
        let logits = model.forward_ids(&Tensor::from_vec(window.to_vec(), (1, window.len()), device)?)?;
        let last = logits.narrow(1, window.len() - 1, 1)?.flatten_all()?.to_f64_vec()?;
        ids.push(sample_from_logits(&last, &greedy, &mut rnn_testutil::rng(0))? as u32);
    }
    assert_eq!(model.generate(&prompt, new, &greedy)?, ids[prompt.len()..]);
    Ok(())
}
test_device!(
    generate_with_the_cache_picks_what_whole_windows_pick_test,
    generate_with_the_cache_picks_what_whole_windows_pick
);

#[test]
fn top_k_sampling_keeps_only_the_k_largest() -> Result<()> {
    let logits = [0.0, 3.0, -1.0, 2.9, 1.0];
    let mut rng = rnn_testutil::rng(1);
    let options = SamplingOptions { temperature: 1.0, top_k: Some(2), seed: 0 };
    let mut seen = [0usize; 5];
    for _ in 0..400 {
        seen[sample_from_logits(&logits, &options, &mut rng)?] += 1;
    }
    assert_eq!(seen[0] + seen[2] + seen[4], 0, "only ids 1 and 3 may be drawn: {seen:?}");
    assert!(seen[1] > 150 && seen[3] > 150, "both top ids are drawn about equally: {seen:?}");
    // A low temperature concentrates the draws on the largest logit.
    let cold = SamplingOptions { temperature: 0.01, top_k: None, seed: 0 };
    assert!((0..50).all(|_| sample_from_logits(&logits, &cold, &mut rng).ok() == Some(1)));
    expect_err(sample_from_logits(&[f64::NAN, 1.0], &options, &mut rng), "NaN");
    Ok(())
}

fn gpt_input_errors(device: Device) -> Result<()> {
    let mut vb = VarBuilder::new(device, widest_float(device), 4);
    let model = Gpt::new(tiny_config(), &mut vb)?;
    let ids = |t: usize| Tensor::zeros((1, t), DType::U32, device);
    expect_err(model.forward(&ids(5)?), "context_length 4");
    expect_err(model.forward(&Tensor::zeros((1, 2), widest_float(device), device)?), "must be integer");
    expect_err(model.loss(&ids(3)?, &ids(2)?), "must have the shape of ids");
    let bad = |c: GptConfig| Gpt::new(c, &mut VarBuilder::new(device, DType::F32, 0)).map(|_| ());
    expect_err(bad(GptConfig { vocab_size: 0, ..tiny_config() }), "vocab_size must be > 0");
    expect_err(bad(GptConfig { num_heads: 3, ..tiny_config() }), "multiple of num_heads");
    expect_err(bad(GptConfig { dropout: 1.0, ..tiny_config() }), "dropout");
    let (names, values) = gpt_params(&tiny_config(), 1)?;
    let values: Vec<Tensor> = values.iter().map(|t| to(t, DType::F32, device)).collect::<Result<_>>()?;
    expect_err(gpt_from(GptConfig { vocab_size: 6, ..tiny_config() }, &names, &values), "tok_emb.weight is [5, 4]");
    expect_err(gpt_from(tiny_config(), &names[..10], &values[..10]), "no parameter");
    Ok(())
}
test_device!(gpt_input_errors_test, gpt_input_errors);
