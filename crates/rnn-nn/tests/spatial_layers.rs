//! Conv2d, pooling, normalization, Dropout, Embedding and Flatten on every device: gradient
//! checks w.r.t. inputs and parameters (finite differences on the CPU, the CPU's f64 gradients
//! elsewhere), train/eval behaviour, running statistics, error paths, and PyTorch golden values
//! (`golden/spatial.json`, from `golden/make_spatial_golden.py`) in every checked dtype.

use rand::rngs::StdRng;
use rand::SeedableRng;
use rnn_core::{manual_seed, DType, Device, Error, Result, Tensor};
use rnn_nn::{
    pad2d, AvgPool2d, BatchNorm1d, BatchNorm2d, BatchNormConfig, Conv2d, Conv2dConfig, Dropout, Embedding, Flatten,
    LayerNorm, LayerNormConfig, MaxPool2d, Module, Pool2dConfig, VarBuilder,
};
use rnn_testutil::golden::{self, get, stored, Check};
use rnn_testutil::{
    check_gradients, checked_floats, is_invalid, like, lock_global_rng, rand64, random, test_device, to, tol_on,
    tolerance, values, widest_float,
};
use serde_json::Value;

const CPU: Device = Device::Cpu;

fn conv_cfg(stride: usize, padding: usize, dilation: usize, groups: usize) -> Conv2dConfig {
    Conv2dConfig {
        stride: (stride, stride),
        padding: (padding, padding),
        dilation: (dilation, dilation),
        groups,
        bias: true,
    }
}

// ---------------------------------------------------------------- gradient checks

fn conv2d_gradcheck_input_weight_bias(device: Device) -> Result<()> {
    // (in, out, kernel, config, input h x w)
    let cases = [
        (2, 2, (3, 3), conv_cfg(2, 1, 1, 1), (5, 5)),
        (2, 2, (2, 2), conv_cfg(1, 0, 2, 1), (5, 4)),
        (4, 2, (3, 2), conv_cfg(1, 1, 1, 2), (4, 4)),
        (2, 4, (3, 3), conv_cfg(2, 1, 2, 2), (6, 5)),
        (2, 2, (1, 1), conv_cfg(1, 0, 1, 1), (2, 3)),
    ];
    for (i, (cin, cout, k, cfg, (h, w))) in cases.into_iter().enumerate() {
        let seed = 10 * i as u64;
        let x = rand64(seed, &[2, cin, h, w])?;
        let weight = rand64(seed + 1, &[cout, cin / cfg.groups, k.0, k.1])?;
        let bias = rand64(seed + 2, &[cout])?;
        check_gradients(device, &[x, weight, bias], |xs| {
            Conv2d::from_tensors(xs[1].clone(), Some(xs[2].clone()), cfg)?.forward(&xs[0])
        })?;
    }
    // Without a bias, and with unequal strides / padding.
    let cfg = Conv2dConfig { stride: (1, 2), padding: (0, 1), bias: false, ..Conv2dConfig::default() };
    let (x, weight) = (rand64(50, &[1, 2, 4, 5])?, rand64(51, &[3, 2, 2, 3])?);
    check_gradients(device, &[x, weight], |xs| Conv2d::from_tensors(xs[1].clone(), None, cfg)?.forward(&xs[0]))
}
test_device!(conv2d_gradcheck_input_weight_bias_test, conv2d_gradcheck_input_weight_bias);

fn pool_gradchecks_with_padding(device: Device) -> Result<()> {
    let x = rand64(1, &[2, 2, 5, 6])?;
    let cfg = Pool2dConfig { stride: Some((2, 2)), padding: (1, 1), ..Pool2dConfig::default() };
    let max = MaxPool2d::with_config((3, 3), cfg)?;
    check_gradients(device, std::slice::from_ref(&x), |xs| max.forward(&xs[0]))?;
    let avg = AvgPool2d::with_config((3, 3), cfg)?;
    check_gradients(device, std::slice::from_ref(&x), |xs| avg.forward(&xs[0]))?;
    let dilated = Pool2dConfig { stride: Some((1, 2)), padding: (1, 0), dilation: (2, 1) };
    let max = MaxPool2d::with_config((2, 2), dilated)?;
    check_gradients(device, std::slice::from_ref(&x), |xs| max.forward(&xs[0]))?;
    check_gradients(device, &[x], |xs| AvgPool2d::new((2, 2))?.forward(&xs[0]))
}
test_device!(pool_gradchecks_with_padding_test, pool_gradchecks_with_padding);

/// A fresh BatchNorm (rank 4: 2d, else 1d) from tensors, with fresh running statistics.
fn batch_norm(xs: &[Tensor], training: bool) -> Result<Box<dyn Module>> {
    let c = xs[1].dims()[0];
    let (dtype, device) = (xs[0].dtype(), xs[0].device());
    let (mean, var) = (Tensor::zeros(c, dtype, device)?, Tensor::ones(c, dtype, device)?);
    let (w, b, cfg) = (Some(xs[1].clone()), Some(xs[2].clone()), BatchNormConfig::default());
    let mut layer: Box<dyn Module> = match xs[0].rank() {
        4 => Box::new(BatchNorm2d::from_tensors(w, b, mean, var, cfg)?),
        _ => Box::new(BatchNorm1d::from_tensors(w, b, mean, var, cfg)?),
    };
    layer.set_training(training);
    Ok(layer)
}

fn batch_norm_gradcheck_train_and_eval(device: Device) -> Result<()> {
    for (i, shape) in [vec![4, 3], vec![3, 2, 4], vec![2, 3, 2, 3]].into_iter().enumerate() {
        let c = shape[1];
        let x = rand64(i as u64, &shape)?;
        let (w, b) = (rand64(100 + i as u64, &[c])?.add_scalar(1.5)?, rand64(200 + i as u64, &[c])?);
        for training in [true, false] {
            let inputs = [x.clone(), w.clone(), b.clone()];
            check_gradients(device, &inputs, |xs| batch_norm(xs, training)?.forward(&xs[0]))?;
        }
    }
    Ok(())
}
test_device!(batch_norm_gradcheck_train_and_eval_test, batch_norm_gradcheck_train_and_eval);

fn layer_norm_gradcheck(device: Device) -> Result<()> {
    let x = rand64(3, &[2, 3, 4])?;
    for shape in [vec![4], vec![3, 4]] {
        let (w, b) = (rand64(4, &shape)?.add_scalar(1.5)?, rand64(5, &shape)?);
        check_gradients(device, &[x.clone(), w, b], |xs| {
            LayerNorm::from_tensors(&shape, Some(xs[1].clone()), Some(xs[2].clone()), 1e-5)?.forward(&xs[0])
        })?;
    }
    Ok(())
}
test_device!(layer_norm_gradcheck_test, layer_norm_gradcheck);

fn embedding_gradcheck_and_shapes(device: Device) -> Result<()> {
    let ids = Tensor::from_vec(vec![1u32, 4, 1, 0, 2, 4], (2, 3), CPU)?;
    check_gradients(device, &[rand64(6, &[5, 3])?], |xs| {
        Embedding::from_tensors(xs[0].clone())?.forward(&like(&ids, &xs[0])?)
    })?;
    let layer = Embedding::new(10, 4, &mut VarBuilder::new(device, DType::F32, 0))?;
    let ids = Tensor::from_vec(vec![9i64, 0, 3, 3, 7, 1, 2, 8], (2, 2, 2), device)?;
    let out = layer.forward(&ids)?;
    assert_eq!(out.dims(), &[2, 2, 2, 4]);
    // Row of id 3 appears twice, identical to the weight's row 3.
    let row3 = layer.weight().narrow(0, 3, 1)?.to_vec::<f32>()?;
    assert_eq!(out.reshape((8, 4))?.narrow(0, 2, 1)?.to_vec::<f32>()?, row3);
    assert_eq!(out.reshape((8, 4))?.narrow(0, 3, 1)?.to_vec::<f32>()?, row3);
    assert_eq!(layer.forward(&Tensor::scalar(5u32, device)?)?.dims(), &[4]);
    Ok(())
}
test_device!(embedding_gradcheck_and_shapes_test, embedding_gradcheck_and_shapes);

/// Everything that uses the global generator lives in this one body, which holds
/// `lock_global_rng` so that its device arms, running in parallel, cannot draw from it between
/// a `manual_seed` and the draw it is meant to fix.
fn dropout_masks_scales_and_is_reproducible(device: Device) -> Result<()> {
    let _rng = lock_global_rng();
    let dtype = widest_float(device);
    let tol = tol_on(device, tolerance(dtype).op);
    let p = 0.4;
    let mut drop = Dropout::new(p)?;
    let x64 = rand64(7, &[6, 5])?.add_scalar(3.0)?; // no zeros, so the mask can be read off y
    let x = to(&x64, dtype, device)?;
    manual_seed(11);
    let xv = x.requires_grad();
    let y = drop.forward(&xv)?;
    assert_eq!((y.dtype(), y.device()), (dtype, device));
    let grads = y.sum_all()?.backward()?;
    let (yv, xs) = (values(&y), values(&x));
    let mask: Vec<f64> = yv.iter().map(|&v| if v == 0.0 { 0.0 } else { 1.0 }).collect();
    for ((&yi, &xi), &m) in yv.iter().zip(&xs).zip(&mask) {
        assert!((yi - m * xi / (1.0 - p)).abs() <= tol * (1.0 + yi.abs()), "{yi} vs {}", m * xi / (1.0 - p));
    }
    let expected: Vec<f64> = mask.iter().map(|m| m / (1.0 - p)).collect();
    let grad = values(grads.get(&xv).expect("x gets a gradient"));
    assert!(grad.iter().zip(&expected).all(|(a, b)| (a - b).abs() <= tol * (1.0 + b)), "{grad:?} vs {expected:?}");
    // The same seed gives the same mask.
    manual_seed(11);
    assert_eq!(values(&drop.forward(&x)?), yv);
    // About p of a large tensor is dropped.
    manual_seed(12);
    let big = drop.forward(&Tensor::ones(20_000, DType::F32, device)?)?;
    let zeros = values(&big.eq_scalar(0.0)?.to_dtype(DType::F32)?.mean_all()?)[0];
    assert!((zeros - p).abs() < 0.02, "dropped fraction {zeros}");
    check_gradients(device, std::slice::from_ref(&x64), |xs| {
        manual_seed(13);
        drop.forward(&xs[0])
    })?;
    // Eval mode and p = 0 are the identity.
    drop.set_training(false);
    assert_eq!(values(&drop.forward(&x)?), xs);
    assert_eq!(values(&Dropout::new(0.0)?.forward(&x)?), xs);
    Ok(())
}
test_device!(dropout_masks_scales_and_is_reproducible_test, dropout_masks_scales_and_is_reproducible);

// ---------------------------------------------------------------- behaviour

fn batch_norm_running_statistics_and_eval(device: Device) -> Result<()> {
    let dtype = widest_float(device);
    let tol = tol_on(device, tolerance(dtype).op);
    let mut bn = BatchNorm2d::new(2, &mut VarBuilder::new(device, dtype, 0))?;
    let x = random(21, &[3, 2, 2, 2], dtype, device)?.mul_scalar(2.0)?.add_scalar(0.5)?;
    let y = bn.forward(&x)?;
    // Training output: per-channel zero mean, unit (biased) variance.
    let mean = values(&y.mean([0, 2, 3])?);
    let var = values(&y.sqr()?.mean([0, 2, 3])?);
    assert!(mean.iter().all(|m| m.abs() < tol), "{mean:?}");
    assert!(var.iter().all(|v| (v - 1.0).abs() < 1e-3), "{var:?}");
    // Running statistics: 0.9 * initial + 0.1 * batch, with the unbiased variance.
    let per_channel = x.permute(&[1, 0, 2, 3])?.reshape((2, 12))?;
    let (bm, bv) = (values(&per_channel.mean(1)?), values(&per_channel.var(1)?));
    let rm = values(bn.running_mean());
    let rv = values(bn.running_var());
    for c in 0..2 {
        assert!((rm[c] - 0.1 * bm[c]).abs() < tol, "running mean {rm:?}");
        assert!((rv[c] - (0.9 + 0.1 * bv[c])).abs() < tol, "running var {rv:?}");
    }
    let names: Vec<String> = bn.named_buffers().into_iter().map(|(n, _)| n).collect();
    assert_eq!(names, ["running_mean", "running_var"]);
    let names: Vec<String> = bn.named_parameters().into_iter().map(|(n, _)| n).collect();
    assert_eq!(names, ["weight", "bias"]);
    // Eval: normalized with the running statistics, which stay as they are.
    bn.set_training(false);
    let y = values(&bn.forward(&x)?);
    let xs = values(&x);
    for (i, (&yi, &xi)) in y.iter().zip(&xs).enumerate() {
        let c = (i / 4) % 2;
        let want = (xi - rm[c]) / (rv[c] + 1e-5).sqrt();
        assert!((yi - want).abs() < tol * (1.0 + want.abs()), "eval output {yi} vs {want}");
    }
    assert_eq!(values(bn.running_mean()), rm);
    Ok(())
}
test_device!(batch_norm_running_statistics_and_eval_test, batch_norm_running_statistics_and_eval);

/// `forward_relu` and `forward_add_relu` (the epilogues fused into the normalization) give
/// `relu(forward(x))` and `relu(forward(x) + r)`, with the same running statistics after, in
/// training and in eval mode.
fn batch_norm_fused_epilogues(device: Device) -> Result<()> {
    let dtype = widest_float(device);
    let tol = tol_on(device, tolerance(dtype).op);
    let (x, r) = (random(31, &[2, 3, 4, 3], dtype, device)?, random(32, &[2, 3, 4, 3], dtype, device)?);
    let near = |a: &Tensor, b: &Tensor| -> Result<()> {
        let worst = values(a).iter().zip(values(b)).map(|(a, b)| (a - b).abs()).fold(0.0, f64::max);
        assert!(worst < tol * 4.0, "largest difference {worst}");
        Ok(())
    };
    for training in [true, false] {
        let layers: Vec<BatchNorm2d> = (0..3)
            .map(|_| {
                let mut bn = BatchNorm2d::new(3, &mut VarBuilder::new(device, dtype, 0))?;
                bn.set_training(training);
                Ok(bn)
            })
            .collect::<Result<_>>()?;
        let y = layers[0].forward(&x)?;
        near(&layers[1].forward_relu(&x)?, &y.relu()?)?;
        near(&layers[2].forward_add_relu(&x, &r)?, &y.add(&r)?.relu()?)?;
        for bn in &layers[1..] {
            near(bn.running_mean(), layers[0].running_mean())?;
            near(bn.running_var(), layers[0].running_var())?;
        }
    }
    Ok(())
}
test_device!(batch_norm_fused_epilogues_test, batch_norm_fused_epilogues);

fn layer_norm_without_affine_normalizes_last_dims(device: Device) -> Result<()> {
    let cfg = LayerNormConfig { elementwise_affine: false, ..LayerNormConfig::default() };
    let mut vb = VarBuilder::new(device, DType::F32, 0);
    let ln = LayerNorm::with_config(&[3, 4], cfg, &mut vb)?;
    assert_eq!(ln.num_parameters(), 0);
    let y = ln.forward(&random(8, &[2, 3, 4], DType::F32, device)?)?;
    let mean = values(&y.mean([1, 2])?);
    assert!(mean.iter().all(|m| m.abs() < 1e-6), "{mean:?}");
    assert_eq!(LayerNorm::new(&[4], &mut vb)?.num_parameters(), 8);
    Ok(())
}
test_device!(layer_norm_without_affine_normalizes_last_dims_test, layer_norm_without_affine_normalizes_last_dims);

fn shapes_and_initialization(device: Device) -> Result<()> {
    let mut vb = VarBuilder::new(device, DType::F32, 1);
    let cfg = Conv2dConfig { padding: (1, 1), groups: 2, ..Conv2dConfig::default() };
    let conv = Conv2d::new(4, 6, (3, 3), cfg, &mut vb)?;
    assert_eq!(conv.weight().dims(), &[6, 2, 3, 3]);
    assert_eq!(conv.weight().device(), device);
    let bound = 1.0 / (2.0f64 * 9.0).sqrt();
    let all_in = |t: &Tensor| values(t).iter().all(|v| v.abs() <= bound);
    assert!(all_in(conv.weight()) && all_in(conv.bias().expect("bias")));
    let x = Tensor::ones((2, 4, 7, 5), DType::F32, device)?;
    assert_eq!(conv.forward(&x)?.dims(), &[2, 6, 7, 5]);
    assert_eq!(MaxPool2d::new((2, 2))?.forward(&x)?.dims(), &[2, 4, 3, 2]);
    assert_eq!(Flatten::default().forward(&x)?.dims(), &[2, 140]);
    assert_eq!(Flatten::new(1, 2).forward(&x)?.dims(), &[2, 28, 5]);
    let bn = BatchNorm1d::new(3, &mut vb)?;
    assert_eq!(bn.forward(&random(1, &[4, 3, 2], DType::F32, device)?)?.dims(), &[4, 3, 2]);
    Ok(())
}
test_device!(shapes_and_initialization_test, shapes_and_initialization);

fn pad2d_pads_the_last_two_dims(device: Device) -> Result<()> {
    let x = rnn_testutil::tensor(&[1.0, 2.0, 3.0, 4.0], &[1, 2, 2], widest_float(device), device);
    let y = pad2d(&x, (1, 0, 0, 2), -1.0)?;
    assert_eq!(y.dims(), &[1, 3, 4]);
    let want = [-1.0, -1.0, -1.0, -1.0, 1.0, 2.0, -1.0, -1.0, 3.0, 4.0, -1.0, -1.0];
    assert_eq!(values(&y), want);
    assert!(pad2d(&Tensor::ones(3, DType::F32, device)?, (1, 1, 1, 1), 0.0).is_err());
    Ok(())
}
test_device!(pad2d_pads_the_last_two_dims_test, pad2d_pads_the_last_two_dims);

// ---------------------------------------------------------------- errors

fn bad_configs_and_inputs_are_errors(device: Device) -> Result<()> {
    let mut vb = VarBuilder::new(device, DType::F32, 0);
    let groups3 = Conv2dConfig { groups: 3, ..Conv2dConfig::default() };
    assert!(is_invalid(Conv2d::new(4, 6, (3, 3), groups3, &mut vb)));
    assert!(is_invalid(Conv2d::new(2, 2, (0, 3), Conv2dConfig::default(), &mut vb)));
    let zero_stride = Conv2dConfig { stride: (0, 1), ..Conv2dConfig::default() };
    assert!(is_invalid(Conv2d::new(2, 2, (3, 3), zero_stride, &mut vb)));
    let conv = Conv2d::new(3, 2, (3, 3), Conv2dConfig::default(), &mut vb)?;
    let x = |shape: &[usize]| Tensor::ones(shape, DType::F32, device);
    assert!(is_invalid(conv.forward(&x(&[1, 2, 5, 5])?)), "channel mismatch");
    assert!(matches!(conv.forward(&x(&[3, 5, 5])?), Err(Error::RankMismatch { .. })));
    assert!(is_invalid(conv.forward(&x(&[1, 3, 2, 5])?)), "kernel larger than the input");
    let padded = Conv2d::new(3, 2, (3, 3), Conv2dConfig { padding: (1, 1), ..Default::default() }, &mut vb)?;
    assert_eq!(padded.forward(&x(&[1, 3, 1, 1])?)?.dims(), &[1, 2, 1, 1], "fits once padded");
    let huge = Conv2dConfig { padding: (usize::MAX / 2 + 1, 0), dilation: (1, usize::MAX), ..Default::default() };
    assert!(is_invalid(Conv2d::new(3, 2, (3, 3), huge, &mut vb)?.forward(&x(&[1, 3, 5, 5])?)), "overflow");
    assert!(is_invalid(MaxPool2d::new((usize::MAX, 1))?.forward(&x(&[1, 1, 3, 3])?)));
    let ids = Tensor::from_vec(vec![1u32], 1, device)?;
    assert!(matches!(conv.forward(&ids.reshape((1, 1, 1, 1))?), Err(Error::UnsupportedDType { .. })));
    assert!(Conv2d::from_tensors(x(&[2, 3, 3])?, None, Conv2dConfig::default()).is_err());
    let bad_pad = Pool2dConfig { padding: (2, 0), ..Pool2dConfig::default() };
    assert!(is_invalid(MaxPool2d::with_config((3, 3), bad_pad)));
    assert!(is_invalid(AvgPool2d::new((0, 2))));
    assert!(is_invalid(MaxPool2d::new((4, 4))?.forward(&x(&[1, 1, 3, 8])?)));
    for p in [1.0, 1.5, -0.1, f64::NAN] {
        assert!(is_invalid(Dropout::new(p)), "p = {p}");
    }
    let emb = Embedding::new(4, 2, &mut vb)?;
    // A bad id is reported at once on the CPU, at the next sync point (the read-back) on a GPU.
    let looked_up = |ids: Vec<i64>| -> Result<Tensor> {
        let n = ids.len();
        emb.forward(&Tensor::from_vec(ids, n, device)?)?.to_device(Device::Cpu)
    };
    let out_of_range = looked_up(vec![0, 4]);
    assert!(matches!(out_of_range, Err(Error::IndexOutOfRange { index: 4, size: 4, .. })), "{out_of_range:?}");
    let negative = looked_up(vec![-1]);
    assert!(matches!(negative, Err(Error::IndexOutOfRange { index: -1, .. })), "{negative:?}");
    // Float ids holding integers work; NaN, ±inf, fractions, negatives and ids out of range are
    // errors naming the value and its position, never cast into some id (NaN into 0, 1.5 into 1).
    let float_ids = |ids: Vec<f32>| -> Result<Tensor> {
        let n = ids.len();
        emb.forward(&Tensor::from_vec(ids, n, device)?)
    };
    assert_eq!(values(&float_ids(vec![3.0, 0.0])?), values(&looked_up(vec![3, 0])?));
    let bad_ids = [(f32::NAN, "NaN"), (f32::INFINITY, "inf"), (1.5, "1.5"), (-1.0, "-1"), (4.0, "4")];
    for (bad, shown) in bad_ids {
        match float_ids(vec![0.0, 2.0, bad]) {
            Err(e @ Error::InvalidArgument { op: "Embedding", .. }) => {
                let msg = e.to_string();
                assert!(msg.contains(&format!("id 2 is {shown};")) && msg.contains("0..4"), "{msg}");
            }
            other => panic!("id {bad}: {other:?}"),
        }
    }
    let bn = BatchNorm2d::new(3, &mut vb)?;
    assert!(is_invalid(bn.forward(&x(&[2, 4, 2, 2])?)), "channel mismatch");
    assert!(is_invalid(bn.forward(&x(&[2, 3, 2])?)), "rank");
    assert!(is_invalid(BatchNorm1d::new(3, &mut vb)?.forward(&x(&[1, 3])?)), "one value per channel");
    assert!(is_invalid(BatchNorm1d::new(0, &mut vb)));
    let ln = LayerNorm::new(&[3, 4], &mut vb)?;
    assert!(is_invalid(ln.forward(&x(&[2, 4, 3])?)));
    assert!(is_invalid(LayerNorm::new(&[], &mut vb)));
    assert!(Flatten::default().forward(&x(&[3])?).is_err());
    Ok(())
}
test_device!(bad_configs_and_inputs_are_errors_test, bad_configs_and_inputs_are_errors);

// ---------------------------------------------------------------- PyTorch golden values

const GOLDEN: &str = include_str!("golden/spatial.json");

fn pair(v: &Value, key: &str) -> Check<(usize, usize)> {
    let p: Vec<usize> = serde_json::from_value(get(v, key)?.clone()).map_err(|e| e.to_string())?;
    match p[..] {
        [a, b] => Ok((a, b)),
        _ => Err(format!("'{key}' is not a pair")),
    }
}

fn number(v: &Value, key: &str) -> Check<f64> {
    get(v, key)?.as_f64().ok_or_else(|| format!("'{key}' is not a number"))
}

/// The case's stored tensor `name` in `dtype` on `device` (a variable when `trainable`), if
/// any.
fn case_tensor(case: &Value, name: &str, trainable: bool, dtype: DType, device: Device) -> Check<Option<Tensor>> {
    let Some(v) = get(case, "tensors")?.get(name) else { return Ok(None) };
    let t = golden::tensor(v, dtype, device)?;
    Ok(Some(if trainable { t.requires_grad() } else { t }))
}

/// Builds the case's layer with our API from its stored parameters and buffers.
fn golden_layer(case: &Value, dtype: DType, device: Device) -> Check<Box<dyn Module>> {
    let layer = get(case, "layer")?;
    let tensor = |name: &str, trainable: bool| case_tensor(case, name, trainable, dtype, device);
    let (weight, bias) = (tensor("weight", true)?, tensor("bias", true)?);
    let kind = get(layer, "kind")?.as_str().unwrap_or_default();
    let pool_cfg = || -> Check<Pool2dConfig> {
        let stride = match get(layer, "stride")? {
            Value::Null => None,
            _ => Some(pair(layer, "stride")?),
        };
        Ok(Pool2dConfig { stride, padding: pair(layer, "padding")?, dilation: pair(layer, "dilation")? })
    };
    let built: Result<Box<dyn Module>> = match kind {
        "conv2d" => {
            let groups = get(layer, "groups")?.as_u64().ok_or("groups")? as usize;
            let (stride, padding, dilation) =
                (pair(layer, "stride")?, pair(layer, "padding")?, pair(layer, "dilation")?);
            let cfg = Conv2dConfig { stride, padding, dilation, groups, bias: bias.is_some() };
            Conv2d::from_tensors(weight.ok_or("weight")?, bias, cfg).map(|l| Box::new(l) as _)
        }
        "max_pool2d" => MaxPool2d::with_config(pair(layer, "kernel")?, pool_cfg()?).map(|l| Box::new(l) as _),
        "avg_pool2d" => AvgPool2d::with_config(pair(layer, "kernel")?, pool_cfg()?).map(|l| Box::new(l) as _),
        "batch_norm1d" | "batch_norm2d" => {
            let (mean, var) =
                (tensor("running_mean", false)?.ok_or("mean")?, tensor("running_var", false)?.ok_or("var")?);
            let cfg =
                BatchNormConfig { eps: number(layer, "eps")?, momentum: number(layer, "momentum")?, affine: true };
            let mut l: Box<dyn Module> = match kind {
                "batch_norm1d" => {
                    Box::new(BatchNorm1d::from_tensors(weight, bias, mean, var, cfg).map_err(|e| e.to_string())?)
                }
                _ => Box::new(BatchNorm2d::from_tensors(weight, bias, mean, var, cfg).map_err(|e| e.to_string())?),
            };
            l.set_training(get(layer, "training")?.as_bool().ok_or("training")?);
            Ok(l)
        }
        "layer_norm" => {
            let shape: Vec<usize> =
                serde_json::from_value(get(layer, "normalized_shape")?.clone()).map_err(|e| e.to_string())?;
            LayerNorm::from_tensors(&shape, weight, bias, number(layer, "eps")?).map(|l| Box::new(l) as _)
        }
        "embedding" => Embedding::from_tensors(weight.ok_or("weight")?).map(|l| Box::new(l) as _),
        other => return Err(format!("unknown layer kind '{other}'")),
    };
    built.map_err(|e| e.to_string())
}

/// Runs one case in `dtype` on `device`: forward, gradients of `sum(out * w)`, and buffers
/// after the pass.
fn run_golden_case(case: &Value, dtype: DType, device: Device) -> Check<f64> {
    let tol = tolerance(dtype);
    let (tol_out, tol_grad) = (tol_on(device, tol.result), tol_on(device, tol.grad));
    let e = |e: Error| e.to_string();
    let layer = golden_layer(case, dtype, device)?;
    let (x_shape, x_data) = stored(get(get(case, "tensors")?, "x")?)?;
    let is_ids = get(get(case, "layer")?, "kind")? == "embedding";
    let x = match is_ids {
        true => Tensor::from_vec(x_data.iter().map(|&v| v as i64).collect::<Vec<_>>(), x_shape, device).map_err(e)?,
        false => golden::tensor(get(get(case, "tensors")?, "x")?, dtype, device)?.requires_grad(),
    };
    let out = layer.forward(&x).map_err(e)?;
    let w = golden::tensor(get(case, "w")?, dtype, device)?;
    let grads = out.mul(&w).and_then(|l| l.sum_all()?.backward()).map_err(e)?;
    let mut worst = golden::compare("out", &out, get(case, "out")?, tol_out)?;
    let mut named: Vec<(String, Tensor)> = layer.named_parameters();
    if !is_ids {
        named.push(("x".into(), x.clone()));
    }
    let want_grads = get(case, "grads")?.as_object().ok_or("grads")?;
    if want_grads.len() != named.len() {
        return Err(format!("torch has gradients for {:?}, we have {} tensors", want_grads.keys(), named.len()));
    }
    for (name, t) in &named {
        let g = grads.get(t).ok_or_else(|| format!("no gradient for {name}"))?;
        worst = worst.max(golden::compare(&format!("grad {name}"), g, get(get(case, "grads")?, name)?, tol_grad)?);
    }
    for (name, t) in layer.named_buffers() {
        worst = worst.max(golden::compare(&name, &t, get(get(case, "buffers")?, &name)?, tol_out)?);
    }
    Ok(worst)
}

fn matches_pytorch_golden_values(device: Device) -> Result<()> {
    let doc: Value = serde_json::from_str(GOLDEN).expect("spatial.json parses");
    let cases = doc["cases"].as_array().expect("cases");
    assert!(cases.len() >= 15, "only {} cases", cases.len());
    for dtype in checked_floats(device) {
        golden::run_cases(&format!("spatial in {dtype} on {device}"), cases, |c| run_golden_case(c, dtype, device));
    }
    Ok(())
}
test_device!(matches_pytorch_golden_values_test, matches_pytorch_golden_values);

// ---------------------------------------------------------------- timing (measured, not asserted)

/// Forward + backward time of a small CNN on a batch of 128 28x28 images. Run with
/// `cargo test --release -p rnn-nn --test spatial_layers -- --ignored --nocapture`.
#[test]
#[ignore]
fn small_cnn_step_time() -> Result<()> {
    use rnn_nn::{cross_entropy, Activation, Linear, Sequential};
    let mut vb = VarBuilder::cpu(0);
    let pad1 = Conv2dConfig { padding: (1, 1), ..Conv2dConfig::default() };
    let model = Sequential::new()
        .add(Conv2d::new(1, 16, (3, 3), pad1, &mut vb)?)
        .add(Activation::Relu)
        .add(MaxPool2d::new((2, 2))?)
        .add(Conv2d::new(16, 32, (3, 3), pad1, &mut vb)?)
        .add(Activation::Relu)
        .add(MaxPool2d::new((2, 2))?)
        .add(Flatten::default())
        .add(Linear::new(32 * 7 * 7, 10, &mut vb)?);
    let mut rng = StdRng::seed_from_u64(0);
    let x = Tensor::rand_with(&mut rng, 0.0, 1.0, (128, 1, 28, 28), DType::F32, CPU)?;
    let targets = Tensor::from_vec((0..128u32).map(|i| i % 10).collect::<Vec<_>>(), 128, CPU)?;
    let step = || -> Result<std::time::Duration> {
        let start = std::time::Instant::now();
        let loss = cross_entropy(&model.forward(&x)?, &targets)?;
        let grads = loss.backward()?;
        assert_eq!(grads.len(), model.parameters().len());
        Ok(start.elapsed())
    };
    for _ in 0..3 {
        step()?;
    }
    let mut times: Vec<f64> = (0..20).map(|_| step().map(|t| t.as_secs_f64() * 1e3)).collect::<Result<_>>()?;
    times.sort_by(|a, b| a.total_cmp(b));
    println!("small CNN forward+backward, batch 128: median {:.2} ms, min {:.2} ms", times[10], times[0]);
    Ok(())
}
