//! Conv2d, pooling, normalization, Dropout, Embedding and Flatten: finite-difference gradient
//! checks w.r.t. inputs and parameters, train/eval behaviour, running statistics, error
//! paths, and PyTorch golden values (`golden/spatial.json`, from `golden/make_spatial_golden.py`).

use rand::rngs::StdRng;
use rand::SeedableRng;
use rnn_core::gradcheck::GradCheck;
use rnn_core::{manual_seed, DType, Device, Error, Result, Tensor};
use rnn_nn::{
    pad2d, AvgPool2d, BatchNorm1d, BatchNorm2d, BatchNormConfig, Conv2d, Conv2dConfig, Dropout, Embedding, Flatten,
    LayerNorm, LayerNormConfig, MaxPool2d, Module, Pool2dConfig, VarBuilder,
};
use serde_json::Value;

const CPU: Device = Device::Cpu;

/// A uniform f64 tensor in [-1, 1) from a local generator (the global one is left to Dropout).
fn rand64(seed: u64, shape: &[usize]) -> Result<Tensor> {
    Tensor::rand_with(&mut StdRng::seed_from_u64(seed), -1.0, 1.0, shape, DType::F64, CPU)
}

/// Runs a gradient check and fails the test with its message when it does not pass.
fn gradcheck(inputs: &[Tensor], f: impl Fn(&[Tensor]) -> Result<Tensor>) -> Result<()> {
    let worst = GradCheck::default().run(inputs, f)?;
    assert!(worst < 1e-5, "gradcheck error {worst}");
    Ok(())
}

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

#[test]
fn conv2d_gradcheck_input_weight_bias() -> Result<()> {
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
        gradcheck(&[x, weight, bias], |xs| {
            Conv2d::from_tensors(xs[1].clone(), Some(xs[2].clone()), cfg)?.forward(&xs[0])
        })?;
    }
    // Without a bias, and with unequal strides / padding.
    let cfg = Conv2dConfig { stride: (1, 2), padding: (0, 1), bias: false, ..Conv2dConfig::default() };
    let (x, weight) = (rand64(50, &[1, 2, 4, 5])?, rand64(51, &[3, 2, 2, 3])?);
    gradcheck(&[x, weight], |xs| Conv2d::from_tensors(xs[1].clone(), None, cfg)?.forward(&xs[0]))
}

#[test]
fn pool_gradchecks_with_padding() -> Result<()> {
    let x = rand64(1, &[2, 2, 5, 6])?;
    let cfg = Pool2dConfig { stride: Some((2, 2)), padding: (1, 1), ..Pool2dConfig::default() };
    let max = MaxPool2d::with_config((3, 3), cfg)?;
    gradcheck(std::slice::from_ref(&x), |xs| max.forward(&xs[0]))?;
    let avg = AvgPool2d::with_config((3, 3), cfg)?;
    gradcheck(std::slice::from_ref(&x), |xs| avg.forward(&xs[0]))?;
    let dilated = Pool2dConfig { stride: Some((1, 2)), padding: (1, 0), dilation: (2, 1) };
    let max = MaxPool2d::with_config((2, 2), dilated)?;
    gradcheck(std::slice::from_ref(&x), |xs| max.forward(&xs[0]))?;
    gradcheck(&[x], |xs| AvgPool2d::new((2, 2))?.forward(&xs[0]))
}

/// A fresh BatchNorm (rank 4: 2d, else 1d) from tensors, with fresh running statistics.
fn batch_norm(xs: &[Tensor], training: bool) -> Result<Box<dyn Module>> {
    let c = xs[1].dims()[0];
    let (mean, var) = (Tensor::zeros(c, DType::F64, CPU)?, Tensor::ones(c, DType::F64, CPU)?);
    let (w, b, cfg) = (Some(xs[1].clone()), Some(xs[2].clone()), BatchNormConfig::default());
    let mut layer: Box<dyn Module> = match xs[0].rank() {
        4 => Box::new(BatchNorm2d::from_tensors(w, b, mean, var, cfg)?),
        _ => Box::new(BatchNorm1d::from_tensors(w, b, mean, var, cfg)?),
    };
    layer.set_training(training);
    Ok(layer)
}

#[test]
fn batch_norm_gradcheck_train_and_eval() -> Result<()> {
    for (i, shape) in [vec![4, 3], vec![3, 2, 4], vec![2, 3, 2, 3]].into_iter().enumerate() {
        let c = shape[1];
        let x = rand64(i as u64, &shape)?;
        let (w, b) = (rand64(100 + i as u64, &[c])?.add_scalar(1.5)?, rand64(200 + i as u64, &[c])?);
        for training in [true, false] {
            gradcheck(&[x.clone(), w.clone(), b.clone()], |xs| batch_norm(xs, training)?.forward(&xs[0]))?;
        }
    }
    Ok(())
}

#[test]
fn layer_norm_gradcheck() -> Result<()> {
    let x = rand64(3, &[2, 3, 4])?;
    for shape in [vec![4], vec![3, 4]] {
        let (w, b) = (rand64(4, &shape)?.add_scalar(1.5)?, rand64(5, &shape)?);
        gradcheck(&[x.clone(), w, b], |xs| {
            LayerNorm::from_tensors(&shape, Some(xs[1].clone()), Some(xs[2].clone()), 1e-5)?.forward(&xs[0])
        })?;
    }
    Ok(())
}

#[test]
fn embedding_gradcheck_and_shapes() -> Result<()> {
    let ids = Tensor::from_vec(vec![1u32, 4, 1, 0, 2, 4], (2, 3), CPU)?;
    gradcheck(&[rand64(6, &[5, 3])?], |xs| Embedding::from_tensors(xs[0].clone())?.forward(&ids))?;
    let layer = Embedding::new(10, 4, &mut VarBuilder::cpu(0))?;
    let ids = Tensor::from_vec(vec![9i64, 0, 3, 3, 7, 1, 2, 8], (2, 2, 2), CPU)?;
    let out = layer.forward(&ids)?;
    assert_eq!(out.dims(), &[2, 2, 2, 4]);
    // Row of id 3 appears twice, identical to the weight's row 3.
    let row3 = layer.weight().narrow(0, 3, 1)?.to_vec::<f32>()?;
    assert_eq!(out.reshape((8, 4))?.narrow(0, 2, 1)?.to_vec::<f32>()?, row3);
    assert_eq!(out.reshape((8, 4))?.narrow(0, 3, 1)?.to_vec::<f32>()?, row3);
    assert_eq!(layer.forward(&Tensor::scalar(5u32, CPU)?)?.dims(), &[4]);
    Ok(())
}

/// Everything that uses the global generator lives in this one test, so that tests running in
/// parallel cannot draw from it between a `manual_seed` and the draw it is meant to fix.
#[test]
fn dropout_masks_scales_and_is_reproducible() -> Result<()> {
    let p = 0.4;
    let mut drop = Dropout::new(p)?;
    let x = rand64(7, &[6, 5])?.add_scalar(3.0)?; // no zeros, so the mask can be read off y
    manual_seed(11);
    let xv = x.requires_grad();
    let y = drop.forward(&xv)?;
    let grads = y.sum_all()?.backward()?;
    let (yv, xs) = (y.to_vec::<f64>()?, x.to_vec::<f64>()?);
    let mask: Vec<f64> = yv.iter().map(|&v| if v == 0.0 { 0.0 } else { 1.0 }).collect();
    for ((&yi, &xi), &m) in yv.iter().zip(&xs).zip(&mask) {
        assert!((yi - m * xi / (1.0 - p)).abs() < 1e-12);
    }
    let expected: Vec<f64> = mask.iter().map(|m| m / (1.0 - p)).collect();
    let grad = grads.get(&xv).expect("x gets a gradient").to_vec::<f64>()?;
    assert!(grad.iter().zip(&expected).all(|(a, b)| (a - b).abs() < 1e-12), "{grad:?} vs {expected:?}");
    // The same seed gives the same mask.
    manual_seed(11);
    assert_eq!(drop.forward(&x)?.to_vec::<f64>()?, yv);
    // About p of a large tensor is dropped.
    manual_seed(12);
    let big = drop.forward(&Tensor::ones(20_000, DType::F32, CPU)?)?;
    let zeros = big.eq_scalar(0.0)?.to_dtype(DType::F64)?.mean_all()?.to_scalar::<f64>()?;
    assert!((zeros - p).abs() < 0.02, "dropped fraction {zeros}");
    gradcheck(std::slice::from_ref(&x), |xs| {
        manual_seed(13);
        drop.forward(&xs[0])
    })?;
    // Eval mode and p = 0 are the identity.
    drop.set_training(false);
    assert_eq!(drop.forward(&x)?.to_vec::<f64>()?, xs);
    assert_eq!(Dropout::new(0.0)?.forward(&x)?.to_vec::<f64>()?, xs);
    Ok(())
}

// ---------------------------------------------------------------- behaviour

#[test]
fn batch_norm_running_statistics_and_eval() -> Result<()> {
    let mut bn = BatchNorm2d::new(2, &mut VarBuilder::new(CPU, DType::F64, 0))?;
    let x = rand64(21, &[3, 2, 2, 2])?.mul_scalar(2.0)?.add_scalar(0.5)?;
    let y = bn.forward(&x)?;
    // Training output: per-channel zero mean, unit (biased) variance.
    let mean = y.mean([0, 2, 3])?.to_vec::<f64>()?;
    let var = y.sqr()?.mean([0, 2, 3])?.to_vec::<f64>()?;
    assert!(mean.iter().all(|m| m.abs() < 1e-12), "{mean:?}");
    assert!(var.iter().all(|v| (v - 1.0).abs() < 1e-3), "{var:?}");
    // Running statistics: 0.9 * initial + 0.1 * batch, with the unbiased variance.
    let per_channel = x.permute(&[1, 0, 2, 3])?.reshape((2, 12))?;
    let (bm, bv) = (per_channel.mean(1)?.to_vec::<f64>()?, per_channel.var(1)?.to_vec::<f64>()?);
    let rm = bn.running_mean().to_vec::<f64>()?;
    let rv = bn.running_var().to_vec::<f64>()?;
    for c in 0..2 {
        assert!((rm[c] - 0.1 * bm[c]).abs() < 1e-12);
        assert!((rv[c] - (0.9 + 0.1 * bv[c])).abs() < 1e-12);
    }
    let names: Vec<String> = bn.named_buffers().into_iter().map(|(n, _)| n).collect();
    assert_eq!(names, ["running_mean", "running_var"]);
    let names: Vec<String> = bn.named_parameters().into_iter().map(|(n, _)| n).collect();
    assert_eq!(names, ["weight", "bias"]);
    // Eval: normalized with the running statistics, which stay as they are.
    bn.set_training(false);
    let y = bn.forward(&x)?.to_vec::<f64>()?;
    let xs = x.to_vec::<f64>()?;
    for (i, (&yi, &xi)) in y.iter().zip(&xs).enumerate() {
        let c = (i / 4) % 2;
        assert!((yi - (xi - rm[c]) / (rv[c] + 1e-5).sqrt()).abs() < 1e-12);
    }
    assert_eq!(bn.running_mean().to_vec::<f64>()?, rm);
    Ok(())
}

#[test]
fn layer_norm_without_affine_normalizes_last_dims() -> Result<()> {
    let cfg = LayerNormConfig { elementwise_affine: false, ..LayerNormConfig::default() };
    let ln = LayerNorm::with_config(&[3, 4], cfg, &mut VarBuilder::cpu(0))?;
    assert_eq!(ln.num_parameters(), 0);
    let y = ln.forward(&rand64(8, &[2, 3, 4])?.to_dtype(DType::F32)?)?;
    let mean = y.mean([1, 2])?.to_vec::<f32>()?;
    assert!(mean.iter().all(|m| m.abs() < 1e-6), "{mean:?}");
    assert_eq!(LayerNorm::new(&[4], &mut VarBuilder::cpu(0))?.num_parameters(), 8);
    Ok(())
}

#[test]
fn shapes_and_initialization() -> Result<()> {
    let mut vb = VarBuilder::cpu(1);
    let cfg = Conv2dConfig { padding: (1, 1), groups: 2, ..Conv2dConfig::default() };
    let conv = Conv2d::new(4, 6, (3, 3), cfg, &mut vb)?;
    assert_eq!(conv.weight().dims(), &[6, 2, 3, 3]);
    let bound = 1.0 / (2.0f32 * 9.0).sqrt();
    let all_in = |t: &Tensor| Ok::<_, Error>(t.to_vec::<f32>()?.iter().all(|v| v.abs() <= bound));
    assert!(all_in(conv.weight())? && all_in(conv.bias().expect("bias"))?);
    let x = Tensor::ones((2, 4, 7, 5), DType::F32, CPU)?;
    assert_eq!(conv.forward(&x)?.dims(), &[2, 6, 7, 5]);
    assert_eq!(MaxPool2d::new((2, 2))?.forward(&x)?.dims(), &[2, 4, 3, 2]);
    assert_eq!(Flatten::default().forward(&x)?.dims(), &[2, 140]);
    assert_eq!(Flatten::new(1, 2).forward(&x)?.dims(), &[2, 28, 5]);
    let bn = BatchNorm1d::new(3, &mut vb)?;
    assert_eq!(bn.forward(&rand64(1, &[4, 3, 2])?.to_dtype(DType::F32)?)?.dims(), &[4, 3, 2]);
    Ok(())
}

#[test]
fn pad2d_pads_the_last_two_dims() -> Result<()> {
    let x = Tensor::from_vec(vec![1.0f64, 2.0, 3.0, 4.0], (1, 2, 2), CPU)?;
    let y = pad2d(&x, (1, 0, 0, 2), -1.0)?;
    assert_eq!(y.dims(), &[1, 3, 4]);
    let want = [-1.0, -1.0, -1.0, -1.0, 1.0, 2.0, -1.0, -1.0, 3.0, 4.0, -1.0, -1.0];
    assert_eq!(y.to_vec::<f64>()?, want);
    assert!(pad2d(&Tensor::ones(3, DType::F32, CPU)?, (1, 1, 1, 1), 0.0).is_err());
    Ok(())
}

// ---------------------------------------------------------------- errors

fn is_invalid<T>(r: Result<T>) -> bool {
    matches!(r, Err(Error::InvalidArgument { .. }))
}

#[test]
fn bad_configs_and_inputs_are_errors() -> Result<()> {
    let mut vb = VarBuilder::cpu(0);
    let groups3 = Conv2dConfig { groups: 3, ..Conv2dConfig::default() };
    assert!(is_invalid(Conv2d::new(4, 6, (3, 3), groups3, &mut vb)));
    assert!(is_invalid(Conv2d::new(2, 2, (0, 3), Conv2dConfig::default(), &mut vb)));
    let zero_stride = Conv2dConfig { stride: (0, 1), ..Conv2dConfig::default() };
    assert!(is_invalid(Conv2d::new(2, 2, (3, 3), zero_stride, &mut vb)));
    let conv = Conv2d::new(3, 2, (3, 3), Conv2dConfig::default(), &mut vb)?;
    let x = |shape: &[usize]| Tensor::ones(shape, DType::F32, CPU);
    assert!(is_invalid(conv.forward(&x(&[1, 2, 5, 5])?)), "channel mismatch");
    assert!(matches!(conv.forward(&x(&[3, 5, 5])?), Err(Error::RankMismatch { .. })));
    assert!(is_invalid(conv.forward(&x(&[1, 3, 2, 5])?)), "kernel larger than the input");
    let padded = Conv2d::new(3, 2, (3, 3), Conv2dConfig { padding: (1, 1), ..Default::default() }, &mut vb)?;
    assert_eq!(padded.forward(&x(&[1, 3, 1, 1])?)?.dims(), &[1, 2, 1, 1], "fits once padded");
    let huge = Conv2dConfig { padding: (usize::MAX / 2 + 1, 0), dilation: (1, usize::MAX), ..Default::default() };
    assert!(is_invalid(Conv2d::new(3, 2, (3, 3), huge, &mut vb)?.forward(&x(&[1, 3, 5, 5])?)), "overflow");
    assert!(is_invalid(MaxPool2d::new((usize::MAX, 1))?.forward(&x(&[1, 1, 3, 3])?)));
    let ids = Tensor::from_vec(vec![1u32], 1, CPU)?;
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
    let out_of_range = emb.forward(&Tensor::from_vec(vec![0i64, 4], 2, CPU)?);
    assert!(matches!(out_of_range, Err(Error::IndexOutOfRange { .. })), "{out_of_range:?}");
    assert!(matches!(emb.forward(&Tensor::from_vec(vec![-1i64], 1, CPU)?), Err(Error::IndexOutOfRange { .. })));
    assert!(matches!(emb.forward(&x(&[2])?), Err(Error::UnsupportedDType { .. })));
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

// ---------------------------------------------------------------- PyTorch golden values

const GOLDEN: &str = include_str!("golden/spatial.json");

type Check<T> = std::result::Result<T, String>;

fn get<'a>(v: &'a Value, key: &str) -> Check<&'a Value> {
    v.get(key).ok_or_else(|| format!("missing field '{key}'"))
}

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

/// A stored tensor `{"shape", "data"}`: flat f64 values.
fn stored(v: &Value) -> Check<(Vec<usize>, Vec<f64>)> {
    let shape = serde_json::from_value(get(v, "shape")?.clone()).map_err(|e| e.to_string())?;
    let data = serde_json::from_value(get(v, "data")?.clone()).map_err(|e| e.to_string())?;
    Ok((shape, data))
}

/// The case's stored tensor `name` as an f64 tensor (a variable when `trainable`), if any.
fn case_tensor(case: &Value, name: &str, trainable: bool) -> Check<Option<Tensor>> {
    let Some(v) = get(case, "tensors")?.get(name) else { return Ok(None) };
    let (shape, data) = stored(v)?;
    let t = Tensor::from_vec(data, shape, CPU).map_err(|e| e.to_string())?;
    Ok(Some(if trainable { t.requires_grad() } else { t }))
}

/// Builds the case's layer with our API from its stored parameters and buffers.
fn golden_layer(case: &Value) -> Check<Box<dyn Module>> {
    let layer = get(case, "layer")?;
    let tensor = |name: &str, trainable: bool| case_tensor(case, name, trainable);
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

/// Max `|ours - torch| / (1 + |torch|)`, or an error when the shapes differ.
fn compare(what: &str, ours: &Tensor, want: &Value) -> Check<f64> {
    let (shape, data) = stored(want)?;
    if ours.dims() != shape.as_slice() {
        return Err(format!("{what}: shape {:?}, torch has {shape:?}", ours.dims()));
    }
    let got = ours.to_vec::<f64>().map_err(|e| e.to_string())?;
    let errs = got.iter().zip(&data).map(|(a, b)| if a == b { 0.0 } else { (a - b).abs() / (1.0 + b.abs()) });
    Ok(errs.fold(0.0, f64::max))
}

/// Runs one case: forward, gradients of `sum(out * w)`, and buffers after the pass.
fn run_golden_case(case: &Value) -> Check<f64> {
    let layer = golden_layer(case)?;
    let (x_shape, x_data) = stored(get(get(case, "tensors")?, "x")?)?;
    let is_ids = get(get(case, "layer")?, "kind")? == "embedding";
    let x = match is_ids {
        true => Tensor::from_vec(x_data.iter().map(|&v| v as i64).collect::<Vec<_>>(), x_shape, CPU),
        false => Tensor::from_vec(x_data, x_shape, CPU).map(|t| t.requires_grad()),
    }
    .map_err(|e| e.to_string())?;
    let out = layer.forward(&x).map_err(|e| e.to_string())?;
    let (w_shape, w_data) = stored(get(case, "w")?)?;
    let w = Tensor::from_vec(w_data, w_shape, CPU).map_err(|e| e.to_string())?;
    let grads = out.mul(&w).and_then(|l| l.sum_all()?.backward()).map_err(|e| e.to_string())?;
    let mut worst = compare("out", &out, get(case, "out")?)?;
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
        worst = worst.max(compare(&format!("grad {name}"), g, get(get(case, "grads")?, name)?)?);
    }
    for (name, t) in layer.named_buffers() {
        worst = worst.max(compare(&name, &t, get(get(case, "buffers")?, &name)?)?);
    }
    Ok(worst)
}

#[test]
fn matches_pytorch_golden_values() {
    let doc: Value = serde_json::from_str(GOLDEN).expect("spatial.json parses");
    let cases = doc["cases"].as_array().expect("cases");
    assert!(cases.len() >= 15, "only {} cases", cases.len());
    let mut failures = Vec::new();
    for case in cases {
        let name = case["name"].as_str().unwrap_or("?");
        match run_golden_case(case) {
            Ok(err) if err <= 1e-10 => {}
            Ok(err) => failures.push(format!("{name}: error {err:e}")),
            Err(msg) => failures.push(format!("{name}: {msg}")),
        }
    }
    assert!(failures.is_empty(), "{} golden cases failed:\n{}", failures.len(), failures.join("\n"));
}

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
