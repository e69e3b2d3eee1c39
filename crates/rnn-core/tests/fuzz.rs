//! Property tests over random shapes (rank 0-4, dims 0-4), dims (-6..6, so often out of
//! range), indices (negative and too large), dtypes, layouts and ops. Every call must return
//! `Ok` or `Err`, never panic; each property also states exactly when a call succeeds, and
//! an `Ok` result must be a readable tensor of the expected shape.
//!
//! Every property runs on every device, with the dtypes that device supports; a GPU device
//! runs `GPU_SHARE` of the cases (each case launches dozens of kernels).

use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};
use rnn_core::op_table::{BinaryOp, CmpOp, UnaryOp};
use rnn_core::{DType, Device, Dims, Result, Tensor};
use rnn_testutil::{dtypes, floats, supports, test_device};

const CPU: Device = Device::Cpu;

/// The fraction of each property's cases a GPU device runs.
const GPU_SHARE: u32 = 8;

/// `cases` per property (PROPTEST_CASES overrides it, for a longer run); no regression files.
fn config(cases: u32) -> Config {
    let cases = std::env::var("PROPTEST_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(cases);
    Config { cases, failure_persistence: None, ..Config::default() }
}

/// Runs the property `test` on `cases` inputs drawn from `strategy` (a GPU device runs
/// `cases / GPU_SHARE`); a failure panics with the shrunk input.
fn run<S: Strategy>(device: Device, cases: u32, strategy: S, test: impl Fn(S::Value)) -> Result<()> {
    let cases = if device.is_cpu() { cases } else { (cases / GPU_SHARE).max(8) };
    let mut runner = TestRunner::new(config(cases));
    if let Err(e) = runner.run(&strategy, |v| {
        test(v);
        Ok(())
    }) {
        panic!("on {device}: {e}");
    }
    Ok(())
}

// ---- inputs ----

/// How to build one input tensor: its device, shape and dtype, a layout (`view`) and the
/// values.
#[derive(Clone, Debug)]
struct Spec {
    device: Device,
    shape: Vec<usize>,
    dtype: DType,
    view: u8,
    seed: usize,
}

fn shape() -> impl Strategy<Value = Vec<usize>> {
    prop::collection::vec(0usize..5, 0..=4)
}
/// Any dtype `device` supports.
fn dtype(device: Device) -> impl Strategy<Value = DType> {
    prop::sample::select(dtypes(device))
}
/// Any float dtype `device` supports.
fn float_dtype(device: Device) -> impl Strategy<Value = DType> {
    prop::sample::select(floats(device))
}
fn dim() -> impl Strategy<Value = i64> {
    -6i64..6
}
fn spec_of(device: Device, dtype: impl Strategy<Value = DType>) -> impl Strategy<Value = Spec> {
    (shape(), dtype, 0u8..4, 0usize..11).prop_map(move |(shape, dtype, view, seed)| Spec {
        device,
        shape,
        dtype,
        view,
        seed,
    })
}
fn spec(device: Device) -> impl Strategy<Value = Spec> {
    spec_of(device, dtype(device))
}

/// A tensor of exactly `s.shape` and `s.dtype` on `s.device`: contiguous, transposed, a
/// narrowed view, or broadcast (stride 0), so the kernels see every kind of layout.
fn build(s: &Spec) -> Tensor {
    let make = |shape: &[usize]| {
        let n: usize = shape.iter().product();
        let data: Vec<f64> = (0..n).map(|i| ((i * 7 + s.seed) % 11) as f64 - 3.0).collect();
        rnn_testutil::try_tensor(&data, shape, s.dtype, s.device).expect("build input")
    };
    let r = s.shape.len();
    let t = match s.view {
        1 if r >= 2 => {
            let reversed: Vec<usize> = s.shape.iter().rev().copied().collect();
            make(&reversed).permute(&(0..r).rev().collect::<Vec<_>>()).expect("transposed input")
        }
        2 if r >= 1 => {
            let mut bigger = s.shape.clone();
            bigger[0] += 2;
            make(&bigger).narrow(0, 1, s.shape[0]).expect("narrowed input")
        }
        3 if r >= 1 => {
            let small: Vec<usize> =
                s.shape[1..].iter().enumerate().map(|(i, &d)| if i % 2 == 1 { 1 } else { d }).collect();
            make(&small).broadcast_as(s.shape.clone()).expect("broadcast input")
        }
        _ => make(&s.shape),
    };
    assert_eq!(t.dims(), &s.shape[..]);
    t
}

/// A shape related to `a`, so that shape-checked ops succeed often: `b` itself (mode 0), a
/// suffix of `a` with some dims set to 1 (mode 1, broadcastable), or `a` (mode 2).
fn related(a: &[usize], b: &[usize], mode: u8) -> Vec<usize> {
    match mode % 3 {
        0 => b.to_vec(),
        1 => {
            let k = a.len().min(b.len());
            a[a.len() - k..].iter().zip(b).map(|(&x, &y)| if y % 2 == 0 { 1 } else { x }).collect()
        }
        _ => a.to_vec(),
    }
}

/// An index tensor on `device` of `shape` filled with `vals` repeated, converted to `dtype`.
fn ids_tensor(vals: &[i64], shape: &[usize], dtype: DType, device: Device) -> Tensor {
    let data = cycled(vals, shape.iter().product());
    Tensor::from_vec(data, shape.to_vec(), CPU).and_then(|t| t.to_dtype(dtype)?.to_device(device)).expect("build ids")
}

fn cycled(vals: &[i64], n: usize) -> Vec<i64> {
    (0..n).map(|i| if vals.is_empty() { 0 } else { vals[i % vals.len()] }).collect()
}

/// Whether every index (as stored in `dtype`: casts between integers wrap, as in PyTorch) is
/// below `size`.
fn all_in_range(vals: &[i64], dtype: DType, size: usize) -> bool {
    vals.iter().all(|&v| {
        let v = match dtype {
            DType::U8 => i64::from(v as u8),
            DType::U32 => i64::from(v as u32),
            _ => v,
        };
        v >= 0 && (v as usize) < size
    })
}

// ---- expectations ----

fn resolve(d: i64, rank: usize) -> Option<usize> {
    let r = rank as i64;
    let i = if d < 0 { d + r } else { d };
    (0..r).contains(&i).then_some(i as usize)
}

/// Distinct valid dims, sorted.
fn resolve_all(dims: &[i64], rank: usize) -> Option<Vec<usize>> {
    let mut out = Vec::new();
    for &d in dims {
        let i = resolve(d, rank)?;
        if out.contains(&i) {
            return None;
        }
        out.push(i);
    }
    out.sort_unstable();
    Some(out)
}

fn broadcast(a: &[usize], b: &[usize]) -> Option<Vec<usize>> {
    let r = a.len().max(b.len());
    let at = |s: &[usize], k: usize| if k < s.len() { s[s.len() - 1 - k] } else { 1 };
    let mut out = vec![0; r];
    for k in 0..r {
        let (x, y) = (at(a, k), at(b, k));
        out[r - 1 - k] = if x == y || y == 1 {
            x
        } else if x == 1 {
            y
        } else {
            return None;
        };
    }
    Some(out)
}

/// Whether `src` stretches to `dst` (`broadcast_as`).
fn stretches(src: &[usize], dst: &[usize]) -> bool {
    dst.len() >= src.len() && src.iter().rev().zip(dst.iter().rev()).all(|(&s, &d)| s == d || s == 1)
}

/// PyTorch's matmul shape rules: 1-D operands are promoted, batch dims broadcast.
fn matmul_shape(a: &[usize], b: &[usize]) -> Option<Vec<usize>> {
    if a.is_empty() || b.is_empty() {
        return None;
    }
    let a2 = if a.len() == 1 { vec![1, a[0]] } else { a.to_vec() };
    let b2 = if b.len() == 1 { vec![b[0], 1] } else { b.to_vec() };
    let (ra, rb) = (a2.len(), b2.len());
    if a2[ra - 1] != b2[rb - 2] {
        return None;
    }
    let mut out = broadcast(&a2[..ra - 2], &b2[..rb - 2])?;
    if a.len() > 1 {
        out.push(a2[ra - 2]);
    }
    if b.len() > 1 {
        out.push(b2[rb - 1]);
    }
    Some(out)
}

fn reduced_shape(shape: &[usize], dims: &[usize], keepdim: bool) -> Vec<usize> {
    let keep = |(i, &d): (usize, &usize)| if dims.contains(&i) { keepdim.then_some(1) } else { Some(d) };
    shape.iter().enumerate().filter_map(keep).collect()
}

/// `shape` edited at dim `i` by `f`; `None` when the dim is invalid.
fn edited(shape: &[usize], i: Option<usize>, f: impl FnOnce(&mut Vec<usize>, usize)) -> Option<Vec<usize>> {
    let mut s = shape.to_vec();
    f(&mut s, i?);
    Some(s)
}

fn is_perm(perm: &[usize], rank: usize) -> bool {
    let mut sorted = perm.to_vec();
    sorted.sort_unstable();
    sorted == (0..rank).collect::<Vec<_>>()
}

// ---- checking outcomes ----

/// An `Ok` result is readable (its values are read back to the host), with as many elements
/// as its shape says.
fn check(t: &Tensor) -> Vec<f64> {
    assert_eq!(t.elem_count(), t.dims().iter().product::<usize>());
    let values =
        t.to_device(CPU).and_then(|v| v.to_dtype(DType::F64)?.to_vec::<f64>()).expect("an Ok result is readable");
    assert_eq!(values.len(), t.elem_count(), "{t:?}");
    let c = t.contiguous().expect("contiguous copy of an Ok result");
    assert!(c.is_contiguous());
    assert_eq!(c.dims(), t.dims());
    values
}

/// `r`, with the errors a GPU reports at the next sync point (bad ids of index ops) taken
/// as the op's own: the CPU returns them from the op.
fn settled(r: Result<Tensor>) -> Result<Tensor> {
    let t = r?;
    t.device().synchronize()?;
    Ok(t)
}

/// Asserts that `r` succeeded exactly when `expected` is `Some(shape)`, with that shape.
fn expect(what: &str, r: Result<Tensor>, expected: Option<Vec<usize>>) -> Option<Tensor> {
    match (settled(r), expected) {
        (Ok(t), Some(shape)) => {
            assert_eq!(t.dims(), &shape[..], "{what}: wrong result shape");
            check(&t);
            Some(t)
        }
        (Err(e), None) => {
            assert!(!e.to_string().is_empty());
            None
        }
        (Ok(t), None) => panic!("{what}: expected an error, got {t:?}"),
        (Err(e), Some(shape)) => panic!("{what}: expected a result of shape {shape:?}, got error `{e}`"),
    }
}

/// Only asserts that an `Ok` result is well formed (for calls whose success is not predicted).
fn no_panic(r: Result<Tensor>) -> Option<Tensor> {
    match settled(r) {
        Ok(t) => {
            check(&t);
            Some(t)
        }
        Err(e) => {
            assert!(!e.to_string().is_empty());
            None
        }
    }
}

/// Success is not predicted, but a result must have `shape`.
fn expect_shape(what: &str, r: Result<Tensor>, shape: &[usize]) {
    if let Some(t) = no_panic(r) {
        assert_eq!(t.dims(), shape, "{what}: wrong result shape");
    }
}

fn sum_f64(t: &Tensor) -> f64 {
    check(t).iter().sum()
}

// ---- elementwise ----

fn unary_ops(device: Device) -> Result<()> {
    run(
        device,
        2048,
        (spec(device), 0..UnaryOp::ALL.len(), -3.0f64..3.0, -3.0f64..3.0, dtype(device)),
        |(s, op, lo, hi, to)| {
            let x = build(&s);
            let float = s.dtype.is_float();
            let op = UnaryOp::ALL[op];
            let y = expect(op.name(), x.unary(op), float.then(|| s.shape.clone()));
            if let Some(y) = y {
                assert_eq!(y.dtype(), s.dtype);
            }
            expect("clamp", x.clamp(lo, hi), (lo <= hi).then(|| s.shape.clone()));
            expect("to_dtype", x.to_dtype(to), Some(s.shape.clone()));
            for bop in BinaryOp::ALL {
                // An integer scalar divisor 0 is an error for `//` and `%` (a fractional one
                // makes an integer tensor f32).
                let by_zero = matches!(bop, BinaryOp::FloorDivide | BinaryOp::Remainder)
                    && !float
                    && lo == 0.0
                    && x.elem_count() > 0;
                let scalar = match bop {
                    BinaryOp::Add => x.add_scalar(lo),
                    BinaryOp::Sub => x.sub_scalar(lo),
                    BinaryOp::Mul => x.mul_scalar(lo),
                    BinaryOp::Div => x.div_scalar(lo),
                    BinaryOp::Pow => x.pow_scalar(lo),
                    BinaryOp::Maximum => x.maximum_scalar(lo),
                    BinaryOp::Minimum => x.minimum_scalar(lo),
                    BinaryOp::FloorDivide => x.floor_divide_scalar(lo),
                    BinaryOp::Remainder => x.remainder_scalar(lo),
                };
                expect(bop.name(), scalar, (!by_zero).then(|| s.shape.clone()));
            }
            expect("eq_scalar", x.eq_scalar(lo), Some(s.shape.clone()));
            expect("masked_fill", x.masked_fill(&x.gt_scalar(0.0).unwrap(), hi), Some(s.shape.clone()));
        },
    )
}
test_device!(unary_ops_test, unary_ops);

fn binary_and_cmp_ops(device: Device) -> Result<()> {
    run(device, 2048, (spec(device), spec(device), 0u8..3, any::<bool>()), |(sa, sb, mode, same_dtype)| {
        let mut sb = sb;
        sb.shape = related(&sa.shape, &sb.shape, mode);
        if same_dtype {
            sb.dtype = sa.dtype;
        }
        let (a, b) = (build(&sa), build(&sb));
        let (a_before, b_before) = (check(&a), check(&b));
        let out = broadcast(&sa.shape, &sb.shape).filter(|_| sa.dtype == sb.dtype);
        // An integer `//` or `%` by a 0 that reaches the output is an error (ZeroDivisionError
        // in PyTorch); broadcasting repeats every element of b in a non-empty output.
        let nonempty = out.as_ref().is_some_and(|o| o.iter().product::<usize>() > 0);
        let int_by_zero = sa.dtype.is_int() && nonempty && b_before.contains(&0.0);
        for &op in BinaryOp::ALL {
            let divides = matches!(op, BinaryOp::FloorDivide | BinaryOp::Remainder);
            let out = out.clone().filter(|_| !(divides && int_by_zero));
            if let Some(y) = expect(op.name(), a.binary(&b, op), out) {
                // Integers divide as f32 (PyTorch's true division).
                let int_div = op == BinaryOp::Div && sa.dtype.is_int();
                assert_eq!(y.dtype(), if int_div { DType::F32 } else { sa.dtype });
            }
        }
        for &op in CmpOp::ALL {
            if let Some(y) = expect(op.name(), a.cmp(&b, op), out.clone()) {
                assert_eq!(y.dtype(), DType::U8);
            }
        }
        // Nothing above changed the inputs, whether it failed or not.
        assert_eq!((check(&a), check(&b)), (a_before, b_before.clone()));
        // assign: a whole contiguous destination of b's shape and dtype takes b's values;
        // a failed assign leaves the destination as it was.
        let dst = build(&sa);
        let dst_before = check(&dst);
        match dst.assign(&b) {
            Ok(()) => {
                assert!(sa.shape == sb.shape && sa.dtype == sb.dtype);
                assert_eq!(check(&dst), b_before);
            }
            Err(_) => assert_eq!(check(&dst), dst_before),
        }
    })
}
test_device!(binary_and_cmp_ops_test, binary_and_cmp_ops);

fn where_cond(device: Device) -> Result<()> {
    run(
        device,
        2048,
        (spec(device), spec(device), spec(device), (0u8..3, 0u8..3), any::<bool>()),
        |(sc, st, sf, modes, same_dtype)| {
            let (mut st, mut sf) = (st, sf);
            st.shape = related(&sc.shape, &st.shape, modes.0);
            sf.shape = related(&st.shape, &sf.shape, modes.1);
            if same_dtype {
                sf.dtype = st.dtype;
            }
            let (c, t, f) = (build(&sc), build(&st), build(&sf));
            let shape = broadcast(&st.shape, &sf.shape).and_then(|s| broadcast(&sc.shape, &s));
            let ok = sc.dtype.is_int() && st.dtype == sf.dtype;
            expect("where_cond", c.where_cond(&t, &f), shape.filter(|_| ok));
        },
    )
}
test_device!(where_cond_test, where_cond);

// ---- reductions ----

/// Op `op` (sum, max, min, argmax, argmin, mean, var) over `dims`.
fn reduce_by<D: Dims>(x: &Tensor, op: usize, dims: D, keepdim: bool) -> Result<Tensor> {
    match (op, keepdim) {
        (0, false) => x.sum(dims),
        (0, true) => x.sum_keepdim(dims),
        (1, false) => x.max(dims),
        (1, true) => x.max_keepdim(dims),
        (2, false) => x.min(dims),
        (2, true) => x.min_keepdim(dims),
        (3, false) => x.argmax(dims),
        (3, true) => x.argmax_keepdim(dims),
        (4, false) => x.argmin(dims),
        (4, true) => x.argmin_keepdim(dims),
        (5, false) => x.mean(dims),
        (5, true) => x.mean_keepdim(dims),
        (_, false) => x.var(dims),
        (_, true) => x.var_keepdim(dims),
    }
}

fn reductions(device: Device) -> Result<()> {
    run(
        device,
        2048,
        (spec(device), prop::collection::vec(dim(), 0..4), any::<bool>(), any::<bool>(), 0usize..7),
        |(s, dims, keepdim, single, op)| {
            let x = build(&s);
            let dims = if single && !dims.is_empty() { vec![dims[0]] } else { dims };
            let picked = resolve_all(&dims, s.shape.len());
            let empty = picked.as_ref().is_some_and(|p| p.iter().any(|&d| s.shape[d] == 0));
            // mean and var need floats, as in PyTorch.
            let ok = picked.is_some() && !((1..=4).contains(&op) && empty) && (op < 5 || s.dtype.is_float());
            let expected = picked.filter(|_| ok).map(|p| reduced_shape(&s.shape, &p, keepdim));
            let r = if single && dims.len() == 1 {
                reduce_by(&x, op, dims[0], keepdim)
            } else {
                reduce_by(&x, op, dims.clone(), keepdim)
            };
            if let Some(y) = expect("reduction", r, expected) {
                // Positions and integer sums are i64, as in PyTorch.
                let i64_out = op == 3 || op == 4 || (op == 0 && s.dtype.is_int());
                assert_eq!(y.dtype(), if i64_out { DType::I64 } else { s.dtype });
                if op == 0 && (s.dtype == DType::F64 || s.dtype == DType::I64) && dims.is_empty() {
                    assert_eq!(sum_f64(&y), sum_f64(&x)); // reducing nothing is the identity
                }
            }
            let n = x.elem_count();
            expect("sum_all", x.sum_all(), Some(vec![]));
            expect("mean_all", x.mean_all(), s.dtype.is_float().then(Vec::new));
            expect("max_all", x.max_all(), (n > 0).then(Vec::new));
            expect("min_all", x.min_all(), (n > 0).then(Vec::new));
            let d = dims.first().copied().unwrap_or(-1);
            for (what, r) in [("softmax", x.softmax(d)), ("log_softmax", x.log_softmax(d))] {
                match resolve(d, s.shape.len()) {
                    // Rank 0 (one element) and an empty dim (nothing to normalize) may go either way.
                    Some(i) if s.shape[i] == 0 => expect_shape(what, r, &s.shape),
                    None if s.shape.is_empty() => expect_shape(what, r, &s.shape),
                    i => drop(expect(what, r, i.filter(|_| s.dtype.is_float()).map(|_| s.shape.clone()))),
                }
            }
        },
    )
}
test_device!(reductions_test, reductions);

fn matmul(device: Device) -> Result<()> {
    run(
        device,
        2048,
        (spec_of(device, prop_oneof![float_dtype(device), dtype(device)]), spec(device), 0u8..3, any::<bool>()),
        |(sa, sb, align, same_dtype)| {
            let mut sb = sb;
            if same_dtype {
                sb.dtype = sa.dtype;
            }
            // Make the inner (and with align 2 the batch) dims agree, so that most calls are valid.
            if align > 0 && !sa.shape.is_empty() && !sb.shape.is_empty() {
                let (ra, rb) = (sa.shape.len(), sb.shape.len());
                let k = sa.shape[ra - 1];
                let at = if rb == 1 { 0 } else { rb - 2 };
                sb.shape[at] = k;
                if align == 2 && ra > 2 && rb > 2 {
                    for i in 0..(ra - 2).min(rb - 2) {
                        sb.shape[rb - 3 - i] = sa.shape[ra - 3 - i];
                    }
                }
            }
            let (a, b) = (build(&sa), build(&sb));
            let ok = sa.dtype == sb.dtype && sa.dtype.is_float();
            let y = expect("matmul", a.matmul(&b), matmul_shape(&sa.shape, &sb.shape).filter(|_| ok));
            // Check the values against a broadcast multiply and sum, for 2-D f64 operands.
            if let Some(y) = y.filter(|_| sa.dtype == DType::F64 && sa.shape.len() == 2 && sb.shape.len() == 2) {
                let reference = a.unsqueeze(2).unwrap().mul(&b.unsqueeze(0).unwrap()).unwrap().sum(1).unwrap();
                assert_eq!(check(&y), check(&reference));
            }
        },
    )
}
test_device!(matmul_test, matmul);

// ---- movement ----

#[derive(Clone, Debug)]
struct ViewArgs {
    d0: i64,
    d1: i64,
    start: usize,
    len: usize,
    shape: Vec<usize>,
    keys: Vec<u8>,
    perm_mode: u8,
    bcast_mode: bool,
    to: DType,
}

fn view_args(device: Device) -> impl Strategy<Value = ViewArgs> {
    (
        dim(),
        dim(),
        0usize..6,
        0usize..6,
        shape(),
        prop::collection::vec(any::<u8>(), 8),
        0u8..4,
        any::<bool>(),
        dtype(device),
    )
        .prop_map(|(d0, d1, start, len, shape, keys, perm_mode, bcast_mode, to)| ViewArgs {
            d0,
            d1,
            start,
            len,
            shape,
            keys,
            perm_mode,
            bcast_mode,
            to,
        })
}

/// Applies movement op `op` to `x`; returns the result and the shape it must have when valid.
fn movement(x: &Tensor, op: usize, a: &ViewArgs) -> (Result<Tensor>, Option<Vec<usize>>) {
    let dims = x.dims().to_vec();
    let r = dims.len();
    let (i0, i1) = (resolve(a.d0, r), resolve(a.d1, r));
    match op {
        0 => {
            (x.reshape(a.shape.clone()), (a.shape.iter().product::<usize>() == x.elem_count()).then(|| a.shape.clone()))
        }
        1 => {
            let mut reversed = dims.clone();
            reversed.reverse();
            (x.reshape(reversed.clone()), Some(reversed))
        }
        2 => {
            let swapped = i1.and_then(|q| edited(&dims, i0, |s, p| s.swap(p, q)));
            (x.transpose(a.d0, a.d1), swapped)
        }
        3 => {
            let mut perm: Vec<usize> = (0..r).collect();
            perm.sort_by_key(|&i| a.keys[i]);
            match a.perm_mode {
                2 => perm.push(r),
                3 if r > 0 => perm[0] = perm[r - 1],
                _ => {}
            }
            let shape = is_perm(&perm, r).then(|| perm.iter().map(|&p| dims[p]).collect());
            (x.permute(&perm), shape)
        }
        4 => {
            let shape = edited(&dims, i0.filter(|&i| a.start + a.len <= dims[i]), |s, i| s[i] = a.len);
            (x.narrow(a.d0, a.start, a.len), shape)
        }
        5 => {
            let shape = edited(&dims, i0.filter(|&i| dims[i] == 1), |s, i| {
                s.remove(i);
            });
            (x.squeeze(a.d0), shape)
        }
        6 => {
            let shape = edited(&dims, resolve(a.d0, r + 1), |s, i| s.insert(i, 1));
            (x.unsqueeze(a.d0), shape)
        }
        7 => {
            // A random target, or one made from x by stretching its 1s and adding leading dims.
            let target: Vec<usize> = if a.bcast_mode {
                let extra = a.shape.iter().take(2).copied();
                extra
                    .chain(dims.iter().zip(a.shape.iter().cycle()).map(|(&d, &n)| if d == 1 { n } else { d }))
                    .collect()
            } else {
                a.shape.clone()
            };
            let ok = stretches(&dims, &target);
            (x.broadcast_as(target.clone()), ok.then_some(target))
        }
        8 => {
            let shape = if r == 0 {
                Some(vec![1])
            } else {
                i0.zip(i1).filter(|(p, q)| p <= q).map(|(p, q)| {
                    let mut s = dims[..p].to_vec();
                    s.push(dims[p..=q].iter().product());
                    s.extend_from_slice(&dims[q + 1..]);
                    s
                })
            };
            (x.flatten(a.d0, a.d1), shape)
        }
        9 => (x.flatten_all(), Some(vec![x.elem_count()])),
        10 => {
            let shape = (r >= 2).then(|| {
                let mut s = dims.clone();
                s.swap(r - 2, r - 1);
                s
            });
            (x.t(), shape)
        }
        11 => (x.contiguous(), Some(dims)),
        _ => (x.to_dtype(a.to), Some(dims)),
    }
}

fn movement_ops(device: Device) -> Result<()> {
    run(
        device,
        2048,
        (spec(device), 0usize..13, view_args(device), 0usize..13, view_args(device)),
        |(s, op, args, then, args2)| {
            let x = build(&s);
            let (r, shape) = movement(&x, op, &args);
            if let Some(y) = expect("movement", r, shape) {
                // Ops that only rearrange the elements keep their sum (small integers: exact).
                if [0, 1, 2, 3, 8, 9, 10, 11].contains(&op) {
                    assert_eq!(sum_f64(&y), sum_f64(&x), "op {op} changed the elements");
                }
                // A second op on the (possibly strided) result, and a reduction to read it.
                let (r2, shape2) = movement(&y, then, &args2);
                if let Some(z) = expect("second movement", r2, shape2) {
                    expect("sum_all", z.sum_all(), Some(vec![]));
                    no_panic(z.add(&z));
                }
            }
        },
    )
}
test_device!(movement_ops_test, movement_ops);

fn cat_and_stack(device: Device) -> Result<()> {
    run(
        device,
        2048,
        (
            shape(),
            prop::collection::vec((0usize..5, 0usize..6, prop::option::weighted(0.2, dtype(device))), 0..4),
            dtype(device),
            dim(),
            prop::collection::vec(0u8..4, 4),
        ),
        |(base, parts, dt, d, views)| {
            let specs: Vec<Spec> = parts
                .iter()
                .enumerate()
                .map(|(i, &(alt, which, other))| {
                    let mut shape = base.clone();
                    if which < shape.len() {
                        shape[which] = alt;
                    }
                    Spec { device, shape, dtype: other.unwrap_or(dt), view: views[i], seed: i }
                })
                .collect();
            let ts: Vec<Tensor> = specs.iter().map(build).collect();
            let same_dtype = specs.windows(2).all(|w| w[0].dtype == w[1].dtype);
            let cat_shape = specs.first().and_then(|first| {
                let i = resolve(d, first.shape.len())?;
                let fits = |s: &Spec| {
                    s.shape.len() == first.shape.len()
                        && (0..s.shape.len()).all(|k| k == i || s.shape[k] == first.shape[k])
                };
                specs.iter().all(fits).then(|| {
                    let mut out = first.shape.clone();
                    out[i] = specs.iter().map(|s| s.shape[i]).sum();
                    out
                })
            });
            expect("cat", Tensor::cat(&ts, d), cat_shape.filter(|_| same_dtype));
            let stack_shape = specs.first().and_then(|first| {
                let i = resolve(d, first.shape.len() + 1)?;
                specs.iter().all(|s| s.shape == first.shape).then(|| {
                    let mut out = first.shape.clone();
                    out.insert(i, specs.len());
                    out
                })
            });
            expect("stack", Tensor::stack(&ts, d), stack_shape.filter(|_| same_dtype));
        },
    )
}
test_device!(cat_and_stack_test, cat_and_stack);

// ---- indexing ----

fn index_ops(device: Device) -> Result<()> {
    run(
        device,
        2048,
        (
            spec(device),
            prop::collection::vec(-2i64..7, 0..6),
            prop::sample::select(vec![DType::U8, DType::U32, DType::I64, DType::F32]),
            dim(),
            0usize..4,
            prop::option::weighted(0.2, shape()),
            prop::option::weighted(0.2, dtype(device)),
            (0usize..6, dtype(device)),
        ),
        |(s, vals, ids_dtype, d, m, odd_shape, src_dtype, classes_to)| {
            let x = build(&s);
            let r = s.shape.len();
            let i = resolve(d, r);
            let int_ids = ids_dtype.is_int();

            let ids = ids_tensor(&vals, &[vals.len()], ids_dtype, device);
            let shape =
                edited(&s.shape, i.filter(|&i| int_ids && all_in_range(&vals, ids_dtype, s.shape[i])), |t, i| {
                    t[i] = vals.len()
                });
            expect("index_select", x.index_select(&ids, d), shape);
            let ids2 = ids_tensor(&vals, &[1, vals.len()], ids_dtype, device);
            expect("index_select 2-D ids", x.index_select(&ids2, d), None);

            // gather / scatter_add: ids shaped like x except at dim (or a random shape).
            let ids_shape =
                odd_shape.or_else(|| edited(&s.shape, i, |t, i| t[i] = m)).unwrap_or_else(|| s.shape.clone());
            let g = ids_tensor(&vals, &ids_shape, ids_dtype, device);
            let n: usize = ids_shape.iter().product();
            let fits = i.filter(|&i| {
                ids_shape.len() == r
                    && (0..r).all(|k| k == i || ids_shape[k] == s.shape[k])
                    && int_ids
                    && all_in_range(&cycled(&vals, n), ids_dtype, s.shape[i])
            });
            expect("gather", x.gather(&g, d), fits.map(|_| ids_shape.clone()));
            let src_spec =
                Spec { device, shape: ids_shape.clone(), dtype: src_dtype.unwrap_or(s.dtype), view: s.view, seed: 3 };
            let src = build(&src_spec);
            let ok = fits.is_some() && src_spec.dtype == s.dtype;
            let y = expect("scatter_add", x.scatter_add(&g, &src, d), ok.then(|| s.shape.clone()));
            if let Some(y) = y.filter(|_| s.dtype == DType::F64) {
                // Everything in src lands somewhere: the total grows by src's total.
                assert_eq!(sum_f64(&y), sum_f64(&x) + sum_f64(&src));
            }

            // one_hot: x's shape filled with vals as class ids.
            let (classes, to) = classes_to;
            let c = ids_tensor(&vals, &s.shape, ids_dtype, device);
            let ok = int_ids && all_in_range(&cycled(&vals, c.elem_count()), ids_dtype, classes);
            let mut hot_shape = s.shape.clone();
            hot_shape.push(classes);
            if let Some(h) = expect("one_hot", c.one_hot(classes, to), ok.then_some(hot_shape)) {
                assert_eq!(h.dtype(), to);
                if classes > 0 {
                    let rows = check(&h.sum(-1).unwrap());
                    assert!(rows.iter().all(|&v| v == 1.0), "one_hot rows must each hold one 1: {rows:?}");
                }
            }
        },
    )
}
test_device!(index_ops_test, index_ops);

/// Tensors above the parallel threshold (2^15 elements): the chunked, parallel and
/// strided-from-an-offset paths of the kernels, which small shapes never reach.
fn large_tensors(device: Device) -> Result<()> {
    run(device, 64, (0usize..5, dtype(device), 0u8..4, dim(), any::<bool>()), |(which, dt, view, d, keepdim)| {
        let shape = [vec![70_000], vec![2, 40_000], vec![40_000, 3], vec![300, 200], vec![3, 2, 12_000]][which].clone();
        let s = Spec { device, shape: shape.clone(), dtype: dt, view, seed: 5 };
        let x = build(&s);
        let r = shape.len();
        let i = resolve(d, r);
        let float = dt.is_float();
        expect("exp", x.exp(), float.then(|| shape.clone()));
        let reduced = |keep: bool| i.map(|i| reduced_shape(&shape, &[i], keep));
        // Integer sums are i64: back to x's dtype for the add.
        let add_sum = x.sum_keepdim(d).and_then(|m| x.add(&m.to_dtype(dt)?));
        expect("add broadcast", add_sum, i.map(|_| shape.clone()));
        expect("ge", x.ge(&x.contiguous().unwrap()), Some(shape.clone()));
        expect("sum", reduce_by(&x, 0, d, keepdim), reduced(keepdim));
        expect("max", reduce_by(&x, 1, d, keepdim), reduced(keepdim));
        expect("argmin", reduce_by(&x, 4, d, keepdim), reduced(keepdim));
        if dt == DType::F64 || dt == DType::I64 {
            let total = check(&x.sum_all().unwrap())[0];
            assert_eq!(total, sum_f64(&x));
        }
        expect("softmax", x.softmax(d), i.filter(|_| float).map(|_| shape.clone()));
        let swapped = edited(&shape, i, |t, i| t.swap(i, r - 1));
        let t = expect("transpose", x.transpose(d, -1).and_then(|t| t.contiguous()), swapped);
        if let Some(t) = t {
            assert_eq!(sum_f64(&t), sum_f64(&x));
        }
        expect("cat", Tensor::cat(&[x.clone(), x.clone()], d), edited(&shape, i, |t, i| t[i] *= 2));
        let picked = edited(&shape, i, |t, i| t[i] = 2);
        let last = i.map_or(0, |i| shape[i] as i64 - 1);
        expect("index_select", x.index_select(&Tensor::from_slice(&[last, 0], 2, device).unwrap(), d), picked);
        expect("to_dtype", x.to_dtype(DType::F32), Some(shape.clone()));
    })
}
test_device!(large_tensors_test, large_tensors);

// ---- sliding windows ----

/// The unfolded shape `[N, C, kh * kw, Ho * Wo]` of `shape` under `(kernel, stride,
/// padding, dilation)`, or `None` when the arguments are invalid.
fn unfold_shape(shape: &[usize], (k, s, p, d): ([usize; 2], [usize; 2], [usize; 2], [usize; 2])) -> Option<Vec<usize>> {
    let &[n, c, h, w] = shape else { return None };
    let along = |i: usize, size: usize| {
        let (span, padded) = (d[i] * (k[i].checked_sub(1)?) + 1, size + 2 * p[i]);
        (k[i] > 0 && s[i] > 0 && d[i] > 0 && span <= padded).then(|| (padded - span) / s[i] + 1)
    };
    Some(vec![n, c, k[0] * k[1], along(0, h)? * along(1, w)?])
}

/// unfold2d on any tensor and window; fold2d of its result, and of a random tensor.
fn window_ops(device: Device) -> Result<()> {
    run(
        device,
        1024,
        (
            spec(device),
            [0usize..4, 0usize..4],
            [0usize..4, 0usize..4],
            [0usize..3, 0usize..3],
            [0usize..3, 0usize..3],
            (0usize..5, 0usize..5),
            -2.0f64..2.0,
        ),
        |(s, k, st, p, d, hw, pad)| {
            let x = build(&s);
            let args = (k, st, p, d);
            let (kt, stt, pt, dt) = ((k[0], k[1]), (st[0], st[1]), (p[0], p[1]), (d[0], d[1]));
            let expected = unfold_shape(&s.shape, args);
            if let Some(cols) = expect("unfold2d", x.unfold2d(kt, stt, pt, dt, pad), expected) {
                let hw_in = (s.shape[2], s.shape[3]);
                let folded = expect("fold2d", cols.fold2d(hw_in, kt, stt, pt, dt), Some(s.shape.clone()));
                if let (Some(y), DType::F64) = (folded, s.dtype) {
                    // Summed back with a zero pad, each input element counts once per window holding it.
                    let ones = Tensor::ones(s.shape.clone(), DType::F64, device).unwrap();
                    let per_element =
                        ones.unfold2d(kt, stt, pt, dt, 0.0).unwrap().fold2d(hw_in, kt, stt, pt, dt).unwrap();
                    assert_eq!(check(&y), check(&x.mul(&per_element).unwrap()));
                }
            }
            // fold2d succeeds when x has exactly the windows of an [N, C, hw] input.
            let out = s.shape.get(..2).map(|nc| vec![nc[0], nc[1], hw.0, hw.1]);
            let ok =
                out.clone().filter(|o| s.shape.len() == 4 && unfold_shape(o, args).as_deref() == Some(&s.shape[..]));
            expect("fold2d of any tensor", x.fold2d(hw, kt, stt, pt, dt), ok);
        },
    )
}
test_device!(window_ops_test, window_ops);

// ---- autograd ----

/// One random step of a graph: applies op `op` to `cur` (and sometimes the other variable).
fn graph_step(cur: &Tensor, other: &Tensor, op: usize, d: i64) -> Result<Tensor> {
    let k = d.unsigned_abs() as usize;
    let zeros_ids = || Tensor::zeros(cur.shape(), DType::I64, cur.device());
    match op {
        0 => cur.unary(UnaryOp::ALL[k % UnaryOp::ALL.len()]),
        1 => cur.binary(other, BinaryOp::ALL[k % BinaryOp::ALL.len()]),
        2 => cur.sum_keepdim(d),
        3 => cur.max(d),
        4 => cur.mean(vec![d, d + 1]),
        5 => cur.softmax(d),
        6 => cur.log_softmax(d),
        7 => cur.matmul(other),
        8 => cur.matmul(&cur.t()?),
        9 => cur.transpose(d, -1),
        10 => cur.narrow(d, 1, 1),
        11 => cur.unsqueeze(d),
        12 => cur.flatten_all(),
        13 => Tensor::cat(&[cur.clone(), other.clone()], d),
        14 => cur.index_select(&Tensor::from_slice(&[0u32, 0], 2, cur.device())?, d),
        15 => cur.gather(&zeros_ids()?, d),
        16 => cur.gt_scalar(0.0)?.where_cond(cur, other),
        17 => {
            // A round trip through another float dtype of the device (f32 <-> f64 on the CPU).
            let floats = floats(cur.device());
            let other =
                if cur.dtype() == DType::F32 { floats.get(1).copied().unwrap_or(DType::F32) } else { DType::F32 };
            cur.to_dtype(other)?.to_dtype(cur.dtype())
        }
        18 => cur.broadcast_as(other.shape()),
        19 => cur.zeros_like()?.scatter_add(&zeros_ids()?, cur, d),
        20 => cur.clamp(-1.0, 1.0),
        21 => cur.var_keepdim(d),
        22 => cur.squeeze(d),
        23 => cur.permute(&(0..cur.rank()).rev().collect::<Vec<_>>()),
        24 => cur.min_keepdim(vec![d, -1]),
        25 => cur.argmax(d),
        26 => Tensor::stack(&[cur.clone(), cur.clone()], d),
        27 => cur.t()?.contiguous(),
        _ => cur.pow_scalar(2.0),
    }
}

fn backward_on_random_graphs(device: Device) -> Result<()> {
    run(
        device,
        1024,
        (spec_of(device, float_dtype(device)), spec(device), 0u8..3, prop::collection::vec((0usize..29, dim()), 1..7)),
        |(sa, sb, mode, ops)| {
            let mut sb = sb;
            sb.shape = related(&sa.shape, &sb.shape, mode);
            sb.dtype = sa.dtype;
            let (a, b) = (build(&sa).requires_grad(), build(&sb).requires_grad());
            let mut cur = a.clone();
            for &(op, d) in &ops {
                if let Some(next) = no_panic(graph_step(&cur, &b, op, d)) {
                    cur = next;
                }
            }
            for root in [Some(cur.clone()), cur.sum_all().ok()].into_iter().flatten() {
                let r = root.backward();
                if root.tracks_grad() && root.dtype().is_float() {
                    let grads = r.unwrap_or_else(|e| panic!("backward of a float graph failed: {e}"));
                    for v in [&a, &b] {
                        if let Some(g) = grads.get(v) {
                            assert_eq!(g.dims(), v.dims(), "gradient shape");
                            assert_eq!(g.dtype(), v.dtype(), "gradient dtype");
                            check(g);
                        }
                    }
                } else {
                    assert!(r.is_err(), "backward without variables or of an int tensor must fail");
                }
            }
        },
    )
}
test_device!(backward_on_random_graphs_test, backward_on_random_graphs);

// ---- creation and reading back ----

fn creation(device: Device) -> Result<()> {
    run(
        device,
        2048,
        (
            0usize..30,
            shape(),
            dtype(device),
            (-5.0f64..5.0, -5.0f64..5.0, -3i64..4),
            (-3.0f64..3.0, -3.0f64..3.0),
            "\\PC{0,12}",
            "(cpu|cuda|wgpu|gpu|tpu)(:[0-9a-z-]{0,22})?",
        ),
        |(len, shape, dt, range, rand_args, name, device_name)| {
            let r = Tensor::from_vec(vec![1.5f32; len], shape.clone(), device);
            expect("from_vec", r, (len == shape.iter().product::<usize>()).then(|| shape.clone()));
            expect("full", Tensor::full(2.0, shape.clone(), dt, device), Some(shape.clone()));
            let (start, end, step) = range;
            if supports(device, DType::F64) {
                let n = ((end - start) / step as f64).ceil().max(0.0) as usize;
                expect(
                    "arange f64",
                    Tensor::arange_step(start, end, step as f64, device),
                    (step != 0).then(|| vec![n]),
                );
            }
            let (s, e, st) = (start as f32, end as f32, step as f32);
            let n = ((e as f64 - s as f64) / st as f64).ceil().max(0.0) as usize;
            expect("arange f32", Tensor::arange_step(s, e, st, device), (step != 0).then(|| vec![n]));
            let (s, e) = (start as i64, end as i64);
            let n = if step == 0 { 0 } else { ((e - s) as f64 / step as f64).ceil().max(0.0) as usize };
            expect("arange i64", Tensor::arange_step(s, e, step, device), (step != 0).then(|| vec![n]));
            let (lo, hi) = rand_args;
            let ok = dt.is_float();
            expect("rand", Tensor::rand(lo, hi, shape.clone(), dt, device), (ok && lo < hi).then(|| shape.clone()));
            expect("randn", Tensor::randn(lo, hi, shape.clone(), dt, device), (ok && hi >= 0.0).then(|| shape.clone()));
            let _ = Device::parse(&name);
            let _ = Device::parse(&device_name);
            let _ = name.parse::<DType>();
        },
    )
}
test_device!(creation_test, creation);

fn reading_back(device: Device) -> Result<()> {
    run(device, 2048, spec(device), |s| {
        let x = build(&s).to_dtype(DType::F32).unwrap();
        let d = &s.shape;
        match x.to_vec1::<f32>() {
            Ok(v) => assert_eq!(v.len(), d[0]),
            Err(_) => assert_ne!(d.len(), 1),
        }
        match x.to_vec2::<f32>() {
            Ok(v) => {
                assert_eq!(v.len(), d[0]);
                assert!(v.iter().all(|row| row.len() == d[1]));
            }
            Err(_) => assert_ne!(d.len(), 2),
        }
        match x.to_vec3::<f32>() {
            Ok(v) => {
                assert_eq!(v.len(), d[0]);
                assert!(v.iter().all(|m| m.len() == d[1] && m.iter().all(|row| row.len() == d[2])));
            }
            Err(_) => assert_ne!(d.len(), 3),
        }
        assert_eq!(x.to_scalar::<f32>().is_ok(), x.elem_count() == 1);
        assert!(x.to_vec::<u8>().is_err());
        let back = x.to_ndarray::<f32>().unwrap();
        assert_eq!(back.shape(), &d[..]);
    })
}
test_device!(reading_back_test, reading_back);
