//! Rnn, Lstm, Gru and MultiHeadAttention on every device: gradient checks w.r.t. inputs,
//! states and every parameter (finite differences on the CPU, the CPU's f64 gradients
//! elsewhere), behaviour, error paths, and PyTorch golden values (`golden/sequence.json`, from
//! `golden/make_sequence_golden.py`) in every checked dtype. The losses are in `losses.rs`.

use rnn_core::{DType, Device, Error, Result, Tensor};
use rnn_nn::{
    causal_mask, AttentionMasks, Gru, Linear, Lstm, Module, MultiHeadAttention, RecurrentConfig, RecurrentWeights, Rnn,
    RnnNonlinearity, VarBuilder,
};
use rnn_testutil::golden::{self, Check};
use rnn_testutil::{
    assert_close_on, check_gradients, checked_floats, expect_err, floats, like, rand64, test_device, to, tol_on,
    tolerance, uniform, values, widest_float,
};
use serde_json::Value;

const CPU: Device = Device::Cpu;

/// Several outputs as one flat tensor, so one gradient check covers them all.
fn concat(outputs: &[Tensor]) -> Result<Tensor> {
    let flat: Vec<Tensor> = outputs.iter().map(|t| t.flatten_all()).collect::<Result<_>>()?;
    Tensor::cat(&flat, 0)
}

/// Every tensor of `ts` in `dtype` on `device`.
fn all_to(ts: &[Tensor], dtype: DType, device: Device) -> Result<Vec<Tensor>> {
    ts.iter().map(|t| to(t, dtype, device)).collect()
}

// ---------------------------------------------------------------- recurrent layers

/// Random f64 CPU weights for a 2-layer stack: [w_ih0, w_hh0, b_ih0, b_hh0, w_ih1, ...].
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

fn rnn_gradcheck_input_state_and_weights(device: Device) -> Result<()> {
    let (batch, steps, input, hidden) = (2, 3, 2, 3);
    for (i, act) in [RnnNonlinearity::Tanh, RnnNonlinearity::Relu].into_iter().enumerate() {
        let seed = 100 * i as u64;
        let mut inputs = vec![rand64(seed + 1, &[batch, steps, input])?, rand64(seed + 2, &[2, batch, hidden])?];
        inputs.extend(stack_weights(seed + 3, 1, input, hidden)?);
        check_gradients(device, &inputs, |xs| {
            let rnn = Rnn::from_weights(layers_from(&xs[2..]), act, true)?;
            let (output, h_n) = rnn.forward_with_state(&xs[0], Some(&xs[1]))?;
            concat(&[output, h_n])
        })?;
    }
    Ok(())
}
test_device!(rnn_gradcheck_input_state_and_weights_test, rnn_gradcheck_input_state_and_weights);

fn lstm_gradcheck_input_states_and_weights(device: Device) -> Result<()> {
    let (batch, steps, input, hidden) = (2, 3, 2, 2);
    let mut inputs =
        vec![rand64(1, &[batch, steps, input])?, rand64(2, &[2, batch, hidden])?, rand64(3, &[2, batch, hidden])?];
    inputs.extend(stack_weights(4, 4, input, hidden)?);
    check_gradients(device, &inputs, |xs| {
        let lstm = Lstm::from_weights(layers_from(&xs[3..]), true)?;
        let (output, h_n, c_n) = lstm.forward_with_state(&xs[0], Some(&xs[1]), Some(&xs[2]))?;
        concat(&[output, h_n, c_n])
    })
}
test_device!(lstm_gradcheck_input_states_and_weights_test, lstm_gradcheck_input_states_and_weights);

fn gru_gradcheck_input_state_and_weights(device: Device) -> Result<()> {
    let (batch, steps, input, hidden) = (2, 3, 2, 2);
    let mut inputs = vec![rand64(1, &[steps, batch, input])?, rand64(2, &[2, batch, hidden])?];
    inputs.extend(stack_weights(3, 3, input, hidden)?);
    // Time-major input here, batch-first in the golden tests.
    check_gradients(device, &inputs, |xs| {
        let gru = Gru::from_weights(layers_from(&xs[2..]), false)?;
        let (output, h_n) = gru.forward_with_state(&xs[0], Some(&xs[1]))?;
        concat(&[output, h_n])
    })
}
test_device!(gru_gradcheck_input_state_and_weights_test, gru_gradcheck_input_state_and_weights);

fn recurrent_parameters_follow_pytorch(device: Device) -> Result<()> {
    let mut vb = VarBuilder::new(device, widest_float(device), 7);
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
    let (bound, slack) = (1.0 / 5f64.sqrt(), tolerance(vb.dtype()).op);
    for (name, t) in &named {
        assert_eq!((t.device(), t.dtype()), (device, vb.dtype()), "{name}");
        let values = values(t);
        // The bound rounded to the dtype may be a hair above the f64 one.
        assert!(values.iter().all(|v| v.abs() <= bound * (1.0 + slack)), "{name} outside ±1/sqrt(hidden)");
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
test_device!(recurrent_parameters_follow_pytorch_test, recurrent_parameters_follow_pytorch);

fn recurrent_batch_first_matches_time_major(device: Device) -> Result<()> {
    let dtype = widest_float(device);
    let mut vb = VarBuilder::new(device, dtype, 3);
    let config = RecurrentConfig { num_layers: 2, ..RecurrentConfig::default() };
    let batch_first = Lstm::new(3, 4, config, &mut vb)?;
    let time_major = Lstm::from_weights(batch_first.layers().to_vec(), false)?;
    let x = rnn_testutil::random(9, &[2, 5, 3], dtype, device)?;
    let (out_a, h_a, c_a) = batch_first.forward_with_state(&x, None, None)?;
    let (out_b, h_b, c_b) = time_major.forward_with_state(&x.transpose(0, 1)?, None, None)?;
    assert_eq!(out_a.dims(), &[2, 5, 4]);
    assert_eq!(out_b.dims(), &[5, 2, 4]);
    assert_eq!(values(&out_a), values(&out_b.transpose(0, 1)?));
    assert_eq!(values(&h_a), values(&h_b));
    assert_eq!(values(&c_a), values(&c_b));
    // forward() is the output sequence, and the last step's output is the last layer's h_n.
    assert_eq!(values(&batch_first.forward(&x)?), values(&out_a));
    let last_step = out_a.narrow(1, 4, 1)?.squeeze(1)?;
    assert_eq!(values(&last_step), values(&h_a.narrow(0, 1, 1)?.squeeze(0)?));
    Ok(())
}
test_device!(recurrent_batch_first_matches_time_major_test, recurrent_batch_first_matches_time_major);

fn recurrent_errors(device: Device) -> Result<()> {
    let dtype = widest_float(device);
    let rand = |shape: &[usize]| rnn_testutil::random(0, shape, dtype, device);
    let mut vb = VarBuilder::new(device, dtype, 1);
    let config = RecurrentConfig { num_layers: 2, ..RecurrentConfig::default() };
    let gru = Gru::new(3, 4, config, &mut vb)?;
    expect_err(gru.forward(&rand(&[5, 3])?), "[batch, time, features]");
    expect_err(gru.forward(&rand(&[2, 5, 4])?), "4 features");
    expect_err(gru.forward(&Tensor::zeros((2, 0, 3), dtype, device)?), "empty");
    if let Some(other) = floats(device).into_iter().find(|&d| d != dtype) {
        expect_err(gru.forward(&Tensor::zeros((2, 5, 3), other, device)?), "dtype mismatch");
    }
    expect_err(gru.forward_with_state(&rand(&[2, 5, 3])?, Some(&rand(&[1, 2, 4])?)), "h0");
    let lstm = Lstm::new(3, 4, config, &mut vb)?;
    expect_err(lstm.forward_with_state(&rand(&[2, 5, 3])?, None, Some(&rand(&[2, 5, 4])?)), "c0");
    let zero_layers = RecurrentConfig { num_layers: 0, ..RecurrentConfig::default() };
    expect_err(Rnn::new(3, 4, RnnNonlinearity::Tanh, zero_layers, &mut vb), "num_layers 0");
    expect_err(Lstm::new(3, 0, RecurrentConfig::default(), &mut vb), "hidden_size 0");
    // weight_ih with a row count that is not 4 * hidden, and a second layer of the wrong width.
    let weights = all_to(&stack_weights(0, 4, 3, 2)?, dtype, device)?;
    expect_err(Gru::from_weights(layers_from(&weights[..4]), true), "weight_ih_l0");
    let mut bad = layers_from(&weights);
    bad[1].weight_ih = rand(&[8, 3])?;
    expect_err(Lstm::from_weights(bad, true), "weight_ih_l1");
    expect_err(Lstm::from_weights(Vec::new(), true), "at least one layer");
    Ok(())
}
test_device!(recurrent_errors_test, recurrent_errors);

// ---------------------------------------------------------------- attention

/// f64 CPU MHA parameters for embed_dim 4: [in_proj_weight, in_proj_bias, out_w, out_b].
fn attention_params(seed: u64) -> Result<Vec<Tensor>> {
    Ok(vec![rand64(seed, &[12, 4])?, rand64(seed + 1, &[12])?, rand64(seed + 2, &[4, 4])?, rand64(seed + 3, &[4])?])
}

fn attention_from(params: &[Tensor], heads: usize) -> Result<MultiHeadAttention> {
    let out_proj = Linear::from_tensors(params[2].clone(), Some(params[3].clone()));
    MultiHeadAttention::from_tensors(params[0].clone(), Some(params[1].clone()), out_proj, heads)
}

fn attention_gradcheck_qkv_and_weights(device: Device) -> Result<()> {
    let (batch, len_q, len_k) = (2, 2, 3);
    let causal_like = Tensor::from_vec(vec![0u8, 1, 1, 0, 0, 1], (len_q, len_k), CPU)?;
    let padding = Tensor::from_vec(vec![0u8, 0, 0, 0, 1, 0], (batch, len_k), CPU)?;
    let float_mask = uniform(5, &[len_q, len_k], -2.0, 0.0)?;
    let masks = [(None, None), (Some(&causal_like), Some(&padding)), (Some(&float_mask), None)];
    for (i, (attn_mask, key_padding_mask)) in masks.into_iter().enumerate() {
        let seed = 10 * i as u64;
        let mut inputs = vec![
            rand64(seed, &[batch, len_q, 4])?,
            rand64(seed + 1, &[batch, len_k, 4])?,
            rand64(seed + 2, &[batch, len_k, 4])?,
        ];
        inputs.extend(attention_params(seed + 3)?);
        check_gradients(device, &inputs, |xs| {
            let on_device = |m: Option<&Tensor>| m.map(|m| like(m, &xs[0])).transpose();
            let (attn_mask, key_padding_mask) = (on_device(attn_mask)?, on_device(key_padding_mask)?);
            let mask = AttentionMasks {
                attn_mask: attn_mask.as_ref(),
                key_padding_mask: key_padding_mask.as_ref(),
                ..Default::default()
            };
            attention_from(&xs[3..], 2)?.forward_with(&xs[0], &xs[1], &xs[2], mask)
        })?;
    }
    Ok(())
}
test_device!(attention_gradcheck_qkv_and_weights_test, attention_gradcheck_qkv_and_weights);

fn self_attention_gradcheck_with_causal_mask(device: Device) -> Result<()> {
    let mut inputs = vec![rand64(1, &[2, 3, 4])?];
    inputs.extend(attention_params(2)?);
    // The same tensor as q, k and v takes the packed one-matmul projection.
    check_gradients(device, &inputs, |xs| {
        let mask = causal_mask(3, xs[0].device())?;
        attention_from(&xs[1..], 2)?.forward_qkv(&xs[0], &xs[0], &xs[0], Some(&mask))
    })?;
    check_gradients(device, &inputs, |xs| attention_from(&xs[1..], 1)?.forward(&xs[0]))
}
test_device!(self_attention_gradcheck_with_causal_mask_test, self_attention_gradcheck_with_causal_mask);

fn attention_packed_projection_matches_separate(device: Device) -> Result<()> {
    let dtype = widest_float(device);
    let attention = attention_from(&all_to(&attention_params(4)?, dtype, device)?, 2)?;
    let x = rnn_testutil::random(3, &[2, 3, 4], dtype, device)?;
    let copy = x.add_scalar(0.0)?; // same values, another tensor: the unpacked path
    let packed = attention.forward(&x)?;
    let separate = attention.forward_qkv(&x, &copy, &x, None)?;
    assert_close_on("packed and separate projections", &packed, &separate, tolerance(dtype).op);
    Ok(())
}
test_device!(attention_packed_projection_matches_separate_test, attention_packed_projection_matches_separate);

fn attention_masks_are_respected(device: Device) -> Result<()> {
    // Changing a key or value that is masked out must not change the output.
    let dtype = widest_float(device);
    let attention = attention_from(&all_to(&attention_params(8)?, dtype, device)?, 2)?;
    let rand = |seed| rnn_testutil::random(seed, &[1, 3, 4], dtype, device);
    let (q, k, v) = (rand(1)?, rand(2)?, rand(3)?);
    let causal = causal_mask(3, device)?;
    assert_eq!(causal.to_vec::<u8>()?, vec![0, 1, 1, 0, 0, 1, 0, 0, 0]);
    let first_query = |v: &Tensor| -> Result<Vec<f64>> {
        Ok(values(&attention.forward_qkv(&q, &k, v, Some(&causal))?.narrow(1, 0, 1)?))
    };
    let changed_last = Tensor::cat(&[v.narrow(1, 0, 2)?, v.narrow(1, 2, 1)?.add_scalar(5.0)?], 1)?;
    assert_eq!(first_query(&v)?, first_query(&changed_last)?);
    let changed_first = Tensor::cat(&[v.narrow(1, 0, 1)?.add_scalar(5.0)?, v.narrow(1, 1, 2)?], 1)?;
    assert_ne!(first_query(&v)?, first_query(&changed_first)?);
    // A u8 mask equals a float mask of -inf at the same places.
    let as_float =
        causal.where_cond(&Tensor::full(f64::NEG_INFINITY, (), dtype, device)?, &Tensor::zeros((), dtype, device)?)?;
    let from_u8 = values(&attention.forward_qkv(&q, &k, &v, Some(&causal))?);
    assert_eq!(from_u8, values(&attention.forward_qkv(&q, &k, &v, Some(&as_float))?));
    Ok(())
}
test_device!(attention_masks_are_respected_test, attention_masks_are_respected);

fn attention_init_follows_pytorch(device: Device) -> Result<()> {
    let mut vb = VarBuilder::new(device, widest_float(device), 11);
    let attention = MultiHeadAttention::new(8, 2, &mut vb)?;
    let named = attention.named_parameters();
    let names: Vec<&str> = named.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(names, ["in_proj_weight", "in_proj_bias", "out_proj.weight", "out_proj.bias"]);
    // The bounds rounded to the dtype may be a hair above the f64 ones.
    let slack = 1.0 + tolerance(vb.dtype()).op;
    let (xavier, out_bound) = ((6.0f64 / (8.0 + 24.0)).sqrt() * slack, (1.0 / 8f64.sqrt()) * slack);
    let in_w = values(&named[0].1);
    assert!(in_w.iter().all(|v| v.abs() <= xavier) && in_w.iter().any(|v| v.abs() > xavier / 2.0));
    assert!(values(&named[1].1).iter().all(|&v| v == 0.0));
    assert!(values(&named[2].1).iter().all(|v| v.abs() <= out_bound));
    assert!(values(&named[3].1).iter().all(|&v| v == 0.0));
    assert_eq!((attention.embed_dim(), attention.num_heads(), attention.head_dim()), (8, 2, 4));
    let no_bias = MultiHeadAttention::with_bias(8, 4, false, &mut vb)?;
    assert_eq!(no_bias.num_parameters(), 3 * 64 + 64);
    Ok(())
}
test_device!(attention_init_follows_pytorch_test, attention_init_follows_pytorch);

fn attention_errors(device: Device) -> Result<()> {
    let dtype = widest_float(device);
    let rand = |seed, shape: &[usize]| rnn_testutil::random(seed, shape, dtype, device);
    let mut vb = VarBuilder::new(device, dtype, 1);
    expect_err(MultiHeadAttention::new(5, 2, &mut vb), "divisible");
    expect_err(MultiHeadAttention::new(4, 0, &mut vb), "divisible");
    let attention = MultiHeadAttention::new(4, 2, &mut vb)?;
    let (q, kv) = (rand(1, &[2, 3, 4])?, rand(2, &[2, 5, 4])?);
    expect_err(attention.forward(&rand(0, &[3, 4])?), "embed_dim = 4");
    expect_err(attention.forward(&rand(0, &[2, 3, 6])?), "embed_dim = 4");
    expect_err(attention.forward_qkv(&q, &kv, &rand(0, &[2, 4, 4])?, None), "disagree");
    expect_err(attention.forward_qkv(&q, &kv, &kv, Some(&causal_mask(3, device)?)), "attn_mask must be");
    let u32_mask = Tensor::zeros((3, 5), DType::U32, device)?;
    expect_err(attention.forward_qkv(&q, &kv, &kv, Some(&u32_mask)), "must be u8");
    let bad_padding = Tensor::zeros((2, 3), DType::U8, device)?;
    let masks = AttentionMasks { attn_mask: None, key_padding_mask: Some(&bad_padding), ..Default::default() };
    expect_err(attention.forward_with(&q, &kv, &kv, masks), "key_padding_mask must be");
    // Batch 1 has every key padded: no query there can attend to anything.
    let all_padded = Tensor::from_vec(vec![0u8, 0, 1, 0, 0, 1, 1, 1, 1, 1], (2, 5), device)?;
    let masks = AttentionMasks { attn_mask: None, key_padding_mask: Some(&all_padded), ..Default::default() };
    expect_err(attention.forward_with(&q, &kv, &kv, masks), "every key for query 0 (batch 1");
    let bad_proj = Linear::from_tensors(rand(0, &[4, 3])?, None);
    expect_err(MultiHeadAttention::from_tensors(rand(0, &[12, 4])?, None, bad_proj, 2), "out_proj.weight");
    Ok(())
}
test_device!(attention_errors_test, attention_errors);

/// The same weights in f32 on the device and in f64 on the CPU give the same outputs up to
/// f32 rounding, masks included; the float mask comes in the device's widest float (f64 where
/// it has one), which the layer converts to the inputs' dtype.
fn sequence_layers_run_in_f32(device: Device) -> Result<()> {
    let f32_on = |ts: &[Tensor]| all_to(ts, DType::F32, device);
    let tol = tolerance(DType::F32).result;
    let weights = stack_weights(1, 4, 3, 4)?;
    let x = rand64(2, &[2, 5, 3])?;
    let out64 = Lstm::from_weights(layers_from(&weights), true)?.forward(&x)?;
    let out32 = Lstm::from_weights(layers_from(&f32_on(&weights)?), true)?.forward(&to(&x, DType::F32, device)?)?;
    assert_eq!((out32.dtype(), out32.device()), (DType::F32, device));
    assert_close_on("LSTM in f32", &out32, &out64, tol);

    let params = attention_params(3)?;
    let (q, kv) = (rand64(4, &[2, 3, 4])?, rand64(5, &[2, 4, 4])?);
    let padding = Tensor::from_vec(vec![0u8, 0, 0, 1, 0, 1, 0, 0], (2, 4), CPU)?;
    let mask = rand64(6, &[3, 4])?;
    let masks = AttentionMasks { attn_mask: Some(&mask), key_padding_mask: Some(&padding), ..Default::default() };
    let out64 = attention_from(&params, 2)?.forward_with(&q, &kv, &kv, masks)?;
    let (padding, mask) = (padding.to_device(device)?, to(&mask, widest_float(device), device)?);
    let masks = AttentionMasks { attn_mask: Some(&mask), key_padding_mask: Some(&padding), ..Default::default() };
    let (q32, kv32) = (to(&q, DType::F32, device)?, to(&kv, DType::F32, device)?);
    let out32 = attention_from(&f32_on(&params)?, 2)?.forward_with(&q32, &kv32, &kv32, masks)?;
    assert_close_on("attention in f32", &out32, &out64, tol);
    Ok(())
}
test_device!(sequence_layers_run_in_f32_test, sequence_layers_run_in_f32);

// ---------------------------------------------------------------- PyTorch golden values

const FIXTURE: &str = include_str!("golden/sequence.json");

/// Our parameter names, in order, are PyTorch's.
fn check_names(case: &Value, ours: &[(String, Tensor)]) -> Check<()> {
    let ours: Vec<&str> = ours.iter().map(|(n, _)| n.as_str()).collect();
    let torch: Vec<&str> = case["param_names"].as_array().into_iter().flatten().filter_map(|n| n.as_str()).collect();
    match ours == torch {
        true => Ok(()),
        false => Err(format!("parameter names {ours:?} differ from torch's {torch:?}")),
    }
}

/// Output and gradient tolerances of a golden case in `dtype` on `device`.
fn golden_tols(dtype: DType, device: Device) -> (f64, f64) {
    let tol = tolerance(dtype);
    (tol_on(device, tol.result), tol_on(device, tol.grad))
}

fn recurrent_case(case: &Value, dtype: DType, device: Device) -> Check<f64> {
    let load = |v: &Value| golden::tensor(v, dtype, device).map(|t| t.requires_grad());
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
    let (tol_out, tol_grad) = golden_tols(dtype, device);
    golden::check_outputs_and_grads(case, &outputs, &vars, tol_out, tol_grad)
}

fn attention_case(case: &Value, dtype: DType, device: Device) -> Check<f64> {
    let err = |e: Error| e.to_string();
    let load = |v: &Value| golden::tensor(v, dtype, device).map(|t| t.requires_grad());
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
    let mask = |key: &str| case.get(key).map(|m| golden::tensor(m, dtype, device)).transpose();
    let (attn_mask, key_padding_mask) = (mask("attn_mask")?, mask("key_padding_mask")?);
    let masks = AttentionMasks {
        attn_mask: attn_mask.as_ref(),
        key_padding_mask: key_padding_mask.as_ref(),
        ..Default::default()
    };
    let out = attention.forward_with(&q, &k, &v, masks).map_err(err)?;
    let case = serde_json::json!({"outputs": {"out": case["out"]}, "w": {"out": case["w"]}, "grads": case["grads"]});
    let (tol_out, tol_grad) = golden_tols(dtype, device);
    golden::check_outputs_and_grads(&case, &[("out", &out)], &vars, tol_out, tol_grad)
}

/// Runs every case of a section of the fixture in every checked dtype of `device`.
fn run_section(section: &str, device: Device, run: impl Fn(&Value, DType, Device) -> Check<f64>) {
    let doc: Value = serde_json::from_str(FIXTURE).expect("golden/sequence.json is valid JSON");
    let cases = doc[section].as_array().expect("section present");
    for dtype in checked_floats(device) {
        golden::run_cases(&format!("{section} in {dtype} on {device}"), cases, |c| run(c, dtype, device));
    }
}

fn golden_recurrent(device: Device) -> Result<()> {
    run_section("recurrent", device, recurrent_case);
    Ok(())
}
test_device!(golden_recurrent_test, golden_recurrent);

fn golden_attention(device: Device) -> Result<()> {
    run_section("attention", device, attention_case);
    Ok(())
}
test_device!(golden_attention_test, golden_attention);
