//! PyTorch golden values: every case of `tests/golden/golden.json` (written by
//! `tests/golden/make_golden.py`, see its README) is rebuilt with our Tensor API, and the
//! forward output and the gradients of `sum(out * w)` are compared with PyTorch's.
//!
//! Each case runs on every device, twice where the device has f64: in f64 (tolerance
//! `tolerance(F64).result`) and with its float inputs in f32 (`tolerance(F32).result`, relaxed to the GPU's f32 math by
//! `tol_on`), both against the same f64 golden values. The inputs are multiples of 2^-10,
//! exact in f32, so the f32 run only sees its own rounding. Errors are
//! `|ours - torch| / (1 + |torch|)` (`rnn_testutil::max_rel_err`).
//!
//! A case whose op the test does not know fails, as does a unary or binary op of the op
//! table without a golden case (`NO_GOLDEN` lists the deliberate exceptions), so the fixture,
//! the op table and this file cannot drift apart silently.

use std::collections::HashSet;
use std::panic::{catch_unwind, AssertUnwindSafe};

use rnn_core::op_table::{BinaryOp, CmpOp, UnaryOp};
use rnn_core::{AllDims, DType, Device, Result, Tensor};
use rnn_testutil::{max_rel_err, supports, test_device, tol_on, tolerance, values};
use serde_json::Value;

const FIXTURE: &str = include_str!("golden/golden.json");
const FORMAT: u64 = 1;
const CPU: Device = Device::Cpu;

/// The inputs and formulas are well-conditioned, so f64 results agree with PyTorch to a few
/// ulps; `tolerance(F64).result` (1e-10) leaves room for different summation orders and libm
/// implementations. In f32, `tolerance(F32).result` (1e-5): f32 has a 6e-8 ulp, and sums of up
/// to 24 terms and exp/pow of moderate arguments stay well below it.
fn golden_tol(dtype: DType) -> f64 {
    tolerance(dtype).result
}

/// Unary ops of the table with no golden case, and why.
const NO_GOLDEN: &[(&str, &str)] = &[("step", "its gradient is zero and torch has no single op for it (heaviside)")];

type CaseResult = std::result::Result<f64, String>;

// ---------------------------------------------------------------- fixture parsing

fn field<'a>(v: &'a Value, key: &str) -> std::result::Result<&'a Value, String> {
    v.get(key).ok_or_else(|| format!("missing field '{key}'"))
}
fn as_usize(v: &Value) -> std::result::Result<usize, String> {
    v.as_u64().map(|x| x as usize).ok_or_else(|| format!("expected a non-negative integer, got {v}"))
}
fn as_i64(v: &Value) -> std::result::Result<i64, String> {
    v.as_i64().ok_or_else(|| format!("expected an integer, got {v}"))
}
/// A number; NaN and infinities, which JSON lacks, are the strings "nan", "inf" and "-inf".
fn as_f64(v: &Value) -> std::result::Result<f64, String> {
    rnn_testutil::golden::number(v)
}
fn as_array(v: &Value) -> std::result::Result<&Vec<Value>, String> {
    v.as_array().ok_or_else(|| format!("expected an array, got {v}"))
}
fn as_bool(v: &Value) -> std::result::Result<bool, String> {
    v.as_bool().ok_or_else(|| format!("expected a bool, got {v}"))
}
fn as_str(v: &Value) -> std::result::Result<&str, String> {
    v.as_str().ok_or_else(|| format!("expected a string, got {v}"))
}
fn usizes(v: &Value) -> std::result::Result<Vec<usize>, String> {
    as_array(v)?.iter().map(as_usize).collect()
}
fn i64s(v: &Value) -> std::result::Result<Vec<i64>, String> {
    as_array(v)?.iter().map(as_i64).collect()
}
fn f64s(v: &Value) -> std::result::Result<Vec<f64>, String> {
    as_array(v)?.iter().map(as_f64).collect()
}

/// A stored tensor: shape and flat row-major values.
struct Golden {
    shape: Vec<usize>,
    data: Vec<f64>,
}

impl Golden {
    fn parse(v: &Value) -> std::result::Result<Golden, String> {
        let shape = usizes(field(v, "shape")?)?;
        let data = f64s(field(v, "data")?)?;
        if shape.iter().product::<usize>() != data.len() {
            return Err(format!("shape {shape:?} does not hold {} values", data.len()));
        }
        Ok(Golden { shape, data })
    }
}

/// Checks `t` against `want`; returns the max error.
fn compare(what: &str, t: &Tensor, want: &Golden, exact: bool) -> CaseResult {
    if t.dims() != want.shape.as_slice() {
        return Err(format!("{what}: shape {:?}, torch has {:?}", t.dims(), want.shape));
    }
    let got = values(t);
    let err = max_rel_err(&got, &want.data);
    if exact && err != 0.0 {
        return Err(format!("{what}: {}", rnn_testutil::diff_summary(&got, &want.data)));
    }
    Ok(err)
}

// ---------------------------------------------------------------- one case

/// A case's inputs: the leaves (gradients are taken w.r.t. them), the views the op sees
/// (transposed where the case says), and which inputs are float.
struct Inputs {
    leaves: Vec<Tensor>,
    views: Vec<Tensor>,
    is_float: Vec<bool>,
}

/// Builds the case's inputs on `device`, the float ones in `dtype`.
fn build_inputs(inputs: &[Value], dtype: DType, device: Device) -> std::result::Result<Inputs, String> {
    let (mut leaves, mut views, mut is_float) = (vec![], vec![], vec![]);
    let e = |e: rnn_core::Error| e.to_string();
    for inp in inputs {
        let shape = usizes(field(inp, "shape")?)?;
        let data = field(inp, "data")?;
        let kind = as_str(field(inp, "dtype")?)?;
        let leaf = match kind {
            "f" => Tensor::from_vec(f64s(data)?, shape, CPU).and_then(|t| t.to_dtype(dtype)).map_err(e)?,
            "i64" => Tensor::from_vec(i64s(data)?, shape, CPU).map_err(e)?,
            "u32" => {
                let v = i64s(data)?.into_iter().map(u32::try_from).collect::<std::result::Result<Vec<_>, _>>();
                Tensor::from_vec(v.map_err(|x| x.to_string())?, shape, CPU).map_err(e)?
            }
            "u8" => {
                let v = i64s(data)?.into_iter().map(u8::try_from).collect::<std::result::Result<Vec<_>, _>>();
                Tensor::from_vec(v.map_err(|x| x.to_string())?, shape, CPU).map_err(e)?
            }
            other => return Err(format!("unknown input dtype '{other}'")),
        };
        let leaf = leaf.to_device(device).map_err(e)?;
        let leaf = if kind == "f" { leaf.requires_grad() } else { leaf };
        let view = match inp.get("transpose") {
            None => leaf.clone(),
            Some(t) => {
                let d = usizes(t)?;
                if d.len() != 2 {
                    return Err(format!("transpose needs two dims, got {d:?}"));
                }
                let v = leaf.transpose(d[0], d[1]).map_err(e)?;
                if v.is_contiguous() && v.elem_count() > 1 {
                    return Err("the transposed input is contiguous: the case tests nothing".into());
                }
                v
            }
        };
        is_float.push(kind == "f");
        leaves.push(leaf);
        views.push(view);
    }
    Ok(Inputs { leaves, views, is_float })
}

fn arity(name: &str, xs: &[Tensor], n: usize) -> std::result::Result<(), String> {
    if xs.len() != n {
        return Err(format!("op '{name}' takes {n} inputs, the case has {}", xs.len()));
    }
    Ok(())
}

fn unary_op(name: &str) -> Option<UnaryOp> {
    UnaryOp::ALL.iter().copied().find(|o| o.name() == name)
}
fn binary_op(name: &str) -> Option<BinaryOp> {
    BinaryOp::ALL.iter().copied().find(|o| o.name() == name)
}

/// The case's computation with our API. Unknown ops and malformed cases are `Err(String)`;
/// errors of the library are `Ok(Err(..))`.
fn apply(op: &Value, xs: &[Tensor]) -> std::result::Result<Result<Tensor>, String> {
    let name = as_str(field(op, "op")?)?;
    let int = |k: &str| field(op, k).and_then(as_i64);
    let uint = |k: &str| field(op, k).and_then(as_usize);
    let num = |k: &str| field(op, k).and_then(as_f64);
    let keepdim = || field(op, "keepdim").and_then(as_bool);
    // Reductions over a list of dims: (no keepdim, keepdim, all dims).
    type Red = fn(&Tensor, Vec<i64>) -> Result<Tensor>;
    type RedAll = fn(&Tensor) -> Result<Tensor>;
    let reduction: Option<(Red, Red, RedAll)> = match name.strip_suffix("_all").unwrap_or(name) {
        "sum" => Some((|x, d| x.sum(d), |x, d| x.sum_keepdim(d), |x| x.sum_all())),
        "mean" => Some((|x, d| x.mean(d), |x, d| x.mean_keepdim(d), |x| x.mean_all())),
        "max" => Some((|x, d| x.max(d), |x, d| x.max_keepdim(d), |x| x.max_all())),
        "min" => Some((|x, d| x.min(d), |x, d| x.min_keepdim(d), |x| x.min_all())),
        "var" => Some((|x, d| x.var(d), |x, d| x.var_keepdim(d), |x| x.var(AllDims))),
        "std" => Some((|x, d| x.std(d), |x, d| x.std_keepdim(d), |x| x.std(AllDims))),
        "logsumexp" => Some((|x, d| x.logsumexp(d), |x, d| x.logsumexp_keepdim(d), |x| x.logsumexp(AllDims))),
        _ => None,
    };
    // var / std with PyTorch's `correction` (the plain forms above divide by n - 1).
    if let Ok(correction) = field(op, "correction").and_then(as_f64) {
        arity(name, xs, 1)?;
        let (dims, keep) = (i64s(field(op, "dims")?)?, keepdim()?);
        return match name {
            "var" => Ok(xs[0].var_with(dims, correction, keep)),
            "std" => Ok(xs[0].std_with(dims, correction, keep)),
            _ => Err(format!("op '{name}' takes no correction")),
        };
    }
    if let Some((plain, keep, all)) = reduction {
        arity(name, xs, 1)?;
        return Ok(if name.ends_with("_all") {
            all(&xs[0])
        } else if keepdim()? {
            keep(&xs[0], i64s(field(op, "dims")?)?)
        } else {
            plain(&xs[0], i64s(field(op, "dims")?)?)
        });
    }
    Ok(match name {
        "unary" => {
            arity(name, xs, 1)?;
            let f = as_str(field(op, "fn")?)?;
            let u = unary_op(f).ok_or_else(|| format!("unknown unary op '{f}'"))?;
            xs[0].unary(u)
        }
        "binary" => {
            arity(name, xs, 2)?;
            let f = as_str(field(op, "fn")?)?;
            let b = binary_op(f).ok_or_else(|| format!("unknown binary op '{f}'"))?;
            xs[0].binary(&xs[1], b)
        }
        "cmp" => {
            arity(name, xs, 2)?;
            let f = as_str(field(op, "fn")?)?;
            let c = CmpOp::ALL
                .iter()
                .copied()
                .find(|o| o.name() == f)
                .ok_or_else(|| format!("unknown comparison '{f}'"))?;
            xs[0].cmp(&xs[1], c)
        }
        "where_cond" => {
            arity(name, xs, 3)?;
            xs[0].where_cond(&xs[1], &xs[2])
        }
        "clamp" => {
            arity(name, xs, 1)?;
            xs[0].clamp(num("min")?, num("max")?)
        }
        "masked_fill" => {
            arity(name, xs, 2)?;
            xs[0].masked_fill(&xs[1], num("value")?)
        }
        "argmax" | "argmin" => {
            arity(name, xs, 1)?;
            let (d, keep) = (int("dim")?, keepdim()?);
            match (name, keep) {
                ("argmax", false) => xs[0].argmax(d),
                ("argmax", true) => xs[0].argmax_keepdim(d),
                ("argmin", false) => xs[0].argmin(d),
                _ => xs[0].argmin_keepdim(d),
            }
        }
        "softmax" => {
            arity(name, xs, 1)?;
            xs[0].softmax(int("dim")?)
        }
        "log_softmax" => {
            arity(name, xs, 1)?;
            xs[0].log_softmax(int("dim")?)
        }
        "matmul" => {
            arity(name, xs, 2)?;
            xs[0].matmul(&xs[1])
        }
        "index_select" => {
            arity(name, xs, 2)?;
            xs[0].index_select(&xs[1], int("dim")?)
        }
        "gather" => {
            arity(name, xs, 2)?;
            xs[0].gather(&xs[1], int("dim")?)
        }
        "scatter_add" => {
            arity(name, xs, 3)?;
            xs[0].scatter_add(&xs[1], &xs[2], int("dim")?)
        }
        "one_hot" => {
            arity(name, xs, 1)?;
            let dt = as_str(field(op, "dtype")?)?;
            xs[0].one_hot(uint("num_classes")?, dt.parse().map_err(|e: rnn_core::Error| e.to_string())?)
        }
        "cat" => Tensor::cat(xs, int("dim")?),
        "stack" => Tensor::stack(xs, int("dim")?),
        "narrow" => {
            arity(name, xs, 1)?;
            xs[0].narrow(int("dim")?, uint("start")?, uint("len")?)
        }
        "permute" => {
            arity(name, xs, 1)?;
            xs[0].permute(&usizes(field(op, "perm")?)?)
        }
        "transpose" => {
            arity(name, xs, 1)?;
            xs[0].transpose(int("d0")?, int("d1")?)
        }
        "reshape" => {
            arity(name, xs, 1)?;
            xs[0].reshape(usizes(field(op, "shape")?)?)
        }
        other => return Err(format!("unknown op '{other}': teach tests/golden.rs to build it")),
    })
}

/// Runs one case on `device` with float inputs in `dtype`; returns the max error over the
/// output and the gradients, or why it failed.
fn run_case(case: &Value, dtype: DType, tol: f64, device: Device) -> CaseResult {
    let e = |e: rnn_core::Error| e.to_string();
    let Inputs { leaves, views, is_float } = build_inputs(as_array(field(case, "inputs")?)?, dtype, device)?;
    let out = apply(field(case, "op")?, &views)?.map_err(e)?;
    let golden_out = field(case, "out")?;
    let int_out = as_str(field(golden_out, "dtype")?)? == "int";
    if int_out == out.dtype().is_float() {
        return Err(format!(
            "output dtype {} where torch's is {}",
            out.dtype(),
            if int_out { "integer" } else { "float" }
        ));
    }
    let mut worst = compare("output", &out, &Golden::parse(golden_out)?, int_out)?;
    let check = |what: &str, err: f64| {
        if err > tol {
            Err(format!("{what}: max error {err:.3e} > {tol:.0e}"))
        } else {
            Ok(err)
        }
    };
    check("output", worst)?;

    let (Some(w), Some(grads)) = (case.get("w"), case.get("grads")) else {
        return Ok(worst);
    };
    let w = Golden::parse(w)?;
    let w = Tensor::from_vec(w.data, w.shape, CPU).and_then(|t| t.to_dtype(dtype)?.to_device(device)).map_err(e)?;
    let store = out.mul(&w).and_then(|l| l.sum_all()).and_then(|l| l.backward()).map_err(e)?;
    let grads = as_array(grads)?;
    if grads.len() != leaves.len() {
        return Err(format!("{} gradients for {} inputs", grads.len(), leaves.len()));
    }
    for (i, ((leaf, want), float)) in leaves.iter().zip(grads).zip(is_float).enumerate() {
        match (float, want.is_null()) {
            (false, true) => continue,
            (false, false) | (true, true) => return Err(format!("input {i}: gradient given iff the input is float")),
            (true, false) => {}
        }
        let want = Golden::parse(want)?;
        let what = format!("grad of input {i}");
        let err = match store.get(leaf) {
            Some(g) => {
                if g.dtype() != dtype || g.device() != device {
                    return Err(format!("{what}: {} on {}, expected {dtype} on {device}", g.dtype(), g.device()));
                }
                compare(&what, g, &want, false)?
            }
            // No gradient recorded: only right when torch's is zero.
            None => max_rel_err(&vec![0.0; want.data.len()], &want.data),
        };
        worst = worst.max(check(&what, err)?);
    }
    Ok(worst)
}

/// `run_case`, with a panic turned into a failure of this case only.
fn run_guarded(case: &Value, dtype: DType, tol: f64, device: Device) -> CaseResult {
    match catch_unwind(AssertUnwindSafe(|| run_case(case, dtype, tol, device))) {
        Ok(r) => r,
        Err(p) => {
            let msg = p.downcast_ref::<String>().cloned().or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()));
            Err(format!("panicked: {}", msg.unwrap_or_default()))
        }
    }
}

// ---------------------------------------------------------------- the test

fn pytorch_golden_values(device: Device) -> Result<()> {
    let doc: Value = serde_json::from_str(FIXTURE).expect("golden.json is not valid JSON");
    assert_eq!(doc["format"].as_u64(), Some(FORMAT), "golden.json has another format version: regenerate it");
    let torch = doc["torch_version"].as_str().unwrap_or("?");
    let cases = doc["cases"].as_array().expect("golden.json has no 'cases' array");
    assert!(!cases.is_empty(), "golden.json has no cases");

    let mut failures = Vec::new();
    let mut names = HashSet::new();
    let (mut unary_seen, mut binary_seen) = (HashSet::new(), HashSet::new());
    let mut worst = [(0.0, String::new()), (0.0, String::new())];
    for case in cases {
        let name = case["name"].as_str().unwrap_or("<unnamed>").to_string();
        if !names.insert(name.clone()) {
            failures.push(format!("{name}: duplicate case name"));
        }
        match (case["op"]["op"].as_str(), case["op"]["fn"].as_str()) {
            (Some("unary"), Some(f)) => drop(unary_seen.insert(f.to_string())),
            (Some("binary"), Some(f)) => drop(binary_seen.insert(f.to_string())),
            _ => {}
        }
        for (k, dtype) in [DType::F64, DType::F32].into_iter().enumerate() {
            if !supports(device, dtype) {
                continue;
            }
            match run_guarded(case, dtype, tol_on(device, golden_tol(dtype)), device) {
                Ok(err) if err > worst[k].0 => worst[k] = (err, name.clone()),
                Ok(_) => {}
                Err(msg) => failures.push(format!("{name} [{dtype}]: {msg}")),
            }
        }
    }
    for op in UnaryOp::ALL {
        if !unary_seen.contains(op.name()) && !NO_GOLDEN.iter().any(|(n, _)| *n == op.name()) {
            failures
                .push(format!("unary op '{}' has no golden case: add one to make_golden.py and regenerate", op.name()));
        }
    }
    for op in BinaryOp::ALL {
        if !binary_seen.contains(op.name()) {
            failures.push(format!(
                "binary op '{}' has no golden case: add one to make_golden.py and regenerate",
                op.name()
            ));
        }
    }

    eprintln!("{} golden cases from torch {torch} on {device}", cases.len());
    eprintln!(
        "worst f64 error {:.3e} ({}), worst f32 error {:.3e} ({})",
        worst[0].0, worst[0].1, worst[1].0, worst[1].1
    );
    if !failures.is_empty() {
        for f in &failures {
            eprintln!("FAILED {f}");
        }
        panic!("{} golden checks failed on {device} (of {} cases x 2 dtypes)", failures.len(), cases.len());
    }
    Ok(())
}
test_device!(pytorch_golden_values_test, pytorch_golden_values);
