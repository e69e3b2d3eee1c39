//! The losses on every device: gradient checks (finite differences on the CPU, the CPU's f64
//! gradients elsewhere), the `Loss` enum and reductions against the functions, finite values
//! at the extremes, error paths, and PyTorch golden values (the `losses` section of
//! `golden/sequence.json`, from `golden/make_sequence_golden.py`) in every checked dtype.

use rnn_core::{DType, Device, Error, Result, Tensor};
use rnn_nn::loss::{
    binary_cross_entropy, binary_cross_entropy_with, binary_cross_entropy_with_logits,
    binary_cross_entropy_with_logits_with, cross_entropy_with, huber_loss, huber_loss_with, l1_loss, l1_loss_with,
    mse_with, nll_loss, nll_loss_with, CrossEntropyOptions, Loss, Reduction,
};
use rnn_nn::{cross_entropy, mse};
use rnn_testutil::golden::{self, Check};
use rnn_testutil::{
    check_gradients, checked_floats, expect_err, floats, like, rand64, random, test_device, to, tol_on, tolerance,
    uniform, values, widest_float,
};
use serde_json::Value;

const CPU: Device = Device::Cpu;

/// The single value of a loss, read back as f64.
fn scalar(t: Result<Tensor>) -> Result<f64> {
    let t = t?;
    assert_eq!(t.rank(), 0, "a scalar loss");
    Ok(values(&t)[0])
}

/// Asserts `|got - want| / (1 + |want|) <= tol`.
#[track_caller]
fn assert_near(got: f64, want: f64, tol: f64, what: &str) {
    let err = (got - want).abs() / (1.0 + want.abs());
    assert!(err <= tol, "{what}: {got} vs {want} (error {err:.3e} > {tol:.1e})");
}

fn ids_on(v: &[i64], device: Device) -> Result<Tensor> {
    Tensor::from_vec(v.to_vec(), v.len(), device)
}

// ---------------------------------------------------------------- gradients

fn loss_gradchecks(device: Device) -> Result<()> {
    let one = |x: &Tensor| vec![x.clone()];
    let logits = rand64(1, &[4, 5])?;
    let class_ids = ids_on(&[1, 0, 4, 2], CPU)?;
    let smooth = CrossEntropyOptions { label_smoothing: 0.15, ..Default::default() };
    check_gradients(device, &one(&logits), |xs| cross_entropy_with(&xs[0], &like(&class_ids, &xs[0])?, &smooth))?;
    let probs = uniform(2, &[4, 5], 0.0, 1.0)?;
    let probs = probs.div(&probs.sum_keepdim(1)?)?;
    check_gradients(device, &one(&logits), |xs| cross_entropy_with(&xs[0], &like(&probs, &xs[0])?, &smooth))?;
    let ignored = ids_on(&[1, -1, 3, -1], CPU)?;
    let opts = CrossEntropyOptions { label_smoothing: 0.3, reduction: Reduction::None, ignore_index: Some(-1) };
    check_gradients(device, &one(&logits), |xs| cross_entropy_with(&xs[0], &like(&ignored, &xs[0])?, &opts))?;
    let mean = CrossEntropyOptions { reduction: Reduction::Mean, ..opts };
    check_gradients(device, &one(&logits), |xs| cross_entropy_with(&xs[0], &like(&ignored, &xs[0])?, &mean))?;
    let kdim = rand64(3, &[2, 3, 4])?;
    let kdim_ids = Tensor::from_vec(vec![0u32, 2, 1, 1, 2, 0, 0, 1], (2, 4), CPU)?;
    check_gradients(device, &[kdim], |xs| cross_entropy_with(&xs[0], &like(&kdim_ids, &xs[0])?, &smooth))?;
    check_gradients(device, &[logits.log_softmax(1)?], |xs| nll_loss(&xs[0], &like(&class_ids, &xs[0])?))?;

    let (pred, target) = (rand64(4, &[3, 4])?, rand64(5, &[3, 4])?);
    check_gradients(device, &one(&pred), |xs| mse(&xs[0], &like(&target, &xs[0])?))?;
    check_gradients(device, &one(&pred), |xs| l1_loss(&xs[0], &like(&target, &xs[0])?))?;
    check_gradients(device, &one(&pred), |xs| huber_loss(&xs[0], &like(&target, &xs[0])?, 0.4))?;
    check_gradients(device, &one(&pred), |xs| huber_loss_with(&xs[0], &like(&target, &xs[0])?, 0.4, Reduction::None))?;
    let soft = uniform(6, &[3, 4], 0.0, 1.0)?;
    check_gradients(device, &[uniform(7, &[3, 4], 0.1, 0.9)?], |xs| {
        binary_cross_entropy(&xs[0], &like(&soft, &xs[0])?)
    })?;
    check_gradients(device, &[pred.mul_scalar(4.0)?], |xs| {
        binary_cross_entropy_with_logits(&xs[0], &like(&soft, &xs[0])?)
    })?;
    check_gradients(device, &[pred], |xs| {
        binary_cross_entropy_with_logits_with(&xs[0], &like(&soft, &xs[0])?, Reduction::Sum)
    })
}
test_device!(loss_gradchecks_test, loss_gradchecks);

// ---------------------------------------------------------------- behaviour

fn loss_enum_and_reductions_agree(device: Device) -> Result<()> {
    let dtype = widest_float(device);
    // The same values summed in another order, or divided by the count afterwards.
    let tol = tol_on(device, tolerance(dtype).op);
    let logits = random(1, &[4, 5], dtype, device)?;
    let class_ids = ids_on(&[1, 0, 4, 2], device)?;
    let ids_u32 = Tensor::from_vec(vec![1u32, 0, 4, 2], 4, device)?;
    assert_eq!(scalar(cross_entropy(&logits, &class_ids))?, scalar(cross_entropy(&logits, &ids_u32))?);
    // One-hot probability targets give the same loss as the ids.
    let one_hot = class_ids.one_hot(5, dtype)?;
    let (a, b) = (scalar(cross_entropy(&logits, &class_ids))?, scalar(cross_entropy(&logits, &one_hot))?);
    assert_near(a, b, tol, "one-hot targets");
    let ce = Loss::CrossEntropy { label_smoothing: 0.1 };
    let opts = CrossEntropyOptions { label_smoothing: 0.1, ..Default::default() };
    assert_eq!(scalar(ce.compute(&logits, &class_ids))?, scalar(cross_entropy_with(&logits, &class_ids, &opts))?);
    let none = CrossEntropyOptions { reduction: Reduction::None, ..opts };
    let sum = CrossEntropyOptions { reduction: Reduction::Sum, ..opts };
    let per_sample = cross_entropy_with(&logits, &class_ids, &none)?;
    assert_eq!(per_sample.dims(), &[4]);
    let total = scalar(cross_entropy_with(&logits, &class_ids, &sum))?;
    assert_near(scalar(per_sample.sum_all())?, total, tol, "sum of Reduction::None");
    assert_near(total / 4.0, scalar(ce.compute(&logits, &class_ids))?, tol, "mean");

    let pred = to(&uniform(2, &[6], 0.1, 0.9)?, dtype, device)?;
    let target = to(&uniform(3, &[6], 0.0, 1.0)?, dtype, device)?;
    let cases: [(Loss, Tensor); 5] = [
        (Loss::Mse, mse_with(&pred, &target, Reduction::Sum)?),
        (Loss::L1, l1_loss_with(&pred, &target, Reduction::Sum)?),
        (Loss::Bce, binary_cross_entropy_with(&pred, &target, Reduction::Sum)?),
        (Loss::BceWithLogits, binary_cross_entropy_with_logits_with(&pred, &target, Reduction::Sum)?),
        (Loss::Huber { delta: 0.3 }, huber_loss_with(&pred, &target, 0.3, Reduction::Sum)?),
    ];
    for (loss, summed) in cases {
        let mean = scalar(loss.compute(&pred, &target))?;
        assert_near(mean * 6.0, scalar(Ok(summed))?, tol, loss.name());
    }
    let log_probs = logits.log_softmax(1)?;
    assert_eq!(scalar(Loss::Nll.compute(&log_probs, &class_ids))?, scalar(nll_loss(&log_probs, &class_ids))?);
    Ok(())
}
test_device!(loss_enum_and_reductions_agree_test, loss_enum_and_reductions_agree);

fn losses_are_finite_at_extremes(device: Device) -> Result<()> {
    let dtype = widest_float(device);
    let tol = tol_on(device, tolerance(dtype).op);
    let tensor = |v: &[f64]| rnn_testutil::try_tensor(v, &[v.len()], dtype, device);
    // Probabilities of exactly 0 and 1 (log clamped at -100) and logits of ±1000.
    let probs = tensor(&[0.0, 1.0, 0.0, 1.0])?.requires_grad();
    let loss = binary_cross_entropy(&probs, &tensor(&[0.0, 1.0, 1.0, 0.0])?)?;
    assert_near(scalar(Ok(loss.clone()))?, 50.0, tol, "two terms of 100 over 4");
    let grads = loss.backward()?;
    let grad = grads.get(&probs).map(values).unwrap_or_default();
    assert!(grad.len() == 4 && grad.iter().all(|g| g.is_finite()), "gradient {grad:?}");
    let value =
        scalar(binary_cross_entropy_with_logits(&tensor(&[1000.0, -1000.0, 1000.0])?, &tensor(&[1.0, 0.0, 0.0])?))?;
    assert_near(value, 1000.0 / 3.0, tol, "BCE with logits of ±1000");
    Ok(())
}
test_device!(losses_are_finite_at_extremes_test, losses_are_finite_at_extremes);

fn loss_errors(device: Device) -> Result<()> {
    let dtype = widest_float(device);
    let rand = |seed, shape: &[usize]| random(seed, shape, dtype, device);
    let logits = rand(1, &[4, 5])?;
    let ids = |v: &[i64]| ids_on(v, device);
    // The CPU checks class ids at once; a GPU on the device, reporting a bad one at the next
    // sync point (here the read-back).
    let bad_target = |v: &[i64], on_cpu: &str, on_gpu: &str| -> Result<()> {
        let loss = cross_entropy(&logits, &ids(v)?);
        match device.is_cpu() {
            true => expect_err(loss, on_cpu),
            false => expect_err(loss.and_then(|l| l.to_device(Device::Cpu)), on_gpu),
        }
        Ok(())
    };
    bad_target(&[1, 5, 0, 2], "cross_entropy: index 5 is out of range", "cross_entropy: index 5 is out of range")?;
    bad_target(&[1, -1, 0, 2], "cross_entropy: index -1", "cross_entropy: index -1 is out of range")?;
    expect_err(cross_entropy(&logits, &ids(&[1, 2, 0])?), "do not match");
    expect_err(cross_entropy(&logits, &rand(2, &[4, 4])?), "shape mismatch");
    expect_err(cross_entropy(&Tensor::zeros((0, 5), dtype, device)?, &ids(&[])?), "empty");
    expect_err(cross_entropy(&ids(&[1, 2])?, &ids(&[1, 2])?), "float");
    let smooth = CrossEntropyOptions { label_smoothing: 1.5, ..Default::default() };
    expect_err(cross_entropy_with(&logits, &ids(&[1, 2, 0, 2])?, &smooth), "label_smoothing");
    let all_ignored = ids(&[-100; 4])?;
    expect_err(nll_loss_with(&logits, &all_ignored, Reduction::Mean, Some(-100)), "every target");
    // Cross entropy follows PyTorch there: the mean over no target is NaN.
    let options = CrossEntropyOptions { ignore_index: Some(-100), ..Default::default() };
    let nan = rnn_testutil::values(&cross_entropy_with(&logits, &all_ignored, &options)?);
    assert!(nan.len() == 1 && nan[0].is_nan(), "{nan:?}");
    expect_err(mse(&rand(1, &[4, 1])?, &rand(2, &[4])?), "shape mismatch");
    expect_err(mse(&Tensor::zeros(0, dtype, device)?, &Tensor::zeros(0, dtype, device)?), "empty");
    let half = Tensor::full(0.5, 3, dtype, device)?;
    expect_err(binary_cross_entropy(&half.mul_scalar(3.0)?, &half), "in [0, 1]");
    expect_err(huber_loss(&half, &half, 0.0), "delta");
    // A second float dtype, where the device has one.
    if let Some(other) = floats(device).into_iter().find(|&d| d != dtype) {
        expect_err(cross_entropy(&logits, &logits.to_dtype(other)?), "dtype mismatch");
        expect_err(Loss::Mse.compute(&half, &half.to_dtype(other)?), "dtype mismatch");
    }
    Ok(())
}
test_device!(loss_errors_test, loss_errors);

// ---------------------------------------------------------------- PyTorch golden values

const FIXTURE: &str = include_str!("golden/sequence.json");

fn reduction(options: &Value) -> Check<Reduction> {
    match options["reduction"].as_str() {
        Some("mean") | None => Ok(Reduction::Mean),
        Some("sum") => Ok(Reduction::Sum),
        Some("none") => Ok(Reduction::None),
        Some(other) => Err(format!("unknown reduction {other}")),
    }
}

/// One loss case, its float tensors in `dtype` on `device`.
fn loss_case(case: &Value, dtype: DType, device: Device) -> Check<f64> {
    let err = |e: Error| e.to_string();
    let pred = golden::tensor(&case["pred"], dtype, device)?.requires_grad();
    let target = golden::tensor(&case["target"], dtype, device)?;
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
    let tol = tolerance(dtype);
    let (tol_out, tol_grad) = (tol_on(device, tol.result), tol_on(device, tol.grad));
    golden::check_outputs_and_grads(&case, &[("out", &out)], &[("pred".to_string(), pred)], tol_out, tol_grad)
}

fn golden_losses(device: Device) -> Result<()> {
    let doc: Value = serde_json::from_str(FIXTURE).expect("golden/sequence.json is valid JSON");
    let cases = doc["losses"].as_array().expect("a losses section");
    for dtype in checked_floats(device) {
        golden::run_cases(&format!("losses in {dtype} on {device}"), cases, |c| loss_case(c, dtype, device));
    }
    Ok(())
}
test_device!(golden_losses_test, golden_losses);
