//! Optimizers, schedulers and clipping on every device: against PyTorch
//! (`tests/golden/optim.json`, written by `tests/golden/make_optim_golden.py`) in every checked
//! dtype, the update of each device against the CPU's tensor-op path (on the CPU: the fused
//! update against the tensor ops), skipped parameters and config errors.

use rnn_core::{DType, Device, Error, GradStore, Result, Tensor};
use rnn_nn::optim::{
    clip_grad_norm, clip_grad_norm_on_device, clip_grad_value, Adagrad, AdagradConfig, Adam, AdamConfig, AdamW,
    GradScaler, GradScalerConfig, GradScalerState, LrSchedule, Optimizer, OptimizerConfig, PlateauConfig, PlateauMode,
    RmsProp, RmsPropConfig, Sgd, SgdConfig,
};
use rnn_nn::{mse, Linear, Module};
use rnn_testutil::{
    checked_floats, floats, is_invalid, max_abs_diff, max_rel_err, rng, test_device, to, tol_on, tolerance, values,
    widest_float,
};
use serde_json::Value;

const FIXTURE: &str = include_str!("golden/optim.json");
const CPU: Device = Device::Cpu;

fn golden() -> Value {
    serde_json::from_str(FIXTURE).expect("optim.json is valid JSON")
}

fn numbers(v: &Value) -> Vec<f64> {
    v.as_array().expect("an array").iter().map(|x| x.as_f64().expect("a number")).collect()
}

/// The golden model: parameters `[w1, b1, w2, b2]` (fresh tracked tensors) and the data.
struct Model {
    params: Vec<Tensor>,
    x: Tensor,
    y: Tensor,
}

impl Model {
    /// The model with its tensors in `dtype` on `device`.
    fn from_golden(g: &Value, dtype: DType, device: Device) -> Result<Model> {
        let tensor = |name: &str| {
            let t = &g["model"][name];
            let shape: Vec<usize> =
                t["shape"].as_array().unwrap().iter().map(|d| d.as_u64().unwrap() as usize).collect();
            to(&Tensor::from_vec(numbers(&t["data"]), shape, CPU)?, dtype, device)
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

    fn flat_params(&self) -> Vec<Vec<f64>> {
        self.params.iter().map(values).collect()
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
    let betas = o.get("betas").map(numbers).unwrap_or_else(|| vec![0.9, 0.999]);
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

/// Five updates of a well-conditioned net: in f64 agreement to a few ulps is expected; in f32
/// the rounding of a computation (`tolerance(F32).result`).
fn optimizers_match_pytorch(device: Device) -> Result<()> {
    let g = golden();
    let cases = g["optimizers"].as_array().unwrap();
    assert!(cases.len() >= 15);
    for dtype in checked_floats(device) {
        let tol = tol_on(device, tolerance(dtype).result);
        for case in cases {
            let name = case["name"].as_str().unwrap();
            let config = config_for(case["optimizer"].as_str().unwrap(), &case["options"]);
            for fused in [true, false] {
                let model = Model::from_golden(&g, dtype, device)?;
                let mut opt = build(&config, model.params.clone(), fused)?;
                for (step, expected) in case["steps"].as_array().unwrap().iter().enumerate() {
                    opt.step(&model.grads()?)?;
                    for (i, (ours, theirs)) in model.flat_params().iter().zip(expected.as_array().unwrap()).enumerate()
                    {
                        let err = max_rel_err(ours, &numbers(theirs));
                        let at = format!("{name} in {dtype} on {device} (fused {fused}) step {} param {i}", step + 1);
                        assert!(err <= tol, "{at}: error {err:e}");
                    }
                }
            }
        }
    }
    Ok(())
}
test_device!(optimizers_match_pytorch_test, optimizers_match_pytorch);

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

fn schedulers_match_pytorch(device: Device) -> Result<()> {
    let g = golden();
    let base = g["base_lr"].as_f64().unwrap();
    for case in g["schedulers"].as_array().unwrap() {
        let name = case["name"].as_str().unwrap();
        let expected = numbers(&case["lrs"]);
        let metrics = case["metrics"].as_array().map(|m| m.iter().map(|x| x.as_f64()).collect::<Vec<_>>());
        let mut sched = schedule_for(name, &case["options"]).build(base)?;
        // The optimizer follows the scheduler through `apply` and `step`.
        let param = Tensor::zeros(1, widest_float(device), device)?.requires_grad();
        let mut opt = OptimizerConfig::sgd(base).build(vec![param])?;
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
test_device!(schedulers_match_pytorch_test, schedulers_match_pytorch);

fn flat_grads(grads: &GradStore, params: &[Tensor]) -> Vec<f64> {
    params.iter().flat_map(|p| values(grads.get(p).expect("every parameter has a gradient"))).collect()
}

fn concat(v: &Value) -> Vec<f64> {
    v.as_array().unwrap().iter().flat_map(numbers).collect()
}

/// The gradients, their norm and the clipped gradients in each checked dtype: one backward
/// pass and a few ops, so `tolerance(dtype).grad`.
fn clipping_matches_pytorch(device: Device) -> Result<()> {
    let g = golden();
    let clip = &g["clip"];
    for dtype in checked_floats(device) {
        let tol = tol_on(device, tolerance(dtype).grad);
        let model = Model::from_golden(&g, dtype, device)?;
        let raw = model.grads()?;
        let err = max_rel_err(&flat_grads(&raw, &model.params), &concat(&clip["grads"]));
        assert!(err <= tol, "{dtype} on {device}: gradients differ from PyTorch's by {err:e}");
        for case in clip["norm_cases"].as_array().unwrap() {
            let mut grads = raw.clone();
            let norm = clip_grad_norm(&mut grads, &model.params, case["max_norm"].as_f64().unwrap())?;
            let want = case["norm"].as_f64().unwrap();
            assert!(max_rel_err(&[norm], &[want]) <= tol, "{dtype} on {device}: norm {norm}, torch {want}");
            let err = max_rel_err(&flat_grads(&grads, &model.params), &concat(&case["grads"]));
            assert!(err <= tol, "{dtype} on {device}: clip_grad_norm max_norm {}: error {err:e}", case["max_norm"]);
        }
        for case in clip["value_cases"].as_array().unwrap() {
            let mut grads = raw.clone();
            clip_grad_value(&mut grads, &model.params, case["clip"].as_f64().unwrap())?;
            let err = max_rel_err(&flat_grads(&grads, &model.params), &concat(&case["grads"]));
            assert!(err <= tol, "{dtype} on {device}: clip_grad_value: error {err:e}");
        }
    }
    Ok(())
}
test_device!(clipping_matches_pytorch_test, clipping_matches_pytorch);

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

/// Runs `steps` steps with random gradients from the same start in `dtype`: on `device` with
/// the fused path on (one multi-tensor step per group where it applies) and on the CPU with
/// tensor ops, the formulas' reference. Returns the largest difference of the parameters.
fn update_vs_cpu_tensor_ops(
    config: &OptimizerConfig,
    dtype: DType,
    device: Device,
    shapes: &[&[usize]],
    steps: usize,
) -> Result<f64> {
    let mut r = rng(7);
    let mut randn = |s: &[usize]| Tensor::randn_with(&mut r, 0.0, 1.0, s, dtype, CPU);
    let start: Vec<Tensor> = shapes.iter().map(|s| randn(s)).collect::<Result<_>>()?;
    let grads: Vec<Vec<Tensor>> =
        (0..steps).map(|_| shapes.iter().map(|s| randn(s)).collect()).collect::<Result<_>>()?;
    let run = |device: Device, fused: bool| -> Result<Vec<Vec<f64>>> {
        // Fresh storage for each run (the updates are in place).
        let copy = |t: &Tensor| to(&Tensor::from_vec(values(t), t.dims(), CPU)?, dtype, device);
        let params: Vec<Tensor> = start.iter().map(|t| Ok(copy(t)?.requires_grad())).collect::<Result<_>>()?;
        let mut opt = build(config, params.clone(), fused)?;
        for step in &grads {
            let mut store = GradStore::new();
            for (p, g) in params.iter().zip(step) {
                store.insert(p, g.to_device(device)?);
            }
            opt.step(&store)?;
        }
        Ok(params.iter().map(values).collect())
    };
    let (a, b) = (run(device, true)?, run(CPU, false)?);
    Ok(a.iter().zip(&b).map(|(x, y)| max_abs_diff(x, y)).fold(0.0, f64::max))
}

/// 100 steps over parameters of several sizes: empty, one element, small, and across the
/// CUDA kernel's 2048-element chunks.
fn update_equals_cpu_tensor_ops(device: Device) -> Result<()> {
    let shapes: [&[usize]; 6] = [&[3, 5], &[7], &[0], &[1], &[2, 0, 3], &[3, 1400]];
    for config in all_configs() {
        for dtype in checked_floats(device) {
            let tol = tol_on(device, tolerance(dtype).op);
            let err = update_vs_cpu_tensor_ops(&config, dtype, device, &shapes, 100)?;
            assert!(err <= tol, "{config:?} in {dtype} on {device}: {err:e}");
        }
    }
    Ok(())
}
test_device!(update_equals_cpu_tensor_ops_test, update_equals_cpu_tensor_ops);

/// On the CPU, a large tensor takes the multi-threaded path of the fused loop (above ~1M
/// elements); a GPU has no such path, and a software one (lavapipe) would only spend time.
fn large_update_equals_cpu_tensor_ops(device: Device) -> Result<()> {
    if !device.is_cpu() {
        return Ok(());
    }
    for config in all_configs() {
        let err = update_vs_cpu_tensor_ops(&config, DType::F32, device, &[&[1030, 1024], &[5]], 3)?;
        assert!(err <= tolerance(DType::F32).op, "{config:?}: {err:e}");
    }
    Ok(())
}
test_device!(large_update_equals_cpu_tensor_ops_test, large_update_equals_cpu_tensor_ops);

/// A gradient that is another parameter's storage (`loss = a . b` gives `grad b = a`): one
/// fused pass would read it while writing it, so the group takes the tensor-op path and the
/// result is that of updating the parameters one after the other.
fn gradient_sharing_a_parameter_is_handled(device: Device) -> Result<()> {
    let dtype = widest_float(device);
    let t = |v: &[f64]| rnn_testutil::try_tensor(v, &[v.len()], dtype, device);
    let mut results = Vec::new();
    for fused in [true, false] {
        let a = t(&[1.0, -2.0, 3.0])?.requires_grad();
        let b = t(&[0.5, 0.25, -1.0])?.requires_grad();
        let mut grads = GradStore::new();
        grads.insert(&a, t(&[0.1, 0.2, 0.3])?);
        grads.insert(&b, a.detach());
        build(&OptimizerConfig::sgd(0.5), vec![a.clone(), b.clone()], fused)?.step(&grads)?;
        results.push((values(&a), values(&b)));
    }
    assert_eq!(results[0], results[1]);
    Ok(())
}
test_device!(gradient_sharing_a_parameter_is_handled_test, gradient_sharing_a_parameter_is_handled);

fn non_contiguous_gradient_takes_the_tensor_op_path(device: Device) -> Result<()> {
    let p = Tensor::from_vec(vec![1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0], (2, 3), device)?.requires_grad();
    let g = Tensor::from_vec(vec![1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0], (3, 2), device)?.t()?;
    let mut grads = GradStore::new();
    grads.insert(&p, g.clone());
    Sgd::new(vec![p.clone()], SgdConfig::with_lr(0.5))?.step(&grads)?;
    let expected: Vec<f64> = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0].iter().zip(values(&g)).map(|(a, b)| a - 0.5 * b).collect();
    assert_eq!(values(&p), expected);
    Ok(())
}
test_device!(non_contiguous_gradient_takes_the_tensor_op_path_test, non_contiguous_gradient_takes_the_tensor_op_path);

fn parameters_without_gradient_are_skipped(device: Device) -> Result<()> {
    let dtype = widest_float(device);
    let t = |v: &[f64]| rnn_testutil::try_tensor(v, &[v.len()], dtype, device);
    for config in all_configs() {
        for fused in [true, false] {
            let a = t(&[1.0, -2.0, 3.0])?.requires_grad();
            let b = t(&[0.5, 0.25])?.requires_grad();
            let mut opt = build(&config, vec![a.clone(), b.clone()], fused)?;
            let mut grads = GradStore::new();
            grads.insert(&a, t(&[0.1, 0.2, -0.3])?);
            let (a0, b0) = (values(&a), values(&b));
            opt.step(&grads)?;
            assert_eq!(values(&b), b0, "{config:?}: b has no gradient and must not move");
            assert_ne!(values(&a), a0, "{config:?}: a must move");
            // b's first update later is its own first step (fresh state, bias correction 1).
            let mut only_b = GradStore::new();
            only_b.insert(&b, t(&[0.3, -0.1])?);
            opt.step(&only_b)?;
            let fresh = t(&b0)?.requires_grad();
            let mut fresh_grads = GradStore::new();
            fresh_grads.insert(&fresh, t(&[0.3, -0.1])?);
            build(&config, vec![fresh.clone()], fused)?.step(&fresh_grads)?;
            assert_eq!(values(&b), values(&fresh), "{config:?}");
        }
    }
    Ok(())
}
test_device!(parameters_without_gradient_are_skipped_test, parameters_without_gradient_are_skipped);

fn updates_keep_parameter_identity(device: Device) -> Result<()> {
    let w = Tensor::ones((2, 2), DType::F32, device)?.requires_grad();
    let layer = Linear::from_tensors(w.clone(), None);
    let alias = w.detach(); // shares storage with w
    let loss = layer.forward(&Tensor::ones((1, 2), DType::F32, device)?)?.sum_all()?;
    let mut opt = OptimizerConfig::adam(0.1).build(layer.parameters())?;
    opt.step(&loss.backward()?)?;
    let id_before = w.id();
    assert_eq!(layer.weight().id(), id_before);
    // Adam's first step moves each weight by lr (the gradient is 1 everywhere).
    for seen_through in [alias, layer.weight().clone()] {
        assert!(values(&seen_through).iter().all(|v| (v - 0.9).abs() < 1e-6));
    }
    Ok(())
}
test_device!(updates_keep_parameter_identity_test, updates_keep_parameter_identity);

/// A parameter that is a view (one row of a larger tensor) is updated in place where it
/// lies by the fused step, the rest of the tensor untouched, as a whole parameter with the
/// same values would be by the tensor-op path (which refuses views); a gradient the caller
/// holds is read, never written.
fn view_parameters_and_held_gradients_are_respected(device: Device) -> Result<()> {
    let dtype = widest_float(device);
    let t = |v: &[f64], dims: &[usize]| rnn_testutil::try_tensor(v, dims, dtype, device);
    for config in all_configs() {
        let base = t(&[1.0, -2.0, 3.0, 0.5, 0.25, -1.0], &[2, 3])?;
        let view = base.narrow(0, 1, 1)?.requires_grad();
        let whole = t(&[0.5, 0.25, -1.0], &[1, 3])?.requires_grad();
        let g = t(&[0.1, -0.2, 0.3], &[1, 3])?;
        let g0 = values(&g);
        for (p, fused) in [(&view, true), (&whole, false)] {
            let mut grads = GradStore::new();
            grads.insert(p, g.clone());
            let mut opt = build(&config, vec![p.clone()], fused)?;
            opt.step(&grads)?;
            opt.step(&grads)?;
        }
        let all = values(&base);
        assert_eq!(all[..3], [1.0, -2.0, 3.0], "{config:?}: the other row moved");
        assert_eq!(values(&view), all[3..].to_vec(), "{config:?}: the view and its tensor disagree");
        assert_ne!(all[3..], [0.5, 0.25, -1.0], "{config:?}: the parameter did not move");
        let diff = max_abs_diff(&all[3..], &values(&whole));
        assert!(diff <= tol_on(device, 1e-12), "{config:?}: the view's update is off by {diff}");
        assert_eq!(values(&g), g0, "{config:?}: the gradient was written");
    }
    Ok(())
}
test_device!(view_parameters_and_held_gradients_are_respected_test, view_parameters_and_held_gradients_are_respected);

fn duplicated_parameter_is_updated_once(device: Device) -> Result<()> {
    let dtype = widest_float(device);
    let w = rnn_testutil::try_tensor(&[1.0, 2.0], &[2], dtype, device)?.requires_grad();
    let mut grads = GradStore::new();
    grads.insert(&w, Tensor::ones(2, dtype, device)?);
    Sgd::new(vec![w.clone(), w.clone()], SgdConfig::with_lr(0.5))?.step(&grads)?;
    assert_eq!(values(&w), vec![0.5, 1.5]);
    Ok(())
}
test_device!(duplicated_parameter_is_updated_once_test, duplicated_parameter_is_updated_once);

fn bad_configs_are_errors(device: Device) -> Result<()> {
    let p = || vec![Tensor::zeros(2, DType::F32, device).unwrap().requires_grad()];
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
    let ids = Tensor::from_vec(vec![1u32, 2], 2, device)?;
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
test_device!(bad_configs_are_errors_test, bad_configs_are_errors);

fn mismatched_gradient_is_an_error(device: Device) -> Result<()> {
    let w = Tensor::zeros((2, 3), DType::F32, device)?.requires_grad();
    let other = floats(device).into_iter().find(|&d| d != DType::F32);
    for config in all_configs() {
        let mut opt = config.build(vec![w.clone()])?;
        let mut grads = GradStore::new();
        grads.insert(&w, Tensor::zeros((3, 2), DType::F32, device)?);
        assert!(matches!(opt.step(&grads), Err(Error::ShapeMismatch { .. })), "{config:?}");
        if let Some(other) = other {
            grads.insert(&w, Tensor::zeros((2, 3), other, device)?);
            assert!(matches!(opt.step(&grads), Err(Error::DTypeMismatch { .. })), "{config:?}");
        }
    }
    Ok(())
}
test_device!(mismatched_gradient_is_an_error_test, mismatched_gradient_is_an_error);

fn optimizer_config_basics(device: Device) -> Result<()> {
    assert_eq!(OptimizerConfig::default(), OptimizerConfig::Adam(AdamConfig::default()));
    assert_eq!(
        OptimizerConfig::adamw(0.1),
        OptimizerConfig::AdamW(AdamConfig { lr: 0.1, weight_decay: 0.01, ..Default::default() })
    );
    let c = OptimizerConfig::rmsprop(0.1).with_learning_rate(0.3);
    assert_eq!((c.learning_rate(), c.name()), (0.3, "RMSprop"));
    let mut opt = c.build(vec![Tensor::zeros(2, DType::F32, device)?.requires_grad()])?;
    assert_eq!(opt.learning_rate(), 0.3);
    opt.set_learning_rate(0.05);
    assert_eq!(opt.learning_rate(), 0.05);
    Ok(())
}
test_device!(optimizer_config_basics_test, optimizer_config_basics);

fn clip_grad_norm_ignores_missing_and_duplicate_parameters(device: Device) -> Result<()> {
    let dtype = widest_float(device);
    let a = Tensor::zeros(2, dtype, device)?.requires_grad();
    let b = Tensor::zeros(2, dtype, device)?.requires_grad();
    let mut grads = GradStore::new();
    grads.insert(&a, rnn_testutil::try_tensor(&[3.0, 4.0], &[2], dtype, device)?);
    let norm = clip_grad_norm(&mut grads, &[a.clone(), a.clone(), b.clone()], 1.0)?;
    assert_eq!(norm, 5.0);
    let clipped = values(grads.get(&a).unwrap());
    let tol = tol_on(device, tolerance(dtype).op);
    assert!(max_rel_err(&clipped[..1], &[3.0 / (5.0 + 1e-6)]) <= tol && grads.get(&b).is_none(), "{clipped:?}");
    Ok(())
}
test_device!(
    clip_grad_norm_ignores_missing_and_duplicate_parameters_test,
    clip_grad_norm_ignores_missing_and_duplicate_parameters
);

/// An inf or NaN gradient leaves every gradient unchanged (the norm says so); on the device
/// variant the norm stays a rank-0 tensor and a finite large norm scales every gradient.
fn clip_grad_norm_non_finite_and_on_device(device: Device) -> Result<()> {
    let dtype = widest_float(device);
    let a = Tensor::zeros(2, dtype, device)?.requires_grad();
    let b = Tensor::zeros(1, dtype, device)?.requires_grad();
    for bad in [f64::INFINITY, f64::NAN] {
        let mut grads = GradStore::new();
        grads.insert(&a, rnn_testutil::try_tensor(&[3.0, 4.0], &[2], dtype, device)?);
        grads.insert(&b, rnn_testutil::try_tensor(&[bad], &[1], dtype, device)?);
        let norm = clip_grad_norm(&mut grads, &[a.clone(), b.clone()], 1.0)?;
        assert!(!norm.is_finite(), "{bad}: norm {norm}");
        assert_eq!(values(grads.get(&a).unwrap()), vec![3.0, 4.0], "{bad} on {device}");
    }
    let mut grads = GradStore::new();
    grads.insert(&a, rnn_testutil::try_tensor(&[30.0, 40.0], &[2], dtype, device)?);
    grads.insert(&b, rnn_testutil::try_tensor(&[0.0], &[1], dtype, device)?);
    let norm = clip_grad_norm_on_device(&mut grads, &[a.clone(), b.clone()], 5.0)?.expect("gradients present");
    assert_eq!((norm.dims().len(), norm.device()), (0, device));
    let tol = tol_on(device, tolerance(dtype).op);
    assert!(max_rel_err(&[norm.to_f64_scalar()?], &[50.0]) <= tol);
    let clipped = values(grads.get(&a).unwrap());
    let scale = 5.0 / (50.0 + 1e-6);
    assert!(max_rel_err(&clipped, &[30.0 * scale, 40.0 * scale]) <= tol, "{clipped:?}");
    assert!(clip_grad_norm_on_device(&mut GradStore::new(), &[a], 1.0)?.is_none());
    Ok(())
}
test_device!(clip_grad_norm_non_finite_and_on_device_test, clip_grad_norm_non_finite_and_on_device);

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

const SCALER_FIXTURE: &str = include_str!("golden/grad_scaler.json");

/// `GradScaler` against `torch.amp.GradScaler` (`tests/golden/grad_scaler.json`, written by
/// `make_grad_scaler_golden.py`): a tiny f32 model trained with SGD, loss scaling, unscaling
/// and clipping before each step, and inf / NaN gradients injected at some steps. The scale
/// of every step, which steps are skipped and the scale after each update must be the same
/// (exactly: they are powers of two), and the final weights equal up to f32 rounding.
#[test]
fn grad_scaler_matches_pytorch() -> Result<()> {
    let g: Value = serde_json::from_str(SCALER_FIXTURE).expect("grad_scaler.json is valid JSON");
    let c = &g["config"];
    let config = GradScalerConfig {
        init_scale: c["init_scale"].as_f64().unwrap(),
        growth_factor: c["growth_factor"].as_f64().unwrap(),
        backoff_factor: c["backoff_factor"].as_f64().unwrap(),
        growth_interval: c["growth_interval"].as_u64().unwrap(),
        enabled: true,
    };
    let m = &g["model"];
    let f32_tensor = |v: &Value, shape: &[usize]| to(&Tensor::from_vec(numbers(v), shape, CPU)?, DType::F32, CPU);
    let params = [f32_tensor(&m["w"], &[2, 3])?.requires_grad(), f32_tensor(&m["b"], &[2])?.requires_grad()];
    let (x, y) = (f32_tensor(&m["x"], &[8, 3])?, f32_tensor(&m["y"], &[8, 2])?);
    let mut opt = Sgd::new(params.to_vec(), SgdConfig { lr: g["lr"].as_f64().unwrap(), ..Default::default() })?;
    let mut scaler = GradScaler::new(config)?;
    for (step, want) in g["steps"].as_array().unwrap().iter().enumerate() {
        assert_eq!(scaler.get_scale(), want["scale"].as_f64().unwrap(), "scale at step {step}");
        let loss = mse(&Linear::from_tensors(params[0].clone(), Some(params[1].clone())).forward(&x)?, &y)?;
        let mut grads = scaler.scale(&loss)?.backward()?;
        if let Some(inject) = g["inject"].get(step.to_string()) {
            inject_value(&mut grads, &params, inject)?;
        }
        scaler.unscale(&mut grads, &params)?;
        clip_grad_norm(&mut grads, &params, g["clip"].as_f64().unwrap())?;
        let stepped = scaler.step(&mut opt, &mut grads, &params)?;
        scaler.update()?;
        assert_eq!(stepped, want["stepped"].as_bool().unwrap(), "stepped at step {step}");
        assert_eq!(scaler.get_scale(), want["scale_after"].as_f64().unwrap(), "scale after step {step}");
    }
    for (p, name) in params.iter().zip(["w", "b"]) {
        let err = max_abs_diff(&values(p), &numbers(&g["final"][name]));
        assert!(err <= 1e-6, "final {name} differs from PyTorch's by {err:e}");
    }
    Ok(())
}

/// Writes the fixture's `[parameter, element, value]` into that parameter's gradient.
fn inject_value(grads: &mut GradStore, params: &[Tensor], inject: &Value) -> Result<()> {
    let p = &params[inject[0].as_u64().unwrap() as usize];
    let mut v = values(grads.get(p).unwrap());
    v[inject[1].as_u64().unwrap() as usize] = rnn_testutil::golden::number(&inject[2]).unwrap();
    grads.insert(p, to(&Tensor::from_vec(v, p.dims(), CPU)?, DType::F32, CPU)?);
    Ok(())
}

/// The order of calls PyTorch enforces, the checks of the config and the state round trip.
#[test]
fn grad_scaler_state_machine_and_errors() -> Result<()> {
    let p = Tensor::ones(3, DType::F32, CPU)?.requires_grad();
    let params = [p.clone()];
    let mut opt = Sgd::new(vec![p.clone()], SgdConfig { lr: 0.5, ..Default::default() })?;
    let mut scaler = GradScaler::new(GradScalerConfig::default())?;
    assert_eq!(scaler.get_scale(), 65536.0);
    let mut grads = scaler.scale(&p.sum_all()?)?.backward()?;
    assert!(is_invalid(scaler.update()), "update before unscale or step");
    scaler.unscale(&mut grads, &params)?;
    assert_eq!(values(grads.get(&p).unwrap()), vec![1.0; 3], "unscaled gradients");
    assert!(is_invalid(scaler.unscale(&mut grads, &params)), "a second unscale");
    assert!(scaler.step(&mut opt, &mut grads, &params)?);
    assert!(is_invalid(scaler.step(&mut opt, &mut grads, &params)), "a second step");
    scaler.update()?;
    assert_eq!(values(&p), vec![0.5; 3]);
    let state = scaler.state();
    assert_eq!(state, GradScalerState { scale: 65536.0, growth_tracker: 1 });
    let mut other = GradScaler::new(GradScalerConfig::default())?;
    other.load_state(state)?;
    assert_eq!(other.state(), state);
    assert!(is_invalid(other.load_state(GradScalerState { scale: f32::NAN, growth_tracker: 0 })));
    // f16 gradients mean f16 weights: refused, as in PyTorch.
    let h = Tensor::ones(2, DType::F16, CPU)?.requires_grad();
    let mut hgrads = scaler.scale(&h.sum_all()?)?.backward()?;
    assert!(is_invalid(scaler.unscale(&mut hgrads, &[h])));
    for bad in [
        GradScalerConfig { init_scale: 0.0, ..Default::default() },
        GradScalerConfig { growth_factor: 1.0, ..Default::default() },
        GradScalerConfig { backoff_factor: 1.0, ..Default::default() },
        GradScalerConfig { growth_interval: 0, ..Default::default() },
    ] {
        assert!(is_invalid(GradScaler::new(bad)), "{bad:?}");
    }
    // Disabled: the loss and the steps pass through.
    let mut off = GradScaler::new(GradScalerConfig { enabled: false, ..Default::default() })?;
    let loss = p.sum_all()?;
    assert_eq!(off.scale(&loss)?.to_f64_scalar()?, loss.to_f64_scalar()?);
    let mut g = loss.backward()?;
    assert!(off.step(&mut opt, &mut g, &params)?);
    off.update()?;
    assert_eq!(off.get_scale(), 1.0);
    Ok(())
}
