//! Optimizers, schedulers and clipping against PyTorch (`tests/golden/optim.json`, written by
//! `tests/golden/make_optim_golden.py`), plus the fused CPU update against the tensor-op path,
//! skipped parameters and config errors.

use rnn_core::{manual_seed, DType, Device, Error, GradStore, Result, Tensor};
use rnn_nn::optim::{
    clip_grad_norm, clip_grad_value, Adagrad, AdagradConfig, Adam, AdamConfig, AdamW, LrSchedule, Optimizer,
    OptimizerConfig, PlateauConfig, PlateauMode, RmsProp, RmsPropConfig, Sgd, SgdConfig,
};
use rnn_nn::{mse, Linear, Module};
use serde_json::Value;

const FIXTURE: &str = include_str!("golden/optim.json");
const CPU: Device = Device::Cpu;
/// Five f64 updates of a well-conditioned net: agreement to a few ulps is expected.
const F64_TOL: f64 = 1e-10;

fn golden() -> Value {
    serde_json::from_str(FIXTURE).expect("optim.json is valid JSON")
}

fn floats(v: &Value) -> Vec<f64> {
    v.as_array().expect("an array").iter().map(|x| x.as_f64().expect("a number")).collect()
}

fn max_abs_diff(a: &[f64], b: &[f64]) -> f64 {
    assert_eq!(a.len(), b.len(), "lengths differ");
    a.iter().zip(b).map(|(x, y)| (x - y).abs()).fold(0.0, f64::max)
}

/// The golden model: parameters `[w1, b1, w2, b2]` (fresh tracked tensors) and the data.
struct Model {
    params: Vec<Tensor>,
    x: Tensor,
    y: Tensor,
}

impl Model {
    fn from_golden(g: &Value) -> Result<Model> {
        let tensor = |name: &str| {
            let t = &g["model"][name];
            let shape: Vec<usize> =
                t["shape"].as_array().unwrap().iter().map(|d| d.as_u64().unwrap() as usize).collect();
            Tensor::from_vec(floats(&t["data"]), shape, CPU)
        };
        let params = ["w1", "b1", "w2", "b2"].iter().map(|n| Ok(tensor(n)?.requires_grad())).collect::<Result<_>>()?;
        Ok(Model { params, x: tensor("x")?, y: tensor("y")? })
    }

    fn grads(&self) -> Result<GradStore> {
        let p = &self.params;
        let hidden = Linear::from_tensors(p[0].clone(), Some(p[1].clone())).forward(&self.x)?.tanh()?;
        let out = Linear::from_tensors(p[2].clone(), Some(p[3].clone())).forward(&hidden)?;
        mse(&out, &self.y)?.backward()
    }

    fn flat_params(&self) -> Result<Vec<Vec<f64>>> {
        self.params.iter().map(|p| p.to_vec::<f64>()).collect()
    }
}

fn opt_f64(o: &Value, key: &str, default: f64) -> f64 {
    o.get(key).and_then(Value::as_f64).unwrap_or(default)
}

fn opt_bool(o: &Value, key: &str) -> bool {
    o.get(key).and_then(Value::as_bool).unwrap_or(false)
}

/// Our config for a PyTorch optimizer name and keyword options (defaults where absent).
fn config_for(name: &str, o: &Value) -> OptimizerConfig {
    let betas = o.get("betas").map(floats).unwrap_or_else(|| vec![0.9, 0.999]);
    let adam = |wd_default: f64| AdamConfig {
        lr: opt_f64(o, "lr", 1e-3),
        beta1: betas[0],
        beta2: betas[1],
        eps: opt_f64(o, "eps", 1e-8),
        weight_decay: opt_f64(o, "weight_decay", wd_default),
        amsgrad: opt_bool(o, "amsgrad"),
    };
    match name {
        "SGD" => OptimizerConfig::Sgd(SgdConfig {
            lr: opt_f64(o, "lr", 1e-3),
            momentum: opt_f64(o, "momentum", 0.0),
            dampening: opt_f64(o, "dampening", 0.0),
            nesterov: opt_bool(o, "nesterov"),
            weight_decay: opt_f64(o, "weight_decay", 0.0),
        }),
        "Adam" => OptimizerConfig::Adam(adam(AdamConfig::default().weight_decay)),
        "AdamW" => OptimizerConfig::AdamW(adam(AdamConfig::adamw().weight_decay)),
        "RMSprop" => OptimizerConfig::RmsProp(RmsPropConfig {
            lr: opt_f64(o, "lr", 1e-2),
            alpha: opt_f64(o, "alpha", 0.99),
            eps: opt_f64(o, "eps", 1e-8),
            momentum: opt_f64(o, "momentum", 0.0),
            centered: opt_bool(o, "centered"),
            weight_decay: opt_f64(o, "weight_decay", 0.0),
        }),
        "Adagrad" => OptimizerConfig::Adagrad(AdagradConfig {
            lr: opt_f64(o, "lr", 1e-2),
            lr_decay: opt_f64(o, "lr_decay", 0.0),
            weight_decay: opt_f64(o, "weight_decay", 0.0),
            initial_accumulator_value: opt_f64(o, "initial_accumulator_value", 0.0),
            eps: opt_f64(o, "eps", 1e-10),
        }),
        other => panic!("unknown optimizer {other} in optim.json"),
    }
}

/// The optimizer of `config` with the fused CPU path on or off.
fn build(config: &OptimizerConfig, params: Vec<Tensor>, fused: bool) -> Result<Box<dyn Optimizer>> {
    Ok(match config.clone() {
        OptimizerConfig::Sgd(c) => with_fused(Sgd::new(params, c)?, Sgd::set_fused, fused),
        OptimizerConfig::Adam(c) => with_fused(Adam::new(params, c)?, Adam::set_fused, fused),
        OptimizerConfig::AdamW(c) => with_fused(AdamW::new(params, c)?, AdamW::set_fused, fused),
        OptimizerConfig::RmsProp(c) => with_fused(RmsProp::new(params, c)?, RmsProp::set_fused, fused),
        OptimizerConfig::Adagrad(c) => with_fused(Adagrad::new(params, c)?, Adagrad::set_fused, fused),
    })
}

fn with_fused<O: Optimizer + 'static>(mut opt: O, set: fn(&mut O, bool), fused: bool) -> Box<dyn Optimizer> {
    set(&mut opt, fused);
    Box::new(opt)
}

#[test]
fn optimizers_match_pytorch() -> Result<()> {
    let g = golden();
    let cases = g["optimizers"].as_array().unwrap();
    assert!(cases.len() >= 15);
    for case in cases {
        let name = case["name"].as_str().unwrap();
        let config = config_for(case["optimizer"].as_str().unwrap(), &case["options"]);
        for fused in [true, false] {
            let model = Model::from_golden(&g)?;
            let mut opt = build(&config, model.params.clone(), fused)?;
            for (step, expected) in case["steps"].as_array().unwrap().iter().enumerate() {
                opt.step(&model.grads()?)?;
                for (i, (ours, theirs)) in model.flat_params()?.iter().zip(expected.as_array().unwrap()).enumerate() {
                    let err = max_abs_diff(ours, &floats(theirs));
                    assert!(err < F64_TOL, "{name} (fused {fused}) step {} param {i}: error {err:e}", step + 1);
                }
            }
        }
    }
    Ok(())
}

/// Our schedule for a golden scheduler case.
fn schedule_for(name: &str, o: &Value) -> LrSchedule {
    let f = |k: &str| opt_f64(o, k, f64::NAN);
    let u = |k: &str| o[k].as_u64().unwrap() as usize;
    let warmup = |then| LrSchedule::LinearWarmup {
        warmup_steps: u("warmup_steps"),
        start_factor: f("start_factor"),
        then: Box::new(then),
    };
    let plateau = || {
        let mode = if o["mode"] == "max" { PlateauMode::Max } else { PlateauMode::Min };
        let (factor, threshold, min_lr) = (f("factor"), f("threshold"), f("min_lr"));
        PlateauConfig { mode, factor, patience: u("patience"), threshold, cooldown: u("cooldown"), min_lr }
    };
    match name {
        "step" => LrSchedule::step(u("step_size"), f("gamma")),
        "exponential" => LrSchedule::Exponential { gamma: f("gamma") },
        "cosine" => LrSchedule::cosine(u("t_max"), f("eta_min")),
        "warmup_constant" => warmup(LrSchedule::Constant),
        "warmup_cosine" => warmup(LrSchedule::cosine(u("t_max"), f("eta_min"))),
        "warmup_step" => warmup(LrSchedule::step(u("step_size"), f("gamma"))),
        "plateau_min" | "plateau_max" => LrSchedule::ReduceOnPlateau(plateau()),
        other => panic!("unknown scheduler case {other}"),
    }
}

#[test]
fn schedulers_match_pytorch() -> Result<()> {
    let g = golden();
    let base = g["base_lr"].as_f64().unwrap();
    for case in g["schedulers"].as_array().unwrap() {
        let name = case["name"].as_str().unwrap();
        let expected = floats(&case["lrs"]);
        let metrics = case["metrics"].as_array().map(|m| m.iter().map(|x| x.as_f64()).collect::<Vec<_>>());
        let mut sched = schedule_for(name, &case["options"]).build(base)?;
        // The optimizer follows the scheduler through `apply` and `step`.
        let mut opt = OptimizerConfig::sgd(base).build(vec![Tensor::zeros(1, DType::F64, CPU)?.requires_grad()])?;
        sched.apply(opt.as_mut());
        let mut ours = vec![opt.learning_rate()];
        for epoch in 0..expected.len() - 1 {
            let metric = metrics.as_ref().and_then(|m| m[epoch]);
            sched.step(opt.as_mut(), metric)?;
            assert_eq!(opt.learning_rate(), sched.current_lr());
            ours.push(opt.learning_rate());
        }
        let err = max_abs_diff(&ours, &expected);
        assert!(err < 1e-12, "{name}: ours {ours:?}\ntorch {expected:?}");
    }
    Ok(())
}

fn flat_grads(grads: &GradStore, params: &[Tensor]) -> Result<Vec<f64>> {
    let mut out = Vec::new();
    for p in params {
        out.extend(grads.get(p).expect("every parameter has a gradient").to_vec::<f64>()?);
    }
    Ok(out)
}

fn concat(v: &Value) -> Vec<f64> {
    v.as_array().unwrap().iter().flat_map(floats).collect()
}

#[test]
fn clipping_matches_pytorch() -> Result<()> {
    let g = golden();
    let model = Model::from_golden(&g)?;
    let clip = &g["clip"];
    let raw = model.grads()?;
    let err = max_abs_diff(&flat_grads(&raw, &model.params)?, &concat(&clip["grads"]));
    assert!(err < 1e-12, "gradients differ from PyTorch's by {err:e}");
    for case in clip["norm_cases"].as_array().unwrap() {
        let mut grads = raw.clone();
        let norm = clip_grad_norm(&mut grads, &model.params, case["max_norm"].as_f64().unwrap())?;
        assert!((norm - case["norm"].as_f64().unwrap()).abs() < 1e-12, "norm {norm}");
        let err = max_abs_diff(&flat_grads(&grads, &model.params)?, &concat(&case["grads"]));
        assert!(err < 1e-12, "clip_grad_norm max_norm {}: error {err:e}", case["max_norm"]);
    }
    for case in clip["value_cases"].as_array().unwrap() {
        let mut grads = raw.clone();
        clip_grad_value(&mut grads, &model.params, case["clip"].as_f64().unwrap())?;
        let err = max_abs_diff(&flat_grads(&grads, &model.params)?, &concat(&case["grads"]));
        assert!(err < 1e-12, "clip_grad_value: error {err:e}");
    }
    Ok(())
}

/// Every option combination the fused kernels distinguish.
fn all_configs() -> Vec<OptimizerConfig> {
    let sgd = |momentum, dampening, nesterov, weight_decay| {
        OptimizerConfig::Sgd(SgdConfig { lr: 0.05, momentum, dampening, nesterov, weight_decay })
    };
    let adam = |weight_decay, amsgrad| AdamConfig { lr: 0.01, beta2: 0.9, weight_decay, amsgrad, ..Default::default() };
    let rms = |momentum, centered| {
        OptimizerConfig::RmsProp(RmsPropConfig {
            lr: 0.01,
            momentum,
            centered,
            weight_decay: 0.01,
            ..Default::default()
        })
    };
    vec![
        sgd(0.0, 0.0, false, 0.0),
        sgd(0.0, 0.0, false, 0.1),
        sgd(0.9, 0.2, false, 0.1),
        sgd(0.9, 0.0, true, 0.0),
        OptimizerConfig::Adam(adam(0.0, false)),
        OptimizerConfig::Adam(adam(0.1, true)),
        OptimizerConfig::AdamW(adam(0.1, false)),
        OptimizerConfig::AdamW(adam(0.1, true)),
        rms(0.0, false),
        rms(0.5, false),
        rms(0.0, true),
        rms(0.5, true),
        OptimizerConfig::Adagrad(AdagradConfig { lr: 0.1, lr_decay: 0.1, weight_decay: 0.01, ..Default::default() }),
    ]
}

/// Runs 3 steps with random gradients from the same start, fused and with tensor ops.
fn fused_vs_tensor_ops(config: &OptimizerConfig, dtype: DType, shapes: &[&[usize]]) -> Result<f64> {
    manual_seed(7);
    let start: Vec<Tensor> = shapes.iter().map(|s| Tensor::randn(0.0, 1.0, *s, dtype, CPU)).collect::<Result<_>>()?;
    let grads: Vec<Vec<Tensor>> = (0..3)
        .map(|_| shapes.iter().map(|s| Tensor::randn(0.0, 1.0, *s, dtype, CPU)).collect())
        .collect::<Result<_>>()?;
    let run = |fused: bool| -> Result<Vec<Vec<f64>>> {
        // Fresh storage for each run (the updates are in place).
        let copy =
            |t: &Tensor| Tensor::from_vec(t.to_dtype(DType::F64)?.to_vec::<f64>()?, t.dims(), CPU)?.to_dtype(dtype);
        let params: Vec<Tensor> = start.iter().map(|t| Ok(copy(t)?.requires_grad())).collect::<Result<_>>()?;
        let mut opt = build(config, params.clone(), fused)?;
        for step in &grads {
            let mut store = GradStore::new();
            params.iter().zip(step).for_each(|(p, g)| store.insert(p, g.clone()));
            opt.step(&store)?;
        }
        params.iter().map(|p| p.to_dtype(DType::F64)?.to_vec::<f64>()).collect()
    };
    let (a, b) = (run(true)?, run(false)?);
    Ok(a.iter().zip(&b).map(|(x, y)| max_abs_diff(x, y)).fold(0.0, f64::max))
}

#[test]
fn fused_update_equals_tensor_ops() -> Result<()> {
    // The large tensor takes the multi-threaded path of the fused loop (above ~1M elements).
    let shapes: &[&[usize]] = &[&[3, 5], &[7], &[1030, 1024]];
    for config in all_configs() {
        let err32 = fused_vs_tensor_ops(&config, DType::F32, shapes)?;
        assert!(err32 < 1e-6, "{config:?} f32: {err32:e}");
        let err64 = fused_vs_tensor_ops(&config, DType::F64, shapes)?;
        assert!(err64 < 1e-12, "{config:?} f64: {err64:e}");
    }
    Ok(())
}

#[test]
fn non_contiguous_gradient_takes_the_tensor_op_path() -> Result<()> {
    let p = Tensor::from_vec(vec![1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0], (2, 3), CPU)?.requires_grad();
    let g = Tensor::from_vec(vec![1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0], (3, 2), CPU)?.t()?;
    let mut grads = GradStore::new();
    grads.insert(&p, g.clone());
    Sgd::new(vec![p.clone()], SgdConfig::with_lr(0.5))?.step(&grads)?;
    let expected: Vec<f32> =
        [1.0, 2.0, 3.0, 4.0, 5.0, 6.0].iter().zip(g.to_vec::<f32>()?).map(|(a, b)| a - 0.5 * b).collect();
    assert_eq!(p.to_vec::<f32>()?, expected);
    Ok(())
}

#[test]
fn parameters_without_gradient_are_skipped() -> Result<()> {
    for config in all_configs() {
        for fused in [true, false] {
            let a = Tensor::from_vec(vec![1.0f64, -2.0, 3.0], 3, CPU)?.requires_grad();
            let b = Tensor::from_vec(vec![0.5f64, 0.25], 2, CPU)?.requires_grad();
            let mut opt = build(&config, vec![a.clone(), b.clone()], fused)?;
            let mut grads = GradStore::new();
            grads.insert(&a, Tensor::from_vec(vec![0.1f64, 0.2, -0.3], 3, CPU)?);
            let (a0, b0) = (a.to_vec::<f64>()?, b.to_vec::<f64>()?);
            opt.step(&grads)?;
            assert_eq!(b.to_vec::<f64>()?, b0, "{config:?}: b has no gradient and must not move");
            assert_ne!(a.to_vec::<f64>()?, a0, "{config:?}: a must move");
            // b's first update later is its own first step (fresh state, bias correction 1).
            let mut only_b = GradStore::new();
            only_b.insert(&b, Tensor::from_vec(vec![0.3f64, -0.1], 2, CPU)?);
            opt.step(&only_b)?;
            let fresh = Tensor::from_vec(b0, 2, CPU)?.requires_grad();
            let mut fresh_grads = GradStore::new();
            fresh_grads.insert(&fresh, Tensor::from_vec(vec![0.3f64, -0.1], 2, CPU)?);
            build(&config, vec![fresh.clone()], fused)?.step(&fresh_grads)?;
            assert_eq!(b.to_vec::<f64>()?, fresh.to_vec::<f64>()?, "{config:?}");
        }
    }
    Ok(())
}

#[test]
fn updates_keep_parameter_identity() -> Result<()> {
    let w = Tensor::ones((2, 2), DType::F32, CPU)?.requires_grad();
    let layer = Linear::from_tensors(w.clone(), None);
    let alias = w.detach(); // shares storage with w
    let loss = layer.forward(&Tensor::ones((1, 2), DType::F32, CPU)?)?.sum_all()?;
    let mut opt = OptimizerConfig::adam(0.1).build(layer.parameters())?;
    opt.step(&loss.backward()?)?;
    let id_before = w.id();
    assert_eq!(layer.weight().id(), id_before);
    // Adam's first step moves each weight by lr (the gradient is 1 everywhere).
    for seen_through in [alias, layer.weight().clone()] {
        assert!(seen_through.to_vec::<f32>()?.iter().all(|v| (v - 0.9).abs() < 1e-6));
    }
    Ok(())
}

#[test]
fn duplicated_parameter_is_updated_once() -> Result<()> {
    let w = Tensor::from_vec(vec![1.0f64, 2.0], 2, CPU)?.requires_grad();
    let mut grads = GradStore::new();
    grads.insert(&w, Tensor::from_vec(vec![1.0f64, 1.0], 2, CPU)?);
    Sgd::new(vec![w.clone(), w.clone()], SgdConfig::with_lr(0.5))?.step(&grads)?;
    assert_eq!(w.to_vec::<f64>()?, vec![0.5, 1.5]);
    Ok(())
}

fn is_invalid<T>(r: Result<T>) -> bool {
    matches!(r, Err(Error::InvalidArgument { .. }))
}

#[test]
fn bad_configs_are_errors() -> Result<()> {
    let p = || vec![Tensor::zeros(2, DType::F32, CPU).unwrap().requires_grad()];
    let adam = |c: AdamConfig| OptimizerConfig::Adam(c).build(p());
    assert!(is_invalid(OptimizerConfig::sgd(-0.1).build(p())));
    assert!(is_invalid(OptimizerConfig::adam(f64::NAN).build(p())));
    assert!(is_invalid(adam(AdamConfig { beta1: 1.0, ..Default::default() })));
    assert!(is_invalid(adam(AdamConfig { beta2: -0.1, ..Default::default() })));
    assert!(is_invalid(adam(AdamConfig { eps: 0.0, ..Default::default() })));
    assert!(is_invalid(OptimizerConfig::AdamW(AdamConfig { weight_decay: -1.0, ..AdamConfig::adamw() }).build(p())));
    assert!(is_invalid(Sgd::new(p(), SgdConfig { nesterov: true, ..Default::default() })));
    assert!(is_invalid(Sgd::new(
        p(),
        SgdConfig { nesterov: true, momentum: 0.9, dampening: 0.1, ..Default::default() }
    )));
    assert!(is_invalid(RmsProp::new(p(), RmsPropConfig { alpha: 1.5, ..Default::default() })));
    assert!(is_invalid(RmsProp::new(p(), RmsPropConfig { momentum: -0.5, ..Default::default() })));
    assert!(is_invalid(Adagrad::new(p(), AdagradConfig { lr_decay: -1.0, ..Default::default() })));
    assert!(is_invalid(Adagrad::new(p(), AdagradConfig { eps: -1e-10, ..Default::default() })));
    let ids = Tensor::from_vec(vec![1u32, 2], 2, CPU)?;
    assert!(is_invalid(Sgd::new(vec![ids], SgdConfig::default())));
    // Schedules.
    assert!(is_invalid(LrSchedule::step(0, 0.5).build(0.1)));
    assert!(is_invalid(LrSchedule::Exponential { gamma: 0.0 }.build(0.1)));
    assert!(is_invalid(LrSchedule::cosine(0, 0.0).build(0.1)));
    assert!(is_invalid(LrSchedule::warmup(0, LrSchedule::Constant).build(0.1)));
    assert!(is_invalid(LrSchedule::Constant.build(-1.0)));
    let bad_factor = PlateauConfig { factor: 1.0, ..Default::default() };
    assert!(is_invalid(LrSchedule::ReduceOnPlateau(bad_factor).build(0.1)));
    assert!(is_invalid(LrSchedule::plateau().build(0.1)?.advance(None)));
    // Clipping.
    let mut grads = GradStore::new();
    assert!(is_invalid(clip_grad_norm(&mut grads, &p(), -1.0)));
    assert!(is_invalid(clip_grad_value(&mut grads, &p(), f64::INFINITY)));
    Ok(())
}

#[test]
fn mismatched_gradient_is_an_error() -> Result<()> {
    let w = Tensor::zeros((2, 3), DType::F32, CPU)?.requires_grad();
    for config in all_configs() {
        let mut opt = config.build(vec![w.clone()])?;
        let mut grads = GradStore::new();
        grads.insert(&w, Tensor::zeros((3, 2), DType::F32, CPU)?);
        assert!(matches!(opt.step(&grads), Err(Error::ShapeMismatch { .. })), "{config:?}");
        grads.insert(&w, Tensor::zeros((2, 3), DType::F64, CPU)?);
        assert!(matches!(opt.step(&grads), Err(Error::DTypeMismatch { .. })), "{config:?}");
    }
    Ok(())
}

#[test]
fn optimizer_config_basics() -> Result<()> {
    assert_eq!(OptimizerConfig::default(), OptimizerConfig::Adam(AdamConfig::default()));
    assert_eq!(
        OptimizerConfig::adamw(0.1),
        OptimizerConfig::AdamW(AdamConfig { lr: 0.1, weight_decay: 0.01, ..Default::default() })
    );
    let c = OptimizerConfig::rmsprop(0.1).with_learning_rate(0.3);
    assert_eq!((c.learning_rate(), c.name()), (0.3, "RMSprop"));
    let mut opt = c.build(vec![Tensor::zeros(2, DType::F32, CPU)?.requires_grad()])?;
    assert_eq!(opt.learning_rate(), 0.3);
    opt.set_learning_rate(0.05);
    assert_eq!(opt.learning_rate(), 0.05);
    Ok(())
}

#[test]
fn clip_grad_norm_ignores_missing_and_duplicate_parameters() -> Result<()> {
    let a = Tensor::zeros(2, DType::F64, CPU)?.requires_grad();
    let b = Tensor::zeros(2, DType::F64, CPU)?.requires_grad();
    let mut grads = GradStore::new();
    grads.insert(&a, Tensor::from_vec(vec![3.0f64, 4.0], 2, CPU)?);
    let norm = clip_grad_norm(&mut grads, &[a.clone(), a.clone(), b.clone()], 1.0)?;
    assert_eq!(norm, 5.0);
    let clipped = grads.get(&a).unwrap().to_vec::<f64>()?;
    assert!((clipped[0] - 3.0 / (5.0 + 1e-6)).abs() < 1e-15 && grads.get(&b).is_none());
    Ok(())
}

/// Not a test: the time of 100 optimizer steps over the parameters of a 784-512-256-10 MLP
/// (f32), fused and with tensor ops. Run with
/// `cargo test --release -p rnn-nn --test optim -- --ignored --nocapture optimizer_step_timing`.
#[test]
#[ignore]
fn optimizer_step_timing() -> Result<()> {
    let shapes: [&[usize]; 6] = [&[512, 784], &[512], &[256, 512], &[256], &[10, 256], &[10]];
    for config in [OptimizerConfig::adam(1e-3), OptimizerConfig::sgd_momentum(1e-2, 0.9)] {
        for fused in [false, true] {
            let params: Vec<Tensor> = shapes
                .iter()
                .map(|s| Ok(Tensor::randn(0.0, 0.05, *s, DType::F32, CPU)?.requires_grad()))
                .collect::<Result<_>>()?;
            let mut grads = GradStore::new();
            for p in &params {
                grads.insert(p, Tensor::randn(0.0, 0.01, p.dims(), DType::F32, CPU)?);
            }
            let mut opt = build(&config, params, fused)?;
            opt.step(&grads)?; // allocates the state
            let start = std::time::Instant::now();
            for _ in 0..100 {
                opt.step(&grads)?;
            }
            let per_step = start.elapsed().as_secs_f64() * 1e3 / 100.0;
            let path = if fused { "fused" } else { "tensor ops" };
            println!("{} step, {path}: {per_step:.3} ms", config.name());
        }
    }
    Ok(())
}
