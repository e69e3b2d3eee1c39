//! PyTorch golden fixtures: JSON files written by a checked-in script, whose tensors are
//! stored as `{"shape": [..], "data": [..]}` (row-major, f64 values) with an optional
//! `"dtype"` (`"u8"`, `"i64"`) for integer tensors. A case check returns `Ok(worst error)` or
//! `Err(why)`, and [`run_cases`] fails the test listing every failing case.

use rnn_core::{DType, Device, Tensor};
use serde_json::Value;

use crate::{diff_summary, max_rel_err, values};

/// What a case check returns: its largest error, or why it failed.
pub type Check<T> = std::result::Result<T, String>;

/// The field `key` of `v`.
pub fn get<'a>(v: &'a Value, key: &str) -> Check<&'a Value> {
    v.get(key).ok_or_else(|| format!("missing field '{key}'"))
}

/// A stored number. JSON has no NaN or infinities: fixtures write them as the strings
/// `"nan"`, `"inf"` and `"-inf"`.
pub fn number(v: &Value) -> Check<f64> {
    match v {
        Value::String(s) if s == "nan" => Ok(f64::NAN),
        Value::String(s) if s == "inf" => Ok(f64::INFINITY),
        Value::String(s) if s == "-inf" => Ok(f64::NEG_INFINITY),
        _ => v.as_f64().ok_or_else(|| format!("expected a number, got {v}")),
    }
}

/// A stored tensor's shape and flat values.
pub fn stored(v: &Value) -> Check<(Vec<usize>, Vec<f64>)> {
    let shape: Vec<usize> = serde_json::from_value(get(v, "shape")?.clone()).map_err(|e| e.to_string())?;
    let data = get(v, "data")?.as_array().ok_or("'data' is not an array")?;
    let data = data.iter().map(number).collect::<Check<Vec<f64>>>()?;
    if shape.iter().product::<usize>() != data.len() {
        return Err(format!("shape {shape:?} does not hold {} values", data.len()));
    }
    Ok((shape, data))
}

/// A stored tensor on `device`: u8 / i64 when its `"dtype"` says so, else a float tensor in
/// `float` (the f64 values rounded to it).
pub fn tensor(v: &Value, float: DType, device: Device) -> Check<Tensor> {
    let (shape, data) = stored(v)?;
    let built = match v.get("dtype").and_then(Value::as_str) {
        Some("u8") => Tensor::from_vec(data.iter().map(|&x| x as u8).collect::<Vec<_>>(), shape, Device::Cpu),
        Some("i64") => Tensor::from_vec(data.iter().map(|&x| x as i64).collect::<Vec<_>>(), shape, Device::Cpu),
        Some(other) => return Err(format!("unknown stored dtype '{other}'")),
        None => Tensor::from_vec(data, shape, Device::Cpu).and_then(|t| t.to_dtype(float)),
    };
    built.and_then(|t| t.to_device(device)).map_err(|e| e.to_string())
}

/// `max_rel_err` of `ours` against the stored `want`; an error when the shapes differ or the
/// error is above `tol` (NaN included).
pub fn compare(what: &str, ours: &Tensor, want: &Value, tol: f64) -> Check<f64> {
    let (shape, data) = stored(want)?;
    if ours.dims() != shape.as_slice() {
        return Err(format!("{what}: shape {:?}, torch has {shape:?}", ours.dims()));
    }
    let got = values(ours);
    let err = max_rel_err(&got, &data);
    if err.is_nan() || err > tol {
        return Err(format!("{what}: error {err:.3e} > {tol:.0e}: {}", diff_summary(&got, &data)));
    }
    Ok(err)
}

/// Runs `run` on every case (each with a `"name"`); fails listing every case that fails.
/// `label` names the section, dtype and device in the messages.
pub fn run_cases(label: &str, cases: &[Value], run: impl Fn(&Value) -> Check<f64>) {
    assert!(!cases.is_empty(), "{label}: no cases");
    let mut worst = (0.0f64, String::new());
    let mut failures = Vec::new();
    for case in cases {
        let name = case["name"].as_str().unwrap_or("?");
        match run(case) {
            Ok(err) if err > worst.0 => worst = (err, name.to_string()),
            Ok(_) => {}
            Err(msg) => failures.push(format!("{name}: {msg}")),
        }
    }
    eprintln!("{label}: {} cases, worst error {:.3e} ({})", cases.len(), worst.0, worst.1);
    assert!(
        failures.is_empty(),
        "{label}: {} of {} cases differ from PyTorch:\n{}",
        failures.len(),
        cases.len(),
        failures.join("\n")
    );
}

/// Checks a case laid out as `{"outputs": {name: T}, "w": {name: T}, "grads": {var: T}}`:
/// each named output against `outputs[name]` (tolerance `tol_out`), then the gradients of
/// `sum_i sum(out_i * w_i)` w.r.t. every variable `grads` names (`vars` holds them by name)
/// against the stored ones (`tol_grad`). The weights take the first output's dtype and device.
pub fn check_outputs_and_grads(
    case: &Value,
    outputs: &[(&str, &Tensor)],
    vars: &[(String, Tensor)],
    tol_out: f64,
    tol_grad: f64,
) -> Check<f64> {
    let e = |e: rnn_core::Error| e.to_string();
    let (_, first) = outputs.first().ok_or("no outputs")?;
    let mut worst: f64 = 0.0;
    let mut loss = Tensor::zeros((), first.dtype(), first.device()).map_err(e)?;
    for (name, out) in outputs {
        worst = worst.max(compare(name, out, get(get(case, "outputs")?, name)?, tol_out)?);
        let w = tensor(get(get(case, "w")?, name)?, out.dtype(), out.device())?;
        loss = loss.add(&out.mul(&w).and_then(|t| t.sum_all()).map_err(e)?).map_err(e)?;
    }
    let grads = loss.backward().map_err(e)?;
    let expected = get(case, "grads")?.as_object().ok_or("'grads' is not an object")?;
    for (name, golden) in expected {
        let var = vars.iter().find(|(n, _)| n == name).map(|(_, t)| t).ok_or(format!("no variable {name}"))?;
        let grad = grads.get(var).ok_or(format!("no gradient for {name}"))?;
        worst = worst.max(compare(&format!("grad {name}"), grad, golden, tol_grad)?);
    }
    Ok(worst)
}
