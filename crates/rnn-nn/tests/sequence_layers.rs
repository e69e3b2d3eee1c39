//! Rnn, Lstm, Gru, MultiHeadAttention and the losses: finite-difference gradient checks
//! w.r.t. inputs, states and every parameter, error paths, and PyTorch golden values
//! (`golden/sequence.json`, from `golden/make_sequence_golden.py`).

use rand::rngs::StdRng;
use rand::SeedableRng;
use rnn_core::gradcheck::GradCheck;
use rnn_core::{DType, Device, Error, Result, Tensor};
use rnn_nn::loss::{
    binary_cross_entropy, binary_cross_entropy_with, binary_cross_entropy_with_logits,
    binary_cross_entropy_with_logits_with, cross_entropy_with, huber_loss, huber_loss_with, l1_loss, l1_loss_with,
    mse_with, nll_loss, nll_loss_with, CrossEntropyOptions, Loss, Reduction,
};
use rnn_nn::{
    causal_mask, cross_entropy, mse, AttentionMasks, Gru, Linear, Lstm, Module, MultiHeadAttention, RecurrentConfig,
    RecurrentWeights, Rnn, RnnNonlinearity, VarBuilder,
};
use serde_json::Value;

const CPU: Device = Device::Cpu;

/// A uniform f64 tensor in [lo, hi) from a local generator.
fn uniform(seed: u64, shape: &[usize], lo: f64, hi: f64) -> Result<Tensor> {
    Tensor::rand_with(&mut StdRng::seed_from_u64(seed), lo, hi, shape, DType::F64, CPU)
}

fn rand64(seed: u64, shape: &[usize]) -> Result<Tensor> {
    uniform(seed, shape, -1.0, 1.0)
}

/// Runs a gradient check and fails the test with its message when it does not pass.
fn gradcheck(inputs: &[Tensor], f: impl Fn(&[Tensor]) -> Result<Tensor>) -> Result<()> {
    let worst = GradCheck::default().run(inputs, f)?;
    assert!(worst < 1e-5, "gradcheck error {worst}");
    Ok(())
}

/// Several outputs as one flat tensor, so one gradient check covers them all.
fn concat(outputs: &[Tensor]) -> Result<Tensor> {
    let flat: Vec<Tensor> = outputs.iter().map(|t| t.flatten_all()).collect::<Result<_>>()?;
    Tensor::cat(&flat, 0)
}

fn expect_err<T>(result: Result<T>, needle: &str) {
    match result {
        Ok(_) => panic!("expected an error mentioning {needle:?}, got Ok"),
        Err(e) => assert!(e.to_string().contains(needle), "error {e:?} does not mention {needle:?}"),
    }
}

// ---------------------------------------------------------------- recurrent layers

/// Random weights for a 2-layer stack: [w_ih0, w_hh0, b_ih0, b_hh0, w_ih1, ...].
fn stack_weights(seed: u64, gates: usize, input: usize, hidden: usize) -> Result<Vec<Tensor>> {
    let mut out = Vec::new();
    for layer in 0..2 {
        let layer_input = if layer == 0 { input } else { hidden };
        let s = seed + 10 * layer as u64;
        out.push(uniform(s, &[gates * hidden, layer_input], -0.7, 0.7)?);
        out.push(uniform(s + 1, &[gates * hidden, hidden], -0.7, 0.7)?);
        out.push(uniform(s + 2, &[gates * hidden], -0.5, 0.5)?);
        out.push(uniform(s + 3, &[gates * hidden], -0.5, 0.5)?);
    }
    Ok(out)
}

/// Groups a flat [w_ih, w_hh, b_ih, b_hh, ...] list into layers.
fn layers_from(flat: &[Tensor]) -> Vec<RecurrentWeights> {
    let to_layer = |c: &[Tensor]| RecurrentWeights {
        weight_ih: c[0].clone(),
        weight_hh: c[1].clone(),
        bias_ih: Some(c[2].clone()),
        bias_hh: Some(c[3].clone()),
    };
    flat.chunks(4).map(to_layer).collect()
}

#[test]
fn rnn_gradcheck_input_state_and_weights() -> Result<()> {
    let (batch, steps, input, hidden) = (2, 3, 2, 3);
    for (i, act) in [RnnNonlinearity::Tanh, RnnNonlinearity::Relu].into_iter().enumerate() {
        let seed = 100 * i as u64;
        let mut inputs = vec![rand64(seed + 1, &[batch, steps, input])?, rand64(seed + 2, &[2, batch, hidden])?];
        inputs.extend(stack_weights(seed + 3, 1, input, hidden)?);
        gradcheck(&inputs, |xs| {
            let rnn = Rnn::from_weights(layers_from(&xs[2..]), act, true)?;
            let (output, h_n) = rnn.forward_with_state(&xs[0], Some(&xs[1]))?;
            concat(&[output, h_n])
        })?;
    }
    Ok(())
}

#[test]
fn lstm_gradcheck_input_states_and_weights() -> Result<()> {
    let (batch, steps, input, hidden) = (2, 3, 2, 2);
    let mut inputs =
        vec![rand64(1, &[batch, steps, input])?, rand64(2, &[2, batch, hidden])?, rand64(3, &[2, batch, hidden])?];
    inputs.extend(stack_weights(4, 4, input, hidden)?);
    gradcheck(&inputs, |xs| {
        let lstm = Lstm::from_weights(layers_from(&xs[3..]), true)?;
        let (output, h_n, c_n) = lstm.forward_with_state(&xs[0], Some(&xs[1]), Some(&xs[2]))?;
        concat(&[output, h_n, c_n])
    })
}

#[test]
fn gru_gradcheck_input_state_and_weights() -> Result<()> {
    let (batch, steps, input, hidden) = (2, 3, 2, 2);
    let mut inputs = vec![rand64(1, &[steps, batch, input])?, rand64(2, &[2, batch, hidden])?];
    inputs.extend(stack_weights(3, 3, input, hidden)?);
    // Time-major input here, batch-first in the golden tests.
    gradcheck(&inputs, |xs| {
        let gru = Gru::from_weights(layers_from(&xs[2..]), false)?;
        let (output, h_n) = gru.forward_with_state(&xs[0], Some(&xs[1]))?;
        concat(&[output, h_n])
    })
}

#[test]
fn recurrent_parameters_follow_pytorch() -> Result<()> {
    let mut vb = VarBuilder::new(CPU, DType::F64, 7);
    let config = RecurrentConfig { num_layers: 2, ..RecurrentConfig::default() };
    let lstm = Lstm::new(3, 5, config, &mut vb)?;
    let named = lstm.named_parameters();
    let names: Vec<&str> = named.iter().map(|(n, _)| n.as_str()).collect();
    let expected = ["weight_ih_l0", "weight_hh_l0", "bias_ih_l0", "bias_hh_l0"];
    assert_eq!(&names[..4], &expected);
    assert_eq!(names[4], "weight_ih_l1");
    let shapes: Vec<&[usize]> = named.iter().map(|(_, t)| t.dims()).collect();
    assert_eq!(shapes[..4], [&[20, 3][..], &[20, 5], &[20], &[20]]);
    assert_eq!(shapes[4], &[20, 5]);
    let bound = 1.0 / 5f64.sqrt();
    for (name, t) in &named {
        let values = t.to_vec::<f64>()?;
        assert!(values.iter().all(|v| v.abs() <= bound), "{name} outside ±1/sqrt(hidden)");
        assert!(values.iter().any(|v| v.abs() > bound / 2.0), "{name} does not look U(±1/sqrt(hidden))");
    }
    let no_bias = RecurrentConfig { bias: false, ..RecurrentConfig::default() };
    let gru = Gru::new(3, 4, no_bias, &mut vb)?;
    assert_eq!(gru.named_parameters().len(), 2);
    assert_eq!(gru.num_parameters(), 12 * 3 + 12 * 4);
    let rnn = Rnn::new(3, 4, RnnNonlinearity::Relu, RecurrentConfig::default(), &mut vb)?;
    assert_eq!((rnn.input_size(), rnn.hidden_size(), rnn.num_layers(), rnn.batch_first()), (3, 4, 1, true));
    Ok(())
}

#[test]
fn recurrent_batch_first_matches_time_major() -> Result<()> {
    let mut vb = VarBuilder::new(CPU, DType::F64, 3);
    let config = RecurrentConfig { num_layers: 2, ..RecurrentConfig::default() };
    let batch_first = Lstm::new(3, 4, config, &mut vb)?;
    let time_major = Lstm::from_weights(batch_first.layers().to_vec(), false)?;
    let x = rand64(9, &[2, 5, 3])?;
    let (out_a, h_a, c_a) = batch_first.forward_with_state(&x, None, None)?;
    let (out_b, h_b, c_b) = time_major.forward_with_state(&x.transpose(0, 1)?, None, None)?;
    assert_eq!(out_a.dims(), &[2, 5, 4]);
    assert_eq!(out_b.dims(), &[5, 2, 4]);
    assert_eq!(out_a.to_vec::<f64>()?, out_b.transpose(0, 1)?.to_vec::<f64>()?);
    assert_eq!(h_a.to_vec::<f64>()?, h_b.to_vec::<f64>()?);
    assert_eq!(c_a.to_vec::<f64>()?, c_b.to_vec::<f64>()?);
    // forward() is the output sequence, and the last step's output is the last layer's h_n.
    assert_eq!(batch_first.forward(&x)?.to_vec::<f64>()?, out_a.to_vec::<f64>()?);
    let last_step = out_a.narrow(1, 4, 1)?.squeeze(1)?;
    assert_eq!(last_step.to_vec::<f64>()?, h_a.narrow(0, 1, 1)?.squeeze(0)?.to_vec::<f64>()?);
    Ok(())
}

#[test]
fn recurrent_errors() -> Result<()> {
    let mut vb = VarBuilder::new(CPU, DType::F64, 1);
    let config = RecurrentConfig { num_layers: 2, ..RecurrentConfig::default() };
    let gru = Gru::new(3, 4, config, &mut vb)?;
    expect_err(gru.forward(&rand64(0, &[5, 3])?), "[batch, time, features]");
    expect_err(gru.forward(&rand64(0, &[2, 5, 4])?), "4 features");
    expect_err(gru.forward(&Tensor::zeros((2, 0, 3), DType::F64, CPU)?), "empty");
    expect_err(gru.forward(&Tensor::zeros((2, 5, 3), DType::F32, CPU)?), "dtype mismatch");
    expect_err(gru.forward_with_state(&rand64(0, &[2, 5, 3])?, Some(&rand64(0, &[1, 2, 4])?)), "h0");
    let lstm = Lstm::new(3, 4, config, &mut vb)?;
    expect_err(lstm.forward_with_state(&rand64(0, &[2, 5, 3])?, None, Some(&rand64(0, &[2, 5, 4])?)), "c0");
    let zero_layers = RecurrentConfig { num_layers: 0, ..RecurrentConfig::default() };
    expect_err(Rnn::new(3, 4, RnnNonlinearity::Tanh, zero_layers, &mut vb), "num_layers 0");
    expect_err(Lstm::new(3, 0, RecurrentConfig::default(), &mut vb), "hidden_size 0");
    // weight_ih with a row count that is not 4 * hidden, and a second layer of the wrong width.
    let weights = stack_weights(0, 4, 3, 2)?;
    expect_err(Gru::from_weights(layers_from(&weights[..4]), true), "weight_ih_l0");
    let mut bad = layers_from(&weights);
    bad[1].weight_ih = rand64(0, &[8, 3])?;
    expect_err(Lstm::from_weights(bad, true), "weight_ih_l1");
    expect_err(Lstm::from_weights(Vec::new(), true), "at least one layer");
    Ok(())
}

// ---------------------------------------------------------------- attention

/// MHA parameters for embed_dim 4: [in_proj_weight, in_proj_bias, out_w, out_b].
fn attention_params(seed: u64) -> Result<Vec<Tensor>> {
    Ok(vec![rand64(seed, &[12, 4])?, rand64(seed + 1, &[12])?, rand64(seed + 2, &[4, 4])?, rand64(seed + 3, &[4])?])
}

fn attention_from(params: &[Tensor], heads: usize) -> Result<MultiHeadAttention> {
    let out_proj = Linear::from_tensors(params[2].clone(), Some(params[3].clone()));
    MultiHeadAttention::from_tensors(params[0].clone(), Some(params[1].clone()), out_proj, heads)
}

#[test]
fn attention_gradcheck_qkv_and_weights() -> Result<()> {
    let (batch, len_q, len_k) = (2, 2, 3);
    let causal_like = Tensor::from_vec(vec![0u8, 1, 1, 0, 0, 1], (len_q, len_k), CPU)?;
    let padding = Tensor::from_vec(vec![0u8, 0, 0, 0, 1, 0], (batch, len_k), CPU)?;
    let float_mask = uniform(5, &[len_q, len_k], -2.0, 0.0)?;
    let masks = [
        AttentionMasks::default(),
        AttentionMasks { attn_mask: Some(&causal_like), key_padding_mask: Some(&padding) },
        AttentionMasks { attn_mask: Some(&float_mask), key_padding_mask: None },
    ];
    for (i, mask) in masks.into_iter().enumerate() {
        let seed = 10 * i as u64;
        let mut inputs = vec![
            rand64(seed, &[batch, len_q, 4])?,
            rand64(seed + 1, &[batch, len_k, 4])?,
            rand64(seed + 2, &[batch, len_k, 4])?,
        ];
        inputs.extend(attention_params(seed + 3)?);
        gradcheck(&inputs, |xs| attention_from(&xs[3..], 2)?.forward_with(&xs[0], &xs[1], &xs[2], mask))?;
    }
    Ok(())
}

#[test]
fn self_attention_gradcheck_with_causal_mask() -> Result<()> {
    let mask = causal_mask(3, CPU)?;
    let mut inputs = vec![rand64(1, &[2, 3, 4])?];
    inputs.extend(attention_params(2)?);
    // The same tensor as q, k and v takes the packed one-matmul projection.
    gradcheck(&inputs, |xs| attention_from(&xs[1..], 2)?.forward_qkv(&xs[0], &xs[0], &xs[0], Some(&mask)))?;
    gradcheck(&inputs, |xs| attention_from(&xs[1..], 1)?.forward(&xs[0]))
}

#[test]
fn attention_packed_projection_matches_separate() -> Result<()> {
    let attention = attention_from(&attention_params(4)?, 2)?;
    let x = rand64(3, &[2, 3, 4])?;
    let copy = x.add_scalar(0.0)?; // same values, another tensor: the unpacked path
    let packed = attention.forward(&x)?.to_vec::<f64>()?;
    let separate = attention.forward_qkv(&x, &copy, &x, None)?.to_vec::<f64>()?;
    let worst = packed.iter().zip(&separate).map(|(a, b)| (a - b).abs()).fold(0.0, f64::max);
    assert!(worst < 1e-14, "packed and separate projections differ by {worst}");
    Ok(())
}

#[test]
fn attention_masks_are_respected() -> Result<()> {
    // Changing a key or value that is masked out must not change the output.
    let attention = attention_from(&attention_params(8)?, 2)?;
    let (q, k, v) = (rand64(1, &[1, 3, 4])?, rand64(2, &[1, 3, 4])?, rand64(3, &[1, 3, 4])?);
    let causal = causal_mask(3, CPU)?;
    assert_eq!(causal.to_vec::<u8>()?, vec![0, 1, 1, 0, 0, 1, 0, 0, 0]);
    let first_query = |v: &Tensor| -> Result<Vec<f64>> {
        attention.forward_qkv(&q, &k, v, Some(&causal))?.narrow(1, 0, 1)?.to_vec::<f64>()
    };
    let changed_last = Tensor::cat(&[v.narrow(1, 0, 2)?, v.narrow(1, 2, 1)?.add_scalar(5.0)?], 1)?;
    assert_eq!(first_query(&v)?, first_query(&changed_last)?);
    let changed_first = Tensor::cat(&[v.narrow(1, 0, 1)?.add_scalar(5.0)?, v.narrow(1, 1, 2)?], 1)?;
    assert_ne!(first_query(&v)?, first_query(&changed_first)?);
    // A u8 mask equals a float mask of -inf at the same places.
    let as_float = causal
        .where_cond(&Tensor::full(f64::NEG_INFINITY, (), DType::F64, CPU)?, &Tensor::zeros((), DType::F64, CPU)?)?;
    let from_u8 = attention.forward_qkv(&q, &k, &v, Some(&causal))?.to_vec::<f64>()?;
    assert_eq!(from_u8, attention.forward_qkv(&q, &k, &v, Some(&as_float))?.to_vec::<f64>()?);
    Ok(())
}

#[test]
fn attention_init_follows_pytorch() -> Result<()> {
    let mut vb = VarBuilder::new(CPU, DType::F64, 11);
    let attention = MultiHeadAttention::new(8, 2, &mut vb)?;
    let named = attention.named_parameters();
    let names: Vec<&str> = named.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(names, ["in_proj_weight", "in_proj_bias", "out_proj.weight", "out_proj.bias"]);
    let xavier = (6.0f64 / (8.0 + 24.0)).sqrt();
    let in_w = named[0].1.to_vec::<f64>()?;
    assert!(in_w.iter().all(|v| v.abs() <= xavier) && in_w.iter().any(|v| v.abs() > xavier / 2.0));
    assert!(named[1].1.to_vec::<f64>()?.iter().all(|&v| v == 0.0));
    assert!(named[2].1.to_vec::<f64>()?.iter().all(|v| v.abs() <= 1.0 / 8f64.sqrt()));
    assert!(named[3].1.to_vec::<f64>()?.iter().all(|&v| v == 0.0));
    assert_eq!((attention.embed_dim(), attention.num_heads(), attention.head_dim()), (8, 2, 4));
    let no_bias = MultiHeadAttention::with_bias(8, 4, false, &mut vb)?;
    assert_eq!(no_bias.num_parameters(), 3 * 64 + 64);
    Ok(())
}

#[test]
fn attention_errors() -> Result<()> {
    let mut vb = VarBuilder::new(CPU, DType::F64, 1);
    expect_err(MultiHeadAttention::new(5, 2, &mut vb), "divisible");
    expect_err(MultiHeadAttention::new(4, 0, &mut vb), "divisible");
    let attention = MultiHeadAttention::new(4, 2, &mut vb)?;
    let (q, kv) = (rand64(1, &[2, 3, 4])?, rand64(2, &[2, 5, 4])?);
    expect_err(attention.forward(&rand64(0, &[3, 4])?), "embed_dim = 4");
    expect_err(attention.forward(&rand64(0, &[2, 3, 6])?), "embed_dim = 4");
    expect_err(attention.forward_qkv(&q, &kv, &rand64(0, &[2, 4, 4])?, None), "disagree");
    expect_err(attention.forward_qkv(&q, &kv, &kv, Some(&causal_mask(3, CPU)?)), "attn_mask must be");
    let u32_mask = Tensor::zeros((3, 5), DType::U32, CPU)?;
    expect_err(attention.forward_qkv(&q, &kv, &kv, Some(&u32_mask)), "must be u8");
    let bad_padding = Tensor::zeros((2, 3), DType::U8, CPU)?;
    let masks = AttentionMasks { attn_mask: None, key_padding_mask: Some(&bad_padding) };
    expect_err(attention.forward_with(&q, &kv, &kv, masks), "key_padding_mask must be");
    // Batch 1 has every key padded: no query there can attend to anything.
    let all_padded = Tensor::from_vec(vec![0u8, 0, 1, 0, 0, 1, 1, 1, 1, 1], (2, 5), CPU)?;
    let masks = AttentionMasks { attn_mask: None, key_padding_mask: Some(&all_padded) };
    expect_err(attention.forward_with(&q, &kv, &kv, masks), "every key for query 0 (batch 1");
    let bad_proj = Linear::from_tensors(rand64(0, &[4, 3])?, None);
    expect_err(MultiHeadAttention::from_tensors(rand64(0, &[12, 4])?, None, bad_proj, 2), "out_proj.weight");
    Ok(())
}

#[test]
fn sequence_layers_run_in_f32() -> Result<()> {
    // The same weights in f32 and f64 give the same outputs up to f32 rounding (masks included).
    let worst = |a: &Tensor, b: &Tensor| -> Result<f64> {
        let (a, b) = (a.to_dtype(DType::F64)?.to_vec::<f64>()?, b.to_vec::<f64>()?);
        Ok(a.iter().zip(&b).map(|(x, y)| (x - y).abs()).fold(0.0, f64::max))
    };
    let weights = stack_weights(1, 4, 3, 4)?;
    let weights32: Vec<Tensor> = weights.iter().map(|t| t.to_dtype(DType::F32)).collect::<Result<_>>()?;
    let x = rand64(2, &[2, 5, 3])?;
    let out64 = Lstm::from_weights(layers_from(&weights), true)?.forward(&x)?;
    let out32 = Lstm::from_weights(layers_from(&weights32), true)?.forward(&x.to_dtype(DType::F32)?)?;
    assert_eq!(out32.dtype(), DType::F32);
    assert!(worst(&out32, &out64)? < 1e-5);

    let params = attention_params(3)?;
    let params32: Vec<Tensor> = params.iter().map(|t| t.to_dtype(DType::F32)).collect::<Result<_>>()?;
    let (q, kv) = (rand64(4, &[2, 3, 4])?, rand64(5, &[2, 4, 4])?);
    let padding = Tensor::from_vec(vec![0u8, 0, 0, 1, 0, 1, 0, 0], (2, 4), CPU)?;
    let mask = rand64(6, &[3, 4])?; // an f64 float mask is converted to the inputs' dtype
    let masks = AttentionMasks { attn_mask: Some(&mask), key_padding_mask: Some(&padding) };
    let out64 = attention_from(&params, 2)?.forward_with(&q, &kv, &kv, masks)?;
    let (q32, kv32) = (q.to_dtype(DType::F32)?, kv.to_dtype(DType::F32)?);
    let out32 = attention_from(&params32, 2)?.forward_with(&q32, &kv32, &kv32, masks)?;
    assert!(worst(&out32, &out64)? < 1e-5);
    Ok(())
}

// ---------------------------------------------------------------- losses

#[test]
fn loss_gradchecks() -> Result<()> {
    let logits = rand64(1, &[4, 5])?;
    let ids = Tensor::from_vec(vec![1i64, 0, 4, 2], 4, CPU)?;
    let smooth = CrossEntropyOptions { label_smoothing: 0.15, ..Default::default() };
    gradcheck(std::slice::from_ref(&logits), |xs| cross_entropy_with(&xs[0], &ids, &smooth))?;
    let probs = uniform(2, &[4, 5], 0.0, 1.0)?;
    let probs = probs.div(&probs.sum_keepdim(1)?)?;
    gradcheck(std::slice::from_ref(&logits), |xs| cross_entropy_with(&xs[0], &probs, &smooth))?;
    let ignored = Tensor::from_vec(vec![1i64, -1, 3, -1], 4, CPU)?;
    let opts = CrossEntropyOptions { label_smoothing: 0.3, reduction: Reduction::None, ignore_index: Some(-1) };
    gradcheck(std::slice::from_ref(&logits), |xs| cross_entropy_with(&xs[0], &ignored, &opts))?;
    let kdim = rand64(3, &[2, 3, 4])?;
    let kdim_ids = Tensor::from_vec(vec![0u32, 2, 1, 1, 2, 0, 0, 1], (2, 4), CPU)?;
    gradcheck(&[kdim], |xs| cross_entropy_with(&xs[0], &kdim_ids, &smooth))?;
    gradcheck(&[logits.log_softmax(1)?], |xs| nll_loss(&xs[0], &ids))?;

    let (pred, target) = (rand64(4, &[3, 4])?, rand64(5, &[3, 4])?);
    gradcheck(std::slice::from_ref(&pred), |xs| mse(&xs[0], &target))?;
    gradcheck(std::slice::from_ref(&pred), |xs| l1_loss(&xs[0], &target))?;
    gradcheck(std::slice::from_ref(&pred), |xs| huber_loss(&xs[0], &target, 0.4))?;
    gradcheck(std::slice::from_ref(&pred), |xs| huber_loss_with(&xs[0], &target, 0.4, Reduction::None))?;
    let soft = uniform(6, &[3, 4], 0.0, 1.0)?;
    gradcheck(&[uniform(7, &[3, 4], 0.1, 0.9)?], |xs| binary_cross_entropy(&xs[0], &soft))?;
    gradcheck(&[pred.mul_scalar(4.0)?], |xs| binary_cross_entropy_with_logits(&xs[0], &soft))?;
    gradcheck(&[pred], |xs| binary_cross_entropy_with_logits_with(&xs[0], &soft, Reduction::Sum))
}

#[test]
fn loss_enum_and_reductions_agree() -> Result<()> {
    let logits = rand64(1, &[4, 5])?;
    let ids = Tensor::from_vec(vec![1i64, 0, 4, 2], 4, CPU)?;
    let ids_u32 = Tensor::from_vec(vec![1u32, 0, 4, 2], 4, CPU)?;
    let scalar = |t: Result<Tensor>| -> Result<f64> { t?.to_scalar::<f64>() };
    assert_eq!(scalar(cross_entropy(&logits, &ids))?, scalar(cross_entropy(&logits, &ids_u32))?);
    // One-hot probability targets give the same loss as the ids.
    let one_hot = ids.one_hot(5, DType::F64)?;
    let (a, b) = (scalar(cross_entropy(&logits, &ids))?, scalar(cross_entropy(&logits, &one_hot))?);
    assert!((a - b).abs() < 1e-14);
    let ce = Loss::CrossEntropy { label_smoothing: 0.1 };
    let opts = CrossEntropyOptions { label_smoothing: 0.1, ..Default::default() };
    assert_eq!(scalar(ce.compute(&logits, &ids))?, scalar(cross_entropy_with(&logits, &ids, &opts))?);
    let none = CrossEntropyOptions { reduction: Reduction::None, ..opts };
    let sum = CrossEntropyOptions { reduction: Reduction::Sum, ..opts };
    let per_sample = cross_entropy_with(&logits, &ids, &none)?;
    assert_eq!(per_sample.dims(), &[4]);
    let total = scalar(cross_entropy_with(&logits, &ids, &sum))?;
    assert!((scalar(per_sample.sum_all())? - total).abs() < 1e-14);
    assert!((total / 4.0 - scalar(ce.compute(&logits, &ids))?).abs() < 1e-14);

    let (pred, target) = (uniform(2, &[6], 0.1, 0.9)?, uniform(3, &[6], 0.0, 1.0)?);
    let cases: [(Loss, Tensor); 5] = [
        (Loss::Mse, mse_with(&pred, &target, Reduction::Sum)?),
        (Loss::L1, l1_loss_with(&pred, &target, Reduction::Sum)?),
        (Loss::Bce, binary_cross_entropy_with(&pred, &target, Reduction::Sum)?),
        (Loss::BceWithLogits, binary_cross_entropy_with_logits_with(&pred, &target, Reduction::Sum)?),
        (Loss::Huber { delta: 0.3 }, huber_loss_with(&pred, &target, 0.3, Reduction::Sum)?),
    ];
    for (loss, summed) in cases {
        let mean = scalar(loss.compute(&pred, &target))?;
        assert!((mean * 6.0 - summed.to_scalar::<f64>()?).abs() < 1e-13, "{}", loss.name());
    }
    let log_probs = logits.log_softmax(1)?;
    assert_eq!(scalar(Loss::Nll.compute(&log_probs, &ids))?, scalar(nll_loss(&log_probs, &ids))?);
    Ok(())
}

#[test]
fn losses_are_finite_at_extremes() -> Result<()> {
    // Probabilities of exactly 0 and 1 (log clamped at -100) and logits of ±1000.
    let probs = Tensor::from_vec(vec![0.0f64, 1.0, 0.0, 1.0], 4, CPU)?.requires_grad();
    let targets = Tensor::from_vec(vec![0.0f64, 1.0, 1.0, 0.0], 4, CPU)?;
    let loss = binary_cross_entropy(&probs, &targets)?;
    assert!((loss.to_scalar::<f64>()? - 50.0).abs() < 1e-12, "two terms of 100 over 4");
    let grads = loss.backward()?;
    let grad = grads.get(&probs).map(|g| g.to_vec::<f64>()).transpose()?.unwrap_or_default();
    assert!(grad.iter().all(|g| g.is_finite()), "gradient {grad:?}");
    let logits = Tensor::from_vec(vec![1000.0f64, -1000.0, 1000.0], 3, CPU)?;
    let targets = Tensor::from_vec(vec![1.0f64, 0.0, 0.0], 3, CPU)?;
    let value = binary_cross_entropy_with_logits(&logits, &targets)?.to_scalar::<f64>()?;
    assert!((value - 1000.0 / 3.0).abs() < 1e-9, "{value}");
    Ok(())
}

#[test]
fn loss_errors() -> Result<()> {
    let logits = rand64(1, &[4, 5])?;
    let ids = |v: Vec<i64>| Tensor::from_vec(v.clone(), v.len(), CPU);
    expect_err(cross_entropy(&logits, &ids(vec![1, 5, 0, 2])?), "target 5 at flat position 1 is out of range");
    expect_err(cross_entropy(&logits, &ids(vec![1, -1, 0, 2])?), "target -1");
    expect_err(cross_entropy(&logits, &ids(vec![1, 2, 0])?), "do not match");
    expect_err(cross_entropy(&logits, &rand64(2, &[4, 4])?), "shape mismatch");
    expect_err(cross_entropy(&logits, &logits.to_dtype(DType::F32)?), "dtype mismatch");
    expect_err(cross_entropy(&Tensor::zeros((0, 5), DType::F64, CPU)?, &ids(vec![])?), "empty");
    expect_err(cross_entropy(&ids(vec![1, 2])?, &ids(vec![1, 2])?), "float");
    let smooth = CrossEntropyOptions { label_smoothing: 1.5, ..Default::default() };
    expect_err(cross_entropy_with(&logits, &ids(vec![1, 2, 0, 2])?, &smooth), "label_smoothing");
    let all_ignored = ids(vec![-100; 4])?;
    expect_err(nll_loss_with(&logits, &all_ignored, Reduction::Mean, Some(-100)), "every target");
    expect_err(mse(&rand64(1, &[4, 1])?, &rand64(2, &[4])?), "shape mismatch");
    expect_err(mse(&Tensor::zeros(0, DType::F64, CPU)?, &Tensor::zeros(0, DType::F64, CPU)?), "empty");
    let half = Tensor::full(0.5, 3, DType::F64, CPU)?;
    expect_err(binary_cross_entropy(&half.mul_scalar(3.0)?, &half), "in [0, 1]");
    expect_err(huber_loss(&half, &half, 0.0), "delta");
    expect_err(Loss::Mse.compute(&half, &half.to_dtype(DType::F32)?), "dtype mismatch");
    Ok(())
}

// ---------------------------------------------------------------- PyTorch golden values

const FIXTURE: &str = include_str!("golden/sequence.json");
/// f64 on both sides and well-conditioned inputs: agreement to a few ulps, with room for
/// different summation orders.
const TOL: f64 = 1e-10;

fn fixture() -> Value {
    serde_json::from_str(FIXTURE).expect("golden/sequence.json is valid JSON")
}

/// A stored tensor: u8 / i64 when its "dtype" says so, else f64.
fn tensor(v: &Value) -> Result<Tensor> {
    let shape: Vec<usize> =
        v["shape"].as_array().into_iter().flatten().filter_map(|d| d.as_u64()).map(|d| d as usize).collect();
    let data = v["data"].as_array().ok_or_else(|| Error::Msg(format!("no data in {v}")))?;
    match v["dtype"].as_str() {
        Some("u8") => {
            Tensor::from_vec(data.iter().map(|x| x.as_u64().unwrap_or(0) as u8).collect::<Vec<_>>(), shape, CPU)
        }
        Some("i64") => Tensor::from_vec(data.iter().filter_map(|x| x.as_i64()).collect::<Vec<_>>(), shape, CPU),
        _ => Tensor::from_vec(data.iter().filter_map(|x| x.as_f64()).collect::<Vec<_>>(), shape, CPU),
    }
}

/// `max |ours - torch| / (1 + |torch|)`, or an error when the shapes differ.
fn compare(what: &str, ours: &Tensor, golden: &Value) -> std::result::Result<f64, String> {
    let expected = tensor(golden).map_err(|e| e.to_string())?;
    if ours.dims() != expected.dims() {
        return Err(format!("{what}: shape {:?}, torch {:?}", ours.dims(), expected.dims()));
    }
    let (a, b) =
        (ours.to_vec::<f64>().map_err(|e| e.to_string())?, expected.to_vec::<f64>().map_err(|e| e.to_string())?);
    let worst = a.iter().zip(&b).map(|(x, y)| (x - y).abs() / (1.0 + y.abs())).fold(0.0, f64::max);
    if worst.is_nan() || worst > TOL {
        return Err(format!("{what}: error {worst:e}"));
    }
    Ok(worst)
}

/// Runs every case of a section; fails listing each case that does not match.
fn run_section(section: &str, run: impl Fn(&Value) -> std::result::Result<f64, String>) {
    let doc = fixture();
    let cases = doc[section].as_array().expect("section present");
    assert!(!cases.is_empty());
    let failures: Vec<String> =
        cases.iter().filter_map(|c| run(c).err().map(|e| format!("{}: {e}", c["name"]))).collect();
    assert!(
        failures.is_empty(),
        "{} of {} {section} cases differ from PyTorch:\n{}",
        failures.len(),
        cases.len(),
        failures.join("\n")
    );
}

/// `sum(out_i * w_i)` over the named outputs, then every gradient in `case["grads"]`.
fn check_grads(
    case: &Value,
    outputs: &[(&str, &Tensor)],
    vars: &[(String, Tensor)],
) -> std::result::Result<f64, String> {
    let mut worst: f64 = 0.0;
    let mut loss = Tensor::zeros((), DType::F64, CPU).map_err(|e| e.to_string())?;
    for (name, out) in outputs {
        worst = worst.max(compare(name, out, &case["outputs"][*name])?);
        let w = tensor(&case["w"][*name]).map_err(|e| e.to_string())?;
        loss =
            loss.add(&out.mul(&w).and_then(|t| t.sum_all()).map_err(|e| e.to_string())?).map_err(|e| e.to_string())?;
    }
    let grads = loss.backward().map_err(|e| e.to_string())?;
    let expected = case["grads"].as_object().ok_or("no grads")?;
    for (name, golden) in expected {
        let var = vars.iter().find(|(n, _)| n == name).map(|(_, t)| t).ok_or(format!("no variable {name}"))?;
        let grad = grads.get(var).ok_or(format!("no gradient for {name}"))?;
        worst = worst.max(compare(&format!("grad {name}"), grad, golden)?);
    }
    Ok(worst)
}

/// Our parameter names, in order, are PyTorch's.
fn check_names(case: &Value, ours: &[(String, Tensor)]) -> std::result::Result<(), String> {
    let ours: Vec<&str> = ours.iter().map(|(n, _)| n.as_str()).collect();
    let torch: Vec<&str> = case["param_names"].as_array().into_iter().flatten().filter_map(|n| n.as_str()).collect();
    match ours == torch {
        true => Ok(()),
        false => Err(format!("parameter names {ours:?} differ from torch's {torch:?}")),
    }
}

fn recurrent_case(case: &Value) -> std::result::Result<f64, String> {
    let load = |v: &Value| tensor(v).map(|t| t.requires_grad()).map_err(|e| e.to_string());
    let params = case["params"].as_object().ok_or("no params")?;
    let param = |name: String| params.get(&name).map(load).transpose();
    let mut layers = Vec::new();
    for l in 0..case["num_layers"].as_u64().unwrap_or(0) {
        let weight_ih = param(format!("weight_ih_l{l}"))?.ok_or("missing weight_ih")?;
        let weight_hh = param(format!("weight_hh_l{l}"))?.ok_or("missing weight_hh")?;
        let (bias_ih, bias_hh) = (param(format!("bias_ih_l{l}"))?, param(format!("bias_hh_l{l}"))?);
        layers.push(RecurrentWeights { weight_ih, weight_hh, bias_ih, bias_hh });
    }
    let inputs = &case["inputs"];
    let x = load(&inputs["x"])?;
    let h0 = inputs.get("h0").map(load).transpose()?;
    let c0 = inputs.get("c0").map(load).transpose()?;
    let batch_first = case["batch_first"].as_bool().unwrap_or(true);
    let err = |e: Error| e.to_string();
    let (module, outputs): (Box<dyn Module>, Vec<(&str, Tensor)>) = match case["kind"].as_str() {
        Some("lstm") => {
            let lstm = Lstm::from_weights(layers, batch_first).map_err(err)?;
            let (out, h, c) = lstm.forward_with_state(&x, h0.as_ref(), c0.as_ref()).map_err(err)?;
            (Box::new(lstm), vec![("output", out), ("h_n", h), ("c_n", c)])
        }
        Some("gru") => {
            let gru = Gru::from_weights(layers, batch_first).map_err(err)?;
            let (out, h) = gru.forward_with_state(&x, h0.as_ref()).map_err(err)?;
            (Box::new(gru), vec![("output", out), ("h_n", h)])
        }
        Some(kind @ ("rnn_tanh" | "rnn_relu")) => {
            let act = if kind == "rnn_relu" { RnnNonlinearity::Relu } else { RnnNonlinearity::Tanh };
            let rnn = Rnn::from_weights(layers, act, batch_first).map_err(err)?;
            let (out, h) = rnn.forward_with_state(&x, h0.as_ref()).map_err(err)?;
            (Box::new(rnn), vec![("output", out), ("h_n", h)])
        }
        other => return Err(format!("unknown kind {other:?}")),
    };
    let mut vars = module.named_parameters();
    check_names(case, &vars)?;
    vars.extend([("x".to_string(), x)]);
    vars.extend(h0.map(|t| ("h0".to_string(), t)));
    vars.extend(c0.map(|t| ("c0".to_string(), t)));
    let outputs: Vec<(&str, &Tensor)> = outputs.iter().map(|(n, t)| (*n, t)).collect();
    check_grads(case, &outputs, &vars)
}

#[test]
fn golden_recurrent() {
    run_section("recurrent", recurrent_case);
}

fn attention_case(case: &Value) -> std::result::Result<f64, String> {
    let err = |e: Error| e.to_string();
    let load = |v: &Value| tensor(v).map(|t| t.requires_grad()).map_err(err);
    let params = &case["params"];
    let optional = |name: &str| params.get(name).map(load).transpose();
    let out_proj = Linear::from_tensors(load(&params["out_proj.weight"])?, optional("out_proj.bias")?);
    let heads = case["num_heads"].as_u64().unwrap_or(0) as usize;
    let attention =
        MultiHeadAttention::from_tensors(load(&params["in_proj_weight"])?, optional("in_proj_bias")?, out_proj, heads)
            .map_err(err)?;
    let inputs = &case["inputs"];
    let mut vars = attention.named_parameters();
    check_names(case, &vars)?;
    let (q, k, v) = match inputs.get("x") {
        Some(x) => {
            let x = load(x)?;
            vars.push(("x".to_string(), x.clone()));
            (x.clone(), x.clone(), x)
        }
        None => {
            let (q, k, v) = (load(&inputs["q"])?, load(&inputs["k"])?, load(&inputs["v"])?);
            vars.extend([("q".to_string(), q.clone()), ("k".to_string(), k.clone()), ("v".to_string(), v.clone())]);
            (q, k, v)
        }
    };
    let mask = |key: &str| case.get(key).map(tensor).transpose().map_err(err);
    let (attn_mask, key_padding_mask) = (mask("attn_mask")?, mask("key_padding_mask")?);
    let masks = AttentionMasks { attn_mask: attn_mask.as_ref(), key_padding_mask: key_padding_mask.as_ref() };
    let out = attention.forward_with(&q, &k, &v, masks).map_err(err)?;
    let case = serde_json::json!({"outputs": {"out": case["out"]}, "w": {"out": case["w"]}, "grads": case["grads"]});
    check_grads(&case, &[("out", &out)], &vars)
}

#[test]
fn golden_attention() {
    run_section("attention", attention_case);
}

fn reduction(options: &Value) -> std::result::Result<Reduction, String> {
    match options["reduction"].as_str() {
        Some("mean") | None => Ok(Reduction::Mean),
        Some("sum") => Ok(Reduction::Sum),
        Some("none") => Ok(Reduction::None),
        Some(other) => Err(format!("unknown reduction {other}")),
    }
}

fn loss_case(case: &Value) -> std::result::Result<f64, String> {
    let err = |e: Error| e.to_string();
    let pred = tensor(&case["pred"]).map_err(err)?.requires_grad();
    let target = tensor(&case["target"]).map_err(err)?;
    let options = &case["options"];
    let reduction = reduction(options)?;
    let ignore_index = options["ignore_index"].as_i64();
    let out = match case["loss"].as_str() {
        Some("cross_entropy") => {
            let label_smoothing = options["label_smoothing"].as_f64().unwrap_or(0.0);
            cross_entropy_with(&pred, &target, &CrossEntropyOptions { label_smoothing, reduction, ignore_index })
        }
        Some("nll") => nll_loss_with(&pred, &target, reduction, ignore_index),
        Some("bce") => binary_cross_entropy_with(&pred, &target, reduction),
        Some("bce_with_logits") => binary_cross_entropy_with_logits_with(&pred, &target, reduction),
        Some("huber") => huber_loss_with(&pred, &target, options["delta"].as_f64().unwrap_or(1.0), reduction),
        Some("mse") => mse_with(&pred, &target, reduction),
        Some("l1") => l1_loss_with(&pred, &target, reduction),
        other => return Err(format!("unknown loss {other:?}")),
    }
    .map_err(err)?;
    let case =
        serde_json::json!({"outputs": {"out": case["out"]}, "w": {"out": case["w"]}, "grads": {"pred": case["grad"]}});
    check_grads(&case, &[("out", &out)], &[("pred".to_string(), pred)])
}

#[test]
fn golden_losses() {
    run_section("losses", loss_case);
}
