//! Finite-difference gradient checks (f64, CPU) for every differentiable op, plus the
//! autograd plumbing: no_grad, detach, accumulation and a tensor used twice.
//!
//! Each table entry is (name, inputs, closure). The check compares the gradients of
//! `loss = sum(f(inputs) * w)` (w fixed random weights, so gradients are not all ones)
//! from `backward()` with central differences `(loss(x + h) - loss(x - h)) / 2h`.
//!
//! Finite differences need f64, which not every device has: on every device,
//! `backward_matches_cpu` runs the same table forward and backward in f32 and compares the
//! values and gradients with the f64 CPU computation (that the gradcheck has verified).

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use rnn_core::op_table::{BinaryOp, UnaryOp};
use rnn_core::{no_grad, DType, Device, Epilogue, Error, GradStore, NoGradGuard, Result, Tensor};
use rnn_testutil::{floats, max_rel_err, test_device, tol_on, tolerance, values, widest_float, GRADCHECK_TOL};

const H: f64 = 1e-6;
const CPU: Device = Device::Cpu;

/// Where an input's random values come from.
#[derive(Clone, Copy, Debug)]
enum Domain {
    /// Uniform in (-1.5, 1.5).
    Any,
    /// Uniform in (0.5, 2): log, sqrt, recip, pow bases.
    Positive,
    /// |x| in (0.2, 1.5), either sign: kinks at 0 (abs, relu, step), divisors.
    AwayFromZero,
}

/// How the input tensor is laid out in memory (its logical values are the same).
#[derive(Clone, Copy, Debug, PartialEq)]
enum View {
    Plain,
    /// The transpose of a contiguous tensor: last two dims swapped in the strides.
    Transposed,
    /// A slice of a wider tensor along the last dim (non-zero offset, gaps between rows).
    Narrowed,
}

#[derive(Clone, Debug)]
struct Input {
    dims: Vec<usize>,
    domain: Domain,
    view: View,
}

fn inp(dims: &[usize]) -> Input {
    Input { dims: dims.to_vec(), domain: Domain::Any, view: View::Plain }
}

impl Input {
    fn domain(self, domain: Domain) -> Self {
        Input { domain, ..self }
    }
    fn t(self) -> Self {
        Input { view: View::Transposed, ..self }
    }
    fn narrowed(self) -> Self {
        Input { view: View::Narrowed, ..self }
    }

    fn sample(&self, rng: &mut StdRng) -> Vec<f64> {
        let n: usize = self.dims.iter().product();
        (0..n)
            .map(|_| match self.domain {
                Domain::Any => rng.random_range(-1.5..1.5),
                Domain::Positive => rng.random_range(0.5..2.0),
                Domain::AwayFromZero => {
                    let sign = if rng.random::<bool>() { 1.0 } else { -1.0 };
                    sign * rng.random_range(0.2..1.5)
                }
            })
            .collect()
    }

    /// A tensor of `dtype` on `device` whose logical (row-major) values are `data` (rounded to
    /// `dtype`), laid out as `self.view` says.
    fn build(&self, data: &[f64], dtype: DType, device: Device) -> Result<Tensor> {
        let t = Tensor::from_vec(data.to_vec(), self.dims.clone(), CPU)?.to_dtype(dtype)?.to_device(device)?;
        let t = match self.view {
            View::Plain => t,
            View::Transposed => t.t()?.contiguous()?.detach().t()?,
            View::Narrowed => {
                let mut pad_dims = self.dims.clone();
                *pad_dims.last_mut().expect("narrowed input needs rank >= 1") = 1;
                let pad = Tensor::full(99.0, pad_dims, dtype, device)?;
                let last = *self.dims.last().unwrap();
                Tensor::cat(&[pad.clone(), t, pad], -1)?.narrow(-1, 1, last)?
            }
        };
        assert_eq!(t.is_contiguous(), self.view == View::Plain, "{:?} input of {:?}", self.view, self.dims);
        Ok(t)
    }
}

type Func = Box<dyn Fn(&[Tensor]) -> Result<Tensor>>;

struct Case {
    name: String,
    inputs: Vec<Input>,
    f: Func,
    /// The op's gradient is zero everywhere (step); otherwise a zero gradient is a failure.
    zero_grad: bool,
}

fn case(name: impl Into<String>, inputs: Vec<Input>, f: impl Fn(&[Tensor]) -> Result<Tensor> + 'static) -> Case {
    Case { name: name.into(), inputs, f: Box::new(f), zero_grad: false }
}

// ---------------------------------------------------------------- the check

fn weighted_loss(case: &Case, xs: &[Tensor], w: &Tensor) -> Result<Tensor> {
    (case.f)(xs)?.mul(w)?.sum_all()
}

fn loss_value(case: &Case, data: &[Vec<f64>], w: &Tensor) -> Result<f64> {
    no_grad(|| {
        let xs = case.inputs.iter().zip(data).map(|(i, d)| i.build(d, DType::F64, CPU)).collect::<Result<Vec<_>>>()?;
        weighted_loss(case, &xs, w)?.to_scalar::<f64>()
    })
}

fn numeric_grad(case: &Case, data: &mut [Vec<f64>], w: &Tensor, i: usize) -> Result<Vec<f64>> {
    let mut grad = Vec::with_capacity(data[i].len());
    for j in 0..data[i].len() {
        let x = data[i][j];
        data[i][j] = x + H;
        let plus = loss_value(case, data, w)?;
        data[i][j] = x - H;
        let minus = loss_value(case, data, w)?;
        data[i][j] = x;
        grad.push((plus - minus) / (2.0 * H));
    }
    Ok(grad)
}

fn run_check(case: &Case, rng: &mut StdRng) -> std::result::Result<(), String> {
    let mut data: Vec<Vec<f64>> = case.inputs.iter().map(|i| i.sample(rng)).collect();
    let err = |e: rnn_core::Error| e.to_string();
    let leaves = case.inputs.iter().zip(&data).map(|(i, d)| i.build(d, DType::F64, CPU).map(|t| t.requires_grad()));
    let leaves = leaves.collect::<Result<Vec<_>>>().map_err(err)?;
    let out = (case.f)(&leaves).map_err(err)?;
    if out.dtype() != DType::F64 || !out.tracks_grad() {
        return Err(format!("output is {} (tracks_grad: {})", out.dtype(), out.tracks_grad()));
    }
    let weights: Vec<f64> = (0..out.elem_count()).map(|_| rng.random_range(-1.0..1.0)).collect();
    let w = Tensor::from_vec(weights, out.dims().to_vec(), CPU).map_err(err)?;
    let grads = weighted_loss(case, &leaves, &w).and_then(|l| l.backward()).map_err(err)?;
    let mut all_zero = true;
    for (i, leaf) in leaves.iter().enumerate() {
        let g = grads.get(leaf).ok_or_else(|| format!("no gradient for input {i}"))?;
        if g.dims() != leaf.dims() {
            return Err(format!("input {i}: gradient shape {:?}, input shape {:?}", g.dims(), leaf.dims()));
        }
        let analytic = g.to_vec::<f64>().map_err(err)?;
        let numeric = numeric_grad(case, &mut data, &w, i).map_err(err)?;
        all_zero &= numeric.iter().all(|v| v.abs() < 1e-9);
        let e = max_rel_err(&analytic, &numeric);
        if e > GRADCHECK_TOL || e.is_nan() {
            return Err(format!("input {i}: max rel err {e:.3e}: {}", rnn_testutil::diff_summary(&analytic, &numeric)));
        }
    }
    if all_zero != case.zero_grad {
        return Err(format!("numeric gradient is {}zero", if all_zero { "" } else { "not " }));
    }
    Ok(())
}

/// Every case of the table.
fn all_cases() -> Vec<Case> {
    [unary_cases(), binary_cases(), select_cases(), reduce_cases(), movement_cases()]
        .into_iter()
        .chain([matmul_cases(), index_cases(), window_cases()])
        .flatten()
        .collect()
}

#[test]
fn gradcheck_every_op() {
    let mut rng = StdRng::seed_from_u64(0x5eed);
    let cases = all_cases();
    let mut failures = Vec::new();
    for case in &cases {
        if let Err(e) = run_check(case, &mut rng) {
            failures.push(format!("{}: {e}", case.name));
        }
    }
    println!("gradcheck: {} cases, {} failed", cases.len(), failures.len());
    assert!(
        failures.is_empty(),
        "{} of {} gradient checks failed:\n{}",
        failures.len(),
        cases.len(),
        failures.join("\n")
    );
}

// ---------------------------------------------------------------- every device against the CPU

/// The output values and the gradient of `sum(f(inputs) * w)` for each input (`None` where
/// backward recorded none), with the inputs in `dtype` on `device`.
type Run = (Vec<usize>, Vec<f64>, Vec<Option<Vec<f64>>>);

fn forward_backward(case: &Case, data: &[Vec<f64>], w: &[f64], dtype: DType, device: Device) -> Result<Run> {
    let leaves = case.inputs.iter().zip(data).map(|(i, d)| i.build(d, dtype, device).map(|t| t.requires_grad()));
    let leaves = leaves.collect::<Result<Vec<_>>>()?;
    let out = (case.f)(&leaves)?;
    assert_eq!((out.dtype(), out.device()), (dtype, device), "{}: output", case.name);
    let w = Tensor::from_vec(w.to_vec(), out.dims().to_vec(), CPU)?.to_dtype(dtype)?.to_device(device)?;
    let grads = weighted_loss(case, &leaves, &w)?.backward()?;
    let grads = leaves
        .iter()
        .map(|leaf| {
            grads.get(leaf).map(|g| {
                assert_eq!((g.dims(), g.dtype(), g.device()), (leaf.dims(), dtype, device), "{}: gradient", case.name);
                values(g)
            })
        })
        .collect();
    Ok((out.dims().to_vec(), values(&out), grads))
}

/// Runs `case` in f32 on `device` and in f64 on the CPU, on the same inputs and weights.
fn compare_with_cpu(case: &Case, rng: &mut StdRng, device: Device) -> std::result::Result<(), String> {
    let data: Vec<Vec<f64>> = case.inputs.iter().map(|i| i.sample(rng)).collect();
    // The output size, for the weights, from a forward pass without gradients.
    let err = |e: rnn_core::Error| e.to_string();
    let n = no_grad(|| {
        let xs = case.inputs.iter().zip(&data).map(|(i, d)| i.build(d, DType::F64, CPU)).collect::<Result<Vec<_>>>()?;
        Ok((case.f)(&xs)?.elem_count())
    })
    .map_err(err)?;
    let w: Vec<f64> = (0..n).map(|_| rng.random_range(-1.0..1.0)).collect();
    let (want_dims, want, want_grads) = forward_backward(case, &data, &w, DType::F64, CPU).map_err(err)?;
    let (dims, got, grads) = forward_backward(case, &data, &w, DType::F32, device).map_err(err)?;
    if dims != want_dims {
        return Err(format!("output shape {dims:?}, the CPU's is {want_dims:?}"));
    }
    // f32 results and gradients against f64: the inputs stay away from kinks, so only rounding
    // (and the device's f32 math) separates them.
    let tol = tol_on(device, tolerance(DType::F32).grad);
    let e = max_rel_err(&got, &want);
    if e > tol {
        return Err(format!("output: max rel err {e:.3e}: {}", rnn_testutil::diff_summary(&got, &want)));
    }
    for (i, (g, w)) in grads.iter().zip(&want_grads).enumerate() {
        match (g, w) {
            (Some(g), Some(w)) => {
                let e = max_rel_err(g, w);
                if e > tol {
                    return Err(format!(
                        "input {i}: gradient max rel err {e:.3e}: {}",
                        rnn_testutil::diff_summary(g, w)
                    ));
                }
            }
            (None, None) => {}
            (g, _) => return Err(format!("input {i}: a gradient on {} only", if g.is_some() { device } else { CPU })),
        }
    }
    Ok(())
}

/// Every case of the gradcheck table (unary and binary ops, where / clamp / masked_fill,
/// reductions and softmax, movement and cat, matmul, index ops, unfold / fold), forward and
/// backward in f32 on the device against f64 on the CPU.
fn backward_matches_cpu(device: Device) -> Result<()> {
    let mut rng = StdRng::seed_from_u64(0xf32);
    let cases = all_cases();
    let mut failures = Vec::new();
    for case in &cases {
        if let Err(e) = compare_with_cpu(case, &mut rng, device) {
            failures.push(format!("{}: {e}", case.name));
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} cases differ on {device} from the CPU:\n{}",
        failures.len(),
        cases.len(),
        failures.join("\n")
    );
    Ok(())
}
test_device!(backward_matches_cpu_test, backward_matches_cpu);

// ---------------------------------------------------------------- the table

fn unary_domain(op: UnaryOp) -> Domain {
    match op {
        UnaryOp::Log | UnaryOp::Sqrt | UnaryOp::Recip => Domain::Positive,
        UnaryOp::Abs | UnaryOp::Relu | UnaryOp::Step | UnaryOp::Sign => Domain::AwayFromZero,
        _ => Domain::Any,
    }
}

/// The piecewise-constant ops (their random inputs are almost surely not within `H` of a
/// step, so finite differences see zero too).
fn zero_gradient(op: UnaryOp) -> bool {
    matches!(op, UnaryOp::Step | UnaryOp::Floor | UnaryOp::Ceil | UnaryOp::Round | UnaryOp::Trunc | UnaryOp::Sign)
}

/// Every op of the op table, on a plain, a transposed and a narrowed input.
fn unary_cases() -> Vec<Case> {
    let mut cases = Vec::new();
    for &op in UnaryOp::ALL {
        let d = unary_domain(op);
        let views =
            [("plain", inp(&[2, 3, 4])), ("transposed", inp(&[3, 4]).t()), ("narrowed", inp(&[3, 4]).narrowed())];
        for (view, input) in views {
            let mut c = case(format!("{} ({view})", op.name()), vec![input.domain(d)], move |x| x[0].unary(op));
            c.zero_grad = zero_gradient(op);
            cases.push(c);
        }
    }
    cases
}

/// The right-hand input of a binary op, and whether the left one must be positive.
fn binary_domains(op: BinaryOp) -> (Domain, Domain) {
    match op {
        BinaryOp::Pow => (Domain::Positive, Domain::Any),
        // `//` and `%` jump where a is a multiple of b: random inputs are almost surely not
        // within `H` of one.
        BinaryOp::Div | BinaryOp::FloorDivide | BinaryOp::Remainder => (Domain::Any, Domain::AwayFromZero),
        _ => (Domain::Any, Domain::Any),
    }
}

/// Every binary op: same shapes, broadcasting, strided operands, and the scalar form.
fn binary_cases() -> Vec<Case> {
    let mut cases = Vec::new();
    for &op in BinaryOp::ALL {
        let (da, db) = binary_domains(op);
        let pairs = [
            ("same shape", inp(&[2, 3]), inp(&[2, 3])),
            ("[3,1,4] with [2,4]", inp(&[3, 1, 4]), inp(&[2, 4])),
            ("[4] with [3,1]", inp(&[4]), inp(&[3, 1])),
            ("transposed with narrowed", inp(&[3, 4]).t(), inp(&[3, 4]).narrowed()),
            ("transposed [4,3] with narrowed [2,1,3]", inp(&[4, 3]).t(), inp(&[2, 1, 3]).narrowed()),
        ];
        for (what, a, b) in pairs {
            let ins = vec![a.domain(da), b.domain(db)];
            let mut c = case(format!("{} ({what})", op.name()), ins, move |x| x[0].binary(&x[1], op));
            c.zero_grad = op == BinaryOp::FloorDivide;
            cases.push(c);
        }
        let scalar = if op == BinaryOp::Div { 0.7 } else { 0.3 };
        let ins = vec![inp(&[3, 4]).domain(da)];
        let mut c =
            case(format!("{} (scalar rhs)", op.name()), ins, move |x| x[0].binary(&x[0].full_like(scalar)?, op));
        c.zero_grad = op == BinaryOp::FloorDivide;
        cases.push(c);
    }
    cases
}

fn select_cases() -> Vec<Case> {
    // Masks on the device of the inputs `x`.
    let mask = |x: &[Tensor]| Tensor::from_vec(vec![1u8, 0, 0, 1, 1, 0, 0, 1, 0, 1, 1, 0], (3, 4), x[0].device());
    let row_mask = |x: &[Tensor]| Tensor::from_vec(vec![0u8, 1, 1, 0], 4, x[0].device());
    vec![
        case("where_cond", vec![inp(&[3, 4]), inp(&[3, 4])], move |x| mask(x)?.where_cond(&x[0], &x[1])),
        case("where_cond (broadcast [4], transposed)", vec![inp(&[4]), inp(&[3, 4]).t()], move |x| {
            mask(x)?.where_cond(&x[0], &x[1])
        }),
        case("where_cond (broadcast mask [4])", vec![inp(&[3, 4]), inp(&[3, 4]).narrowed()], move |x| {
            row_mask(x)?.where_cond(&x[0], &x[1])
        }),
        case("clamp", vec![inp(&[3, 4])], |x| x[0].clamp(-0.5, 0.6)),
        case("clamp (transposed)", vec![inp(&[4, 3]).t()], |x| x[0].clamp(-0.7, 0.2)),
        case("masked_fill", vec![inp(&[3, 4])], move |x| x[0].masked_fill(&mask(x)?, -3.0)),
        case("masked_fill (broadcast mask)", vec![inp(&[2, 3, 4]).narrowed()], move |x| {
            x[0].masked_fill(&row_mask(x)?, 5.0)
        }),
    ]
}

fn reduce_cases() -> Vec<Case> {
    let x = || inp(&[2, 3, 4]);
    let mut cases = vec![
        case("sum(1)", vec![x()], |x| x[0].sum(1)),
        case("sum_keepdim([0,2])", vec![x()], |x| x[0].sum_keepdim([0, 2])),
        case("sum([0,1]) transposed", vec![inp(&[3, 4]).t()], |x| x[0].sum([0usize, 1])),
        case("sum(-1) narrowed", vec![x().narrowed()], |x| x[0].sum(-1)),
        case("mean(2)", vec![x()], |x| x[0].mean(2)),
        case("mean_keepdim([0,1])", vec![x()], |x| x[0].mean_keepdim([0, 1])),
        case("mean(0) transposed", vec![inp(&[3, 4]).t()], |x| x[0].mean(0)),
        case("var(1)", vec![x()], |x| x[0].var(1)),
        case("var_keepdim([0,2])", vec![x()], |x| x[0].var_keepdim([0, 2])),
        case("var(-1) narrowed", vec![x().narrowed()], |x| x[0].var(-1)),
        case("var([0,1])", vec![x()], |x| x[0].var([0, 1])),
        case("var_keepdim(2) transposed", vec![x().t()], |x| x[0].var_keepdim(2)),
        case("var_with(1, correction 0)", vec![x()], |x| x[0].var_with(1, 0.0, false)),
        case("std(2)", vec![x()], |x| x[0].std(2)),
        case("logsumexp(1)", vec![x()], |x| x[0].logsumexp(1)),
        case("logsumexp_keepdim([0,2]) transposed", vec![x().t()], |x| x[0].logsumexp_keepdim([0, 2])),
        case("std_with([0,2], correction 0, keepdim)", vec![x().narrowed()], |x| x[0].std_with([0, 2], 0.0, true)),
        case("sum_keepdim(0)", vec![x()], |x| x[0].sum_keepdim(0)),
        case("sum_all", vec![x()], |x| x[0].sum_all()),
        case("mean_all", vec![x().narrowed()], |x| x[0].mean_all()),
        case("max_all", vec![x()], |x| x[0].max_all()),
        case("min_all", vec![x().t()], |x| x[0].min_all()),
    ];
    for keep in [false, true] {
        let k = if keep { "_keepdim" } else { "" };
        let pick = move |x: &Tensor, max: bool, dims: &[usize]| match (max, keep) {
            (true, false) => x.max(dims),
            (true, true) => x.max_keepdim(dims),
            (false, false) => x.min(dims),
            (false, true) => x.min_keepdim(dims),
        };
        cases.push(case(format!("max{k}(1)"), vec![x()], move |x| pick(&x[0], true, &[1])));
        cases.push(case(format!("max{k}([0,2])"), vec![x()], move |x| pick(&x[0], true, &[0, 2])));
        cases.push(case(format!("min{k}(0) transposed"), vec![inp(&[3, 4]).t()], move |x| pick(&x[0], false, &[0])));
        cases.push(case(format!("min{k}([1,2])"), vec![x().narrowed()], move |x| pick(&x[0], false, &[1, 2])));
    }
    for d in [0i64, 1, -1] {
        cases.push(case(format!("softmax({d})"), vec![x()], move |x| x[0].softmax(d)));
        cases.push(case(format!("log_softmax({d})"), vec![x()], move |x| x[0].log_softmax(d)));
    }
    cases.push(case("softmax(-1) transposed", vec![inp(&[4, 5]).t()], |x| x[0].softmax(-1)));
    cases.push(case("log_softmax(0) narrowed", vec![inp(&[3, 4]).narrowed()], |x| x[0].log_softmax(0)));
    cases
}

fn movement_cases() -> Vec<Case> {
    let x = || inp(&[2, 3, 4]);
    vec![
        case("reshape", vec![x()], |x| x[0].reshape((6, 4))),
        case("reshape (transposed, copies)", vec![inp(&[3, 4]).t()], |x| x[0].reshape(12)),
        case("transpose", vec![x()], |x| x[0].transpose(0, 2)),
        case("permute", vec![x()], |x| x[0].permute(&[1, 2, 0])),
        case("narrow", vec![x()], |x| x[0].narrow(2, 1, 2)),
        case("narrow (transposed)", vec![inp(&[3, 4]).t()], |x| x[0].narrow(1, 1, 2)),
        case("squeeze", vec![inp(&[2, 1, 3])], |x| x[0].squeeze(1)),
        case("unsqueeze", vec![inp(&[2, 3])], |x| x[0].unsqueeze(2)),
        case("broadcast_as", vec![inp(&[3, 1])], |x| x[0].broadcast_as((2, 3, 4))),
        case("broadcast_as (transposed)", vec![inp(&[3, 4]).t()], |x| x[0].broadcast_as((2, 3, 4))),
        case("flatten", vec![x()], |x| x[0].flatten(1, 2)),
        case("flatten (narrowed)", vec![x().narrowed()], |x| x[0].flatten(0, 1)),
        case("contiguous (transposed)", vec![inp(&[3, 4]).t()], |x| x[0].contiguous()),
        case("contiguous (narrowed)", vec![x().narrowed()], |x| x[0].contiguous()),
        case("cat(1)", vec![inp(&[2, 3]), inp(&[2, 1]), inp(&[2, 2]).narrowed()], |x| Tensor::cat(x, 1)),
        case("cat(0)", vec![inp(&[1, 3]), inp(&[3, 3]).t()], |x| Tensor::cat(x, 0)),
        case("stack(0)", vec![inp(&[2, 3]), inp(&[2, 3]), inp(&[2, 3])], |x| Tensor::stack(x, 0)),
        case("stack(-1)", vec![inp(&[2, 3]).t(), inp(&[2, 3]).narrowed()], |x| Tensor::stack(x, -1)),
        // f64 -> f32 -> f64 loses the 1e-6 perturbation; see `to_dtype_gradient_round_trip`.
        case("to_dtype (to its own dtype)", vec![x()], |x| x[0].to_dtype(x[0].dtype())?.exp()),
    ]
}

fn matmul_cases() -> Vec<Case> {
    let m = |a: Input, b: Input, name: &str| case(format!("matmul {name}"), vec![a, b], |x| x[0].matmul(&x[1]));
    vec![
        m(inp(&[3, 4]), inp(&[4, 5]), "2-D"),
        m(inp(&[2, 3, 4]), inp(&[2, 4, 5]), "batched"),
        m(inp(&[2, 1, 3, 4]), inp(&[3, 4, 2]), "batch-broadcast [2,1,3,4] @ [3,4,2]"),
        m(inp(&[3, 4]), inp(&[2, 4, 5]), "2-D @ batched"),
        m(inp(&[4]), inp(&[4, 5]), "1-D @ 2-D"),
        m(inp(&[3, 4]), inp(&[4]), "2-D @ 1-D"),
        m(inp(&[4]), inp(&[4]), "1-D @ 1-D"),
        m(inp(&[2, 3, 4]), inp(&[4]), "batched @ 1-D"),
        m(inp(&[3, 4]).t(), inp(&[4, 5]).t(), "transposed @ transposed"),
        m(inp(&[3, 4]).narrowed(), inp(&[4, 5]).t(), "narrowed @ transposed"),
        m(inp(&[2, 3, 4]).t(), inp(&[2, 4, 5]).narrowed(), "batched transposed @ narrowed"),
        case("linear, bias", vec![inp(&[3, 4]), inp(&[5, 4]), inp(&[5])], |x| {
            x[0].linear(&x[1], Some(&x[2]), Epilogue::None)
        }),
        case(
            "linear relu, transposed x, narrowed w",
            vec![inp(&[3, 4]).t(), inp(&[5, 4]).narrowed(), inp(&[5])],
            |x| x[0].linear(&x[1], Some(&x[2]), Epilogue::Relu),
        ),
        case("linear gelu, transposed w", vec![inp(&[6, 4]), inp(&[5, 4]).t(), inp(&[5])], |x| {
            x[0].linear(&x[1], Some(&x[2]), Epilogue::Gelu)
        }),
        case("linear gelu, no bias", vec![inp(&[2, 3]), inp(&[4, 3])], |x| x[0].linear(&x[1], None, Epilogue::Gelu)),
        case("linear relu, no bias", vec![inp(&[2, 3]).narrowed(), inp(&[4, 3])], |x| {
            x[0].linear(&x[1], None, Epilogue::Relu)
        }),
    ]
}

fn index_cases() -> Vec<Case> {
    // Index tensors on the device of the inputs `x`.
    let ids = |x: &[Tensor], v: &[u32]| Tensor::from_vec(v.to_vec(), v.len(), x[0].device());
    let gather_ids = |x: &[Tensor]| Tensor::from_vec(vec![0i64, 3, 1, 1, 2, 0], (3, 2), x[0].device());
    vec![
        case("index_select(0) with repeats", vec![inp(&[4, 3])], move |x| x[0].index_select(&ids(x, &[2, 0, 2])?, 0)),
        case("index_select(1) transposed", vec![inp(&[4, 3]).t()], move |x| {
            x[0].index_select(&ids(x, &[2, 0, 2, 1])?, 1)
        }),
        case("index_select(-1) 3-D", vec![inp(&[2, 3, 4]).narrowed()], move |x| {
            x[0].index_select(&ids(x, &[1, 1, 0])?, -1)
        }),
        case("gather(1)", vec![inp(&[3, 4])], move |x| x[0].gather(&gather_ids(x)?, 1)),
        case("gather(0) transposed, strided ids", vec![inp(&[4, 2]).t()], move |x| {
            x[0].gather(&Tensor::from_vec(vec![3u32, 0, 0, 1, 2, 3], (2, 3), x[0].device())?.t()?, 0)
        }),
        case("gather(1) transposed", vec![inp(&[3, 5]).t()], move |x| x[0].gather(&gather_ids(x)?, 1)),
        case("scatter_add(1) self and src", vec![inp(&[3, 4]), inp(&[3, 2])], move |x| {
            x[0].scatter_add(&gather_ids(x)?, &x[1], 1)
        }),
        case("scatter_add(0) strided", vec![inp(&[3, 2]).t(), inp(&[3, 2]).narrowed()], move |x| {
            let ids = Tensor::from_vec(vec![2u8, 0, 1, 2, 0, 0], (3, 2), x[0].device())?;
            x[0].scatter_add(&ids, &x[1], 0)
        }),
    ]
}

fn window_cases() -> Vec<Case> {
    vec![
        // A non-zero pad value, which must get no gradient.
        case("unfold2d stride 2 pad 1", vec![inp(&[2, 2, 4, 5])], |x| {
            x[0].unfold2d((3, 3), (2, 2), (1, 1), (1, 1), 0.5)
        }),
        case("unfold2d dilated, transposed", vec![inp(&[1, 2, 5, 4]).t()], |x| {
            x[0].unfold2d((2, 2), (1, 2), (0, 1), (2, 1), 0.0)
        }),
        // [1, 2, 4, 9]: 2x2 windows over 4x5, stride (1, 2), padding (0, 1): 3x3 positions.
        case("fold2d", vec![inp(&[1, 2, 4, 9])], |x| x[0].fold2d((4, 5), (2, 2), (1, 2), (0, 1), (1, 1))),
        case("fold2d narrowed", vec![inp(&[1, 1, 4, 9]).narrowed()], |x| {
            x[0].fold2d((4, 5), (2, 2), (1, 2), (0, 1), (1, 1))
        }),
    ]
}

// ---------------------------------------------------------------- autograd plumbing
//
// On every device, in its most precise float dtype (the values are exact in f32).

/// A variable of the most precise float dtype of `device`.
fn leaf(values: &[f64], dims: &[usize], device: Device) -> Result<Tensor> {
    Ok(rnn_testutil::tensor(values, dims, widest_float(device), device).requires_grad())
}

fn grad_of(grads: &GradStore, t: &Tensor) -> Vec<f64> {
    let g = grads.get(t).expect("a gradient for the variable");
    assert_eq!((g.dtype(), g.device()), (t.dtype(), t.device()), "gradient dtype and device");
    values(g)
}

fn no_grad_records_nothing(device: Device) -> Result<()> {
    let x = leaf(&[1.0, -2.0, 3.0], &[3], device)?;
    let y = no_grad(|| x.exp()?.mul(&x)?.sum_all())?;
    assert!(!y.tracks_grad(), "an op under no_grad must not record its inputs");
    assert!(y.backward().is_err(), "backward through a no_grad result must fail");
    {
        let _guard = NoGradGuard::new();
        assert!(!x.sqr()?.tracks_grad());
    }
    // Recording is back on after the scope and the guard.
    let z = x.sqr()?.sum_all()?;
    assert!(z.tracks_grad());
    assert_eq!(grad_of(&z.backward()?, &x), vec![2.0, -4.0, 6.0]);
    Ok(())
}
test_device!(no_grad_records_nothing_test, no_grad_records_nothing);

fn detach_stops_gradients(device: Device) -> Result<()> {
    let x = leaf(&[1.0, 2.0, -3.0], &[3], device)?;
    let d = x.detach();
    assert!(!d.tracks_grad() && d.same_storage(&x));
    // d(x * detach(x)) / dx = detach(x), not 2x.
    let grads = x.mul(&d)?.sum_all()?.backward()?;
    assert_eq!(grad_of(&grads, &x), vec![1.0, 2.0, -3.0]);
    assert!(d.exp()?.sum_all()?.backward().is_err(), "nothing to differentiate after detach");
    Ok(())
}
test_device!(detach_stops_gradients_test, detach_stops_gradients);

fn backward_into_accumulates(device: Device) -> Result<()> {
    let x = leaf(&[0.5, -1.0, 2.0, 0.25], &[2, 2], device)?;
    let w = rnn_testutil::tensor(&[1.0, 2.0, 3.0, 4.0], &[2, 2], x.dtype(), device);
    let loss = || x.sqr()?.mul(&w)?.sum_all();
    let once = grad_of(&loss()?.backward()?, &x);
    assert_eq!(once, vec![1.0, -4.0, 12.0, 2.0]);
    let mut grads = GradStore::new();
    loss()?.backward_into(&mut grads)?;
    loss()?.backward_into(&mut grads)?;
    let twice = grad_of(&grads, &x);
    assert_eq!(twice, once.iter().map(|g| 2.0 * g).collect::<Vec<_>>());
    Ok(())
}
test_device!(backward_into_accumulates_test, backward_into_accumulates);

/// Where a gradient's buffer lies (CPU): equal before and after an accumulation that
/// reused it.
fn buffer_address(g: &Tensor) -> Result<usize> {
    match g.dtype() {
        DType::F64 => g.with_host_slice(|s: &[f64]| s.as_ptr() as usize),
        _ => g.with_host_slice(|s: &[f32]| s.as_ptr() as usize),
    }
}

/// Accumulation adds into a stored gradient's buffer only when nothing else can see it: a
/// gradient the caller kept (or a view of it) keeps its values; a tensor used twice and a
/// parameter held by two handles get the sum of both paths.
fn accumulation_in_place_spares_shared_buffers(device: Device) -> Result<()> {
    let x = leaf(&[0.5, -1.0, 2.0, 0.25], &[2, 2], device)?;
    let alias = x.clone();
    let w = rnn_testutil::tensor(&[1.0, 2.0, 3.0, 4.0], &[2, 2], x.dtype(), device);
    // x through two handles and twice in one add: d/dx = 2 x w + 2 w + 2.
    let loss = || x.sqr()?.mul(&w)?.add(&alias.mul(&w)?.mul_scalar(2.0)?)?.add(&x.add(&x)?)?.sum_all();
    let once: Vec<f64> =
        [(0.5, 1.0), (-1.0, 2.0), (2.0, 3.0), (0.25, 4.0)].iter().map(|(x, w)| 2.0 * x * w + 2.0 * w + 2.0).collect();
    assert_eq!(grad_of(&loss()?.backward()?, &x), once);
    let mut grads = GradStore::new();
    loss()?.backward_into(&mut grads)?;
    let kept = grads.get(&x).expect("a gradient").clone();
    let kept_row = kept.narrow(0, 1, 1)?;
    loss()?.backward_into(&mut grads)?;
    let times = |k: f64| once.iter().map(|g| k * g).collect::<Vec<_>>();
    assert_eq!(grad_of(&grads, &x), times(2.0));
    assert_eq!(values(&kept), once, "a gradient the caller holds is not written");
    assert_eq!(values(&kept_row), once[2..].to_vec(), "nor a view of it");
    drop((kept, kept_row));
    let before = if device == CPU { Some(buffer_address(grads.get(&x).expect("a gradient"))?) } else { None };
    loss()?.backward_into(&mut grads)?;
    assert_eq!(grad_of(&grads, &x), times(3.0));
    if let Some(before) = before {
        assert_eq!(buffer_address(grads.get(&x).expect("a gradient"))?, before, "added in its own buffer");
    }
    assert_eq!(values(&x), vec![0.5, -1.0, 2.0, 0.25], "the parameter is untouched");
    Ok(())
}
test_device!(accumulation_in_place_spares_shared_buffers_test, accumulation_in_place_spares_shared_buffers);

/// The in-place sum of `GradStore::accumulate` has the bits of `add` in every float dtype,
/// including a strided (transposed) incoming gradient.
#[test]
fn accumulation_in_place_equals_add() -> Result<()> {
    let x = Tensor::zeros((3, 4), DType::F32, CPU)?.requires_grad();
    for dtype in [DType::F16, DType::BF16, DType::F32, DType::F64] {
        let first = Tensor::randn(0.0, 1.0, (3, 4), dtype, CPU)?;
        let second = Tensor::randn(0.0, 1.0, (4, 3), dtype, CPU)?.t()?;
        let expected = values(&first.add(&second)?);
        let mut store = GradStore::new();
        store.accumulate(&x, first)?;
        store.accumulate(&x, second)?;
        assert_eq!(values(store.get(&x).expect("a gradient")), expected, "{dtype}");
    }
    Ok(())
}

/// The gradient-ready hook reports each variable once, nearest the output first, with its
/// final gradient (the one `backward` returns), before the rest of the graph is done.
fn backward_hook_reports_final_gradients(device: Device) -> Result<()> {
    let x = leaf(&[0.5, -1.0, 2.0, 0.25], &[2, 2], device)?;
    let w1 = leaf(&[1.0, 2.0, 3.0, 4.0], &[2, 2], device)?;
    let w2 = leaf(&[0.5, -0.5, 1.5, 2.0], &[2, 2], device)?;
    // w1 is used twice (two paths meet), so its gradient is final only after both.
    let h = x.matmul(&w1)?.tanh()?.add(&w1)?;
    let loss = || h.matmul(&w2)?.sqr()?.sum_all();
    let reference = loss()?.backward()?;
    let mut seen = Vec::new();
    let mut grads = GradStore::new();
    loss()?.backward_with_hook(&mut grads, &mut |v, g| {
        let expected = reference.get(v).expect("a reported tensor has a gradient");
        assert_eq!(g.flatten_all()?.to_f64_vec()?, expected.flatten_all()?.to_f64_vec()?);
        seen.push(v.id());
        Ok(())
    })?;
    // x and w1 become final in the same op (their product), in its input order.
    assert_eq!(seen, vec![w2.id(), x.id(), w1.id()], "each variable once, the output's side first");
    // An error from the hook stops the pass and is returned.
    let stop = loss()?.backward_with_hook(&mut GradStore::new(), &mut |_, _| Err(Error::invalid("hook", "stop")));
    assert!(matches!(stop, Err(Error::InvalidArgument { .. })), "{stop:?}");
    Ok(())
}
test_device!(backward_hook_reports_final_gradients_test, backward_hook_reports_final_gradients);

fn tensor_used_twice_adds_gradients(device: Device) -> Result<()> {
    let x = leaf(&[1.5, -0.5, 2.0], &[3], device)?;
    // y = x * x + 3 x: dy/dx = 2x + 3, through three uses of x.
    let y = x.mul(&x)?.add(&x.mul_scalar(3.0)?)?.sum_all()?;
    assert_eq!(grad_of(&y.backward()?, &x), vec![6.0, 2.0, 7.0]);
    // Two branches of the graph that meet again: z = exp(x) + exp(x) * x.
    let e = x.exp()?;
    let z = e.add(&e.mul(&x)?)?.sum_all()?;
    let expected: Vec<f64> = [1.5f64, -0.5, 2.0].iter().map(|v| v.exp() * (2.0 + v)).collect();
    let tol = tol_on(device, if x.dtype() == DType::F64 { 1e-12 } else { 1e-6 });
    let err = max_rel_err(&grad_of(&z.backward()?, &x), &expected);
    assert!(err < tol, "{err:.3e}");
    Ok(())
}
test_device!(tensor_used_twice_adds_gradients_test, tensor_used_twice_adds_gradients);

/// A cast to a narrower float and back (f64 -> f32 -> f64 on the CPU) cannot be checked by
/// finite differences (the cast rounds the 1e-6 step away); its gradient is the identity,
/// cast back to the input's dtype.
fn to_dtype_gradient_round_trip(device: Device) -> Result<()> {
    let x = leaf(&[0.1, -0.2, 0.3], &[3], device)?;
    let narrow = floats(device).into_iter().find(|&d| d != x.dtype()).unwrap_or(x.dtype());
    let w = rnn_testutil::tensor(&[1.25, -2.5, 0.75], &[3], x.dtype(), device);
    let y = x.to_dtype(narrow)?.to_dtype(x.dtype())?.mul(&w)?.sum_all()?;
    let g = y.backward()?;
    assert_eq!(grad_of(&g, &x), vec![1.25, -2.5, 0.75], "through {narrow}");
    Ok(())
}
test_device!(to_dtype_gradient_round_trip_test, to_dtype_gradient_round_trip);
