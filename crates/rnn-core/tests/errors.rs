//! One test per error class: bad input gives the exact `Error` variant, its message names
//! the op and the shapes (or dtypes / devices), and the inputs are left as they were. The
//! checks run on every device (in the dtypes it supports), except those about the host
//! itself: builds without a backend, and host memory.

use rnn_core::{DType, Device, Error, Layout, Result, Tensor};
use rnn_testutil::{floats, other_dtype, test_device};

const CPU: Device = Device::Cpu;

/// A tensor of `dtype` on `device` holding `0, 1, 2, ..` in `shape`.
fn iota(device: Device, shape: &[usize], dtype: DType) -> Tensor {
    let n: usize = shape.iter().product();
    let data: Vec<f64> = (0..n).map(|i| i as f64).collect();
    rnn_testutil::tensor(&data, shape, dtype, device)
}

fn f32s(device: Device, shape: &[usize]) -> Tensor {
    iota(device, shape, DType::F32)
}

fn ids(device: Device, values: &[i64]) -> Tensor {
    Tensor::from_slice(values, values.len(), device).expect("build ids")
}

/// Shape, dtype, device and elements (as f64, read on the host) of a tensor: what must
/// survive a failed call.
fn snapshot(t: &Tensor) -> (Vec<usize>, DType, Device, Vec<f64>) {
    (t.dims().to_vec(), t.dtype(), t.device(), rnn_testutil::values(t))
}

/// Runs `f`, which must fail, and checks that `inputs` are unchanged afterwards.
fn fails<R: std::fmt::Debug>(inputs: &[&Tensor], f: impl FnOnce() -> Result<R>) -> Error {
    let before: Vec<_> = inputs.iter().map(|t| snapshot(t)).collect();
    let err = match f() {
        Ok(r) => panic!("expected an error, got Ok({r:?})"),
        Err(e) => e,
    };
    for (t, b) in inputs.iter().zip(before) {
        assert_eq!(snapshot(t), b, "an input changed after the error `{err}`");
    }
    err
}

/// The error's message contains every one of `parts`.
fn says(err: &Error, parts: &[&str]) {
    let msg = err.to_string();
    for p in parts {
        assert!(msg.contains(p), "message `{msg}` does not mention `{p}`");
    }
}

/// Asserts `$err` matches `$pat` (with an optional guard) and mentions `$parts`.
macro_rules! check {
    ($err:expr, $pat:pat $(if $guard:expr)?, [$($part:expr),* $(,)?]) => {{
        let e = $err;
        assert!(matches!(&e, $pat $(if $guard)?), "unexpected error variant: {e:?}");
        says(&e, &[$($part),*]);
    }};
}

fn shape_mismatch(device: Device) -> Result<()> {
    let (a, b) = (f32s(device, &[2, 3]), f32s(device, &[4, 5]));
    let e = fails(&[&a, &b], || a.matmul(&b));
    check!(e, Error::ShapeMismatch { op: "matmul", lhs, rhs } if lhs.dims() == [2, 3] && rhs.dims() == [4, 5],
        ["matmul", "[2, 3]", "[4, 5]"]);
    // Batched: the inner dims agree, but [1, 3] x [2, 2] is still k=3 vs k=2.
    let (a, b) = (f32s(device, &[5, 1, 3]), f32s(device, &[5, 2, 2]));
    check!(
        fails(&[&a, &b], || a.matmul(&b)),
        Error::ShapeMismatch { op: "matmul", .. },
        ["matmul", "[5, 1, 3]", "[5, 2, 2]"]
    );

    let (a, b) = (f32s(device, &[2, 3]), f32s(device, &[2, 4]));
    check!(fails(&[&a, &b], || Tensor::cat(&[a.clone(), b.clone()], 0)),
        Error::ShapeMismatch { op: "cat", lhs, rhs } if lhs.dims() == [2, 3] && rhs.dims() == [2, 4],
        ["cat", "[2, 3]", "[2, 4]"]);
    let c = f32s(device, &[3]);
    check!(
        fails(&[&a, &c], || Tensor::cat(&[a.clone(), c.clone()], 0)),
        Error::ShapeMismatch { op: "cat", .. },
        ["cat", "[2, 3]", "[3]"]
    );

    let b = f32s(device, &[3, 2]);
    check!(fails(&[&a, &b], || Tensor::stack(&[a.clone(), b.clone()], 0)),
        Error::ShapeMismatch { op: "stack", lhs, rhs } if lhs.dims() == [2, 3] && rhs.dims() == [3, 2],
        ["stack", "[2, 3]", "[3, 2]"]);

    // scatter_add: ids and src must have one shape; ids must match self except at dim.
    let x = f32s(device, &[3, 2]);
    let (i, src) = (Tensor::zeros((2, 2), DType::I64, device).unwrap(), f32s(device, &[2, 1]));
    check!(fails(&[&x, &i, &src], || x.scatter_add(&i, &src, 0)),
        Error::ShapeMismatch { op: "scatter_add", lhs, rhs } if lhs.dims() == [2, 2] && rhs.dims() == [2, 1],
        ["scatter_add", "[2, 2]", "[2, 1]"]);
    let (i, src) = (Tensor::zeros((2, 3), DType::I64, device).unwrap(), f32s(device, &[2, 3]));
    check!(
        fails(&[&x, &i, &src], || x.scatter_add(&i, &src, 0)),
        Error::ShapeMismatch { op: "scatter_add", .. },
        ["scatter_add", "[3, 2]", "[2, 3]"]
    );
    check!(
        fails(&[&x, &i], || x.gather(&i, 0)),
        Error::ShapeMismatch { op: "gather", .. },
        ["gather", "[3, 2]", "[2, 3]"]
    );
    let i1 = Tensor::zeros(2, DType::I64, device).unwrap();
    check!(
        fails(&[&x, &i1], || x.gather(&i1, 0)),
        Error::ShapeMismatch { op: "gather", .. },
        ["gather", "[3, 2]", "[2]"]
    );
    Ok(())
}
test_device!(shape_mismatch_test, shape_mismatch);

fn broadcast_incompatible(device: Device) -> Result<()> {
    let (a, b) = (f32s(device, &[2, 3]), f32s(device, &[4]));
    check!(fails(&[&a, &b], || a.add(&b)),
        Error::BroadcastIncompatible { op: "add", lhs, rhs } if lhs.dims() == [2, 3] && rhs.dims() == [4],
        ["add", "[2, 3]", "[4]"]);
    check!(fails(&[&a, &b], || a.lt(&b)), Error::BroadcastIncompatible { op: "lt", .. }, ["lt", "[2, 3]", "[4]"]);
    let cond = Tensor::ones((2, 3), DType::U8, device).unwrap();
    check!(
        fails(&[&cond, &a, &b], || cond.where_cond(&a, &b)),
        Error::BroadcastIncompatible { op: "where_cond", .. },
        ["where_cond", "[2, 3]", "[4]"]
    );
    let cond = Tensor::ones(5, DType::U8, device).unwrap();
    check!(
        fails(&[&cond, &a], || cond.where_cond(&a, &a)),
        Error::BroadcastIncompatible { op: "where_cond", .. },
        ["where_cond", "[5]", "[2, 3]"]
    );
    check!(
        fails(&[&a], || a.broadcast_as((3, 3))),
        Error::BroadcastIncompatible { op: "broadcast_as", .. },
        ["broadcast_as", "[2, 3]", "[3, 3]"]
    );
    check!(
        fails(&[&a], || a.broadcast_as(3)),
        Error::BroadcastIncompatible { op: "broadcast_as", .. },
        ["broadcast_as", "[2, 3]", "[3]"]
    );
    // Batch dims of matmul broadcast like elementwise ops.
    let (a, b) = (f32s(device, &[2, 2, 3]), f32s(device, &[3, 3, 2]));
    check!(
        fails(&[&a, &b], || a.matmul(&b)),
        Error::BroadcastIncompatible { op: "matmul", .. },
        ["matmul", "[2]", "[3]"]
    );
    Ok(())
}
test_device!(broadcast_incompatible_test, broadcast_incompatible);

fn dtype_mismatch(device: Device) -> Result<()> {
    // F64 where the device has it, else another dtype it holds.
    let other = if rnn_testutil::supports(device, DType::F64) { DType::F64 } else { other_dtype(device, DType::F32) };
    let name = format!("{other:?}");
    let (a, b) = (iota(device, &[2, 2], DType::F32), iota(device, &[2, 2], other));
    check!(
        fails(&[&a, &b], || a.add(&b)),
        Error::DTypeMismatch { op: "add", lhs: DType::F32, rhs } if *rhs == other,
        ["add", "F32", &name]
    );
    check!(
        fails(&[&a, &b], || a.matmul(&b)),
        Error::DTypeMismatch { op: "matmul", lhs: DType::F32, rhs } if *rhs == other,
        ["matmul"]
    );
    check!(
        fails(&[&a, &b], || Tensor::cat(&[a.clone(), b.clone()], 0)),
        Error::DTypeMismatch { op: "cat", .. },
        ["cat", "F32", &name]
    );
    check!(
        fails(&[&a, &b], || Tensor::stack(&[a.clone(), b.clone()], 0)),
        Error::DTypeMismatch { op: "cat", .. },
        ["F32", &name]
    );
    let cond = Tensor::ones((2, 2), DType::U8, device).unwrap();
    check!(
        fails(&[&cond, &a, &b], || cond.where_cond(&a, &b)),
        Error::DTypeMismatch { op: "where_cond", .. },
        ["where_cond", "F32", &name]
    );
    check!(
        fails(&[&a], || a.to_vec::<f64>()),
        Error::DTypeMismatch { op: "to_vec", lhs: DType::F32, rhs: DType::F64 },
        ["to_vec"]
    );
    let (i, src) = (Tensor::zeros((2, 2), DType::I64, device).unwrap(), iota(device, &[2, 2], other));
    check!(
        fails(&[&a, &i, &src], || a.scatter_add(&i, &src, 0)),
        Error::DTypeMismatch { op: "scatter_add", .. },
        ["scatter_add"]
    );
    check!(fails(&[&a, &b], || a.assign(&b)), Error::DTypeMismatch { op: "assign", .. }, ["assign"]);
    Ok(())
}
test_device!(dtype_mismatch_test, dtype_mismatch);

fn unsupported_dtype(device: Device) -> Result<()> {
    for dtype in [DType::U8, DType::U32, DType::I64] {
        let x = iota(device, &[2, 3], dtype);
        check!(fails(&[&x], || x.exp()), Error::UnsupportedDType { op: "exp", dtype: d, .. } if *d == dtype, ["exp"]);
        check!(fails(&[&x], || x.tanh()), Error::UnsupportedDType { op: "tanh", .. }, ["tanh"]);
        let y = iota(device, &[3, 2], dtype);
        check!(fails(&[&x, &y], || x.matmul(&y)), Error::UnsupportedDType { op: "matmul", dtype: d, .. } if *d == dtype, ["matmul"]);
        check!(fails(&[&x], || x.softmax(1)), Error::UnsupportedDType { .. }, []);
        check!(
            fails(&[], || Tensor::rand(0.0, 1.0, 3, dtype, device)),
            Error::UnsupportedDType { op: "rand", .. },
            ["rand"]
        );
    }
    let x = f32s(device, &[3, 2]);
    for float in floats(device) {
        let fids = iota(device, &[2], float);
        check!(fails(&[&x, &fids], || x.index_select(&fids, 0)), Error::UnsupportedDType { op: "index_select", dtype: d, .. } if *d == float, ["index_select"]);
        let fids = iota(device, &[3, 2], float).mul_scalar(0.0).unwrap();
        check!(fails(&[&x, &fids], || x.gather(&fids, 0)), Error::UnsupportedDType { op: "gather", .. }, ["gather"]);
        check!(
            fails(&[&x, &fids], || x.scatter_add(&fids, &x, 0)),
            Error::UnsupportedDType { op: "scatter_add", .. },
            ["scatter_add"]
        );
        check!(fails(&[&fids], || fids.one_hot(3, DType::F32)), Error::UnsupportedDType { op: "one_hot", dtype: d, .. } if *d == float, ["one_hot"]);
        check!(
            fails(&[&fids, &x], || fids.where_cond(&x, &x)),
            Error::UnsupportedDType { op: "where_cond", .. },
            ["where_cond"]
        );
    }
    Ok(())
}
test_device!(unsupported_dtype_test, unsupported_dtype);

#[test]
fn devices() {
    let backends =
        [(Device::Cuda(0), "cuda", cfg!(feature = "cuda")), (Device::Wgpu(0), "wgpu", cfg!(feature = "wgpu"))];
    for (device, feature, compiled) in backends {
        if compiled {
            continue; // the real backend decides; covered by the GPU test runs
        }
        assert!(!device.is_available());
        check!(device.check_available().unwrap_err(), Error::NotCompiledWith(f) if *f == feature, [feature]);
        check!(fails(&[], || Tensor::zeros((2, 3), DType::F32, device)), Error::NotCompiledWith(f) if *f == feature, [feature, "--features"]);
        check!(fails(&[], || Tensor::from_vec(vec![1f32, 2.0], 2, device)), Error::NotCompiledWith(f) if *f == feature, [feature]);
        check!(fails(&[], || Tensor::randn(0.0, 1.0, 4, DType::F32, device)), Error::NotCompiledWith(f) if *f == feature, [feature]);
        let x = f32s(CPU, &[2, 2]);
        check!(fails(&[&x], || x.to_device(device)), Error::NotCompiledWith(f) if *f == feature, [feature]);
    }
    assert!(Device::Cpu.is_available());
    assert_eq!(Device::parse("cpu").unwrap(), Device::Cpu);
    assert_eq!(Device::parse(" CUDA:1 ").unwrap(), Device::Cuda(1));
    assert_eq!(Device::parse("wgpu").unwrap(), Device::Wgpu(0));
    assert_eq!(Device::parse("cpu:0").unwrap(), Device::Cpu);
    for bad in ["", "tpu", "cuda:", "cuda:x", "cuda:-1", "wgpu:1:2", "cpu0", "cpu:3", "cuda:99999999999999999999999"] {
        check!(Device::parse(bad).unwrap_err(), Error::InvalidArgument { op: "device", .. }, ["device"]);
    }
    // DeviceMismatch cannot be produced in a CPU-only build; its message must still name both sides.
    says(&Error::DeviceMismatch { op: "add", lhs: Device::Cpu, rhs: Device::Cuda(0) }, &["add", "Cpu", "Cuda(0)"]);

    // Env vars are process-global: every use of RNN_GPU_DEVICE in this binary is in this block.
    let saved = std::env::var("RNN_GPU_DEVICE").ok();
    std::env::remove_var("RNN_GPU_DEVICE");
    let best = Device::best().unwrap();
    if !cfg!(feature = "cuda") && !cfg!(feature = "wgpu") {
        assert_eq!(best, Device::Cpu);
    }
    std::env::set_var("RNN_GPU_DEVICE", "cpu");
    assert_eq!(Device::best().unwrap(), Device::Cpu);
    std::env::set_var("RNN_GPU_DEVICE", "nonsense");
    let bad = Device::best();
    std::env::set_var("RNN_GPU_DEVICE", "cuda:0");
    let cuda = Device::best();
    std::env::set_var("RNN_GPU_DEVICE", "wgpu:3");
    let wgpu = Device::best();
    // Set but empty or blank is the same as unset.
    let mut blank = Vec::new();
    for value in ["", "  "] {
        std::env::set_var("RNN_GPU_DEVICE", value);
        blank.push(Device::best());
    }
    match saved {
        Some(v) => std::env::set_var("RNN_GPU_DEVICE", v),
        None => std::env::remove_var("RNN_GPU_DEVICE"),
    }
    check!(bad.unwrap_err(), Error::InvalidArgument { op: "device", .. }, ["nonsense"]);
    for result in blank {
        assert_eq!(result.unwrap(), best);
    }
    if !cfg!(feature = "cuda") {
        check!(cuda.unwrap_err(), Error::NotCompiledWith("cuda"), ["cuda"]);
    }
    if !cfg!(feature = "wgpu") {
        check!(wgpu.unwrap_err(), Error::NotCompiledWith("wgpu"), ["wgpu"]);
    }
}

fn dim_out_of_range(device: Device) -> Result<()> {
    let x = f32s(device, &[2, 3]);
    let dim_err = |e: Error, op: &str, dim: i64| {
        assert!(
            matches!(&e, Error::DimOutOfRange { op: o, dim: d, shape } if *o == op && *d == dim && shape.dims() == [2, 3]),
            "{e:?}"
        );
        says(&e, &[op, &dim.to_string(), "[2, 3]"]);
    };
    dim_err(fails(&[&x], || x.sum(5)), "sum", 5);
    dim_err(fails(&[&x], || x.sum(2)), "sum", 2);
    dim_err(fails(&[&x], || x.sum(-3)), "sum", -3);
    dim_err(fails(&[&x], || x.max_keepdim(-7i32)), "max", -7);
    dim_err(fails(&[&x], || x.mean([0, 4])), "mean", 4);
    dim_err(fails(&[&x], || x.transpose(0, 2)), "transpose", 2);
    dim_err(fails(&[&x], || x.transpose(-3, 0)), "transpose", -3);
    dim_err(fails(&[&x], || x.narrow(2, 0, 1)), "narrow", 2);
    dim_err(fails(&[&x], || x.softmax(2)), "softmax", 2);
    dim_err(fails(&[&x], || x.log_softmax(-3)), "log_softmax", -3);
    dim_err(fails(&[&x], || x.squeeze(2)), "squeeze", 2);
    dim_err(fails(&[&x], || x.unsqueeze(3)), "unsqueeze", 3);
    dim_err(fails(&[&x], || x.unsqueeze(-4)), "unsqueeze", -4);
    dim_err(fails(&[&x], || x.flatten(0, 2)), "flatten", 2);
    dim_err(fails(&[&x], || x.index_select(&ids(device, &[0]), 2)), "index_select", 2);
    dim_err(fails(&[&x], || Tensor::cat(&[x.clone(), x.clone()], 2)), "cat", 2);
    dim_err(fails(&[&x], || Tensor::stack(&[x.clone(), x.clone()], 3)), "stack", 3);
    // A usize dim too large for i64 must not wrap around to a negative (valid) dim.
    let e = fails(&[&x], || x.sum(usize::MAX));
    assert!(matches!(e, Error::DimOutOfRange { op: "sum", .. }), "{e:?}");
    // Rank 0 has no dims at all.
    let s = Tensor::scalar(1f32, device).unwrap();
    check!(fails(&[&s], || s.sum(0)), Error::DimOutOfRange { op: "sum", dim: 0, .. }, ["sum", "[]"]);
    check!(
        fails(&[&s], || s.transpose(0, 0)),
        Error::DimOutOfRange { op: "transpose", dim: 0, .. },
        ["transpose", "[]"]
    );
    Ok(())
}
test_device!(dim_out_of_range_test, dim_out_of_range);

fn duplicate_dim(device: Device) -> Result<()> {
    let x = f32s(device, &[2, 3, 4]);
    check!(fails(&[&x], || x.sum([1, 1])), Error::DuplicateDim { op: "sum", dim: 1 }, ["sum", "1"]);
    check!(fails(&[&x], || x.sum(vec![2i64, -1])), Error::DuplicateDim { op: "sum", dim: 2 }, ["sum", "2"]);
    check!(fails(&[&x], || x.max_keepdim(&[0usize, 0][..])), Error::DuplicateDim { op: "max", dim: 0 }, ["max"]);
    check!(fails(&[&x], || x.mean([0, 1, 0])), Error::DuplicateDim { op: "mean", dim: 0 }, ["mean"]);
    check!(fails(&[&x], || x.var([1, -2])), Error::DuplicateDim { op: "var", dim: 1 }, ["var"]);
    Ok(())
}
test_device!(duplicate_dim_test, duplicate_dim);

/// `r` read back to the host: GPU devices report a bad id at the next sync point (the
/// CPU at once), so the index tests read the result.
fn synced(r: Result<Tensor>) -> Result<Tensor> {
    r?.to_device(CPU)
}

fn index_out_of_range(device: Device) -> Result<()> {
    let x = f32s(device, &[3, 2]);
    let idx_err = |e: Error, op: &str, index: i64, size: usize| {
        assert!(
            matches!(&e, Error::IndexOutOfRange { op: o, index: i, size: s, .. } if *o == op && *i == index && *s == size),
            "{e:?}"
        );
        says(&e, &[op, &index.to_string(), &size.to_string()]);
    };
    let i = ids(device, &[0, 3]);
    idx_err(fails(&[&x, &i], || synced(x.index_select(&i, 0))), "index_select", 3, 3);
    let i = ids(device, &[-1]);
    idx_err(fails(&[&x, &i], || synced(x.index_select(&i, 0))), "index_select", -1, 3);
    let i = Tensor::from_slice(&[2u32], 1, device).unwrap();
    idx_err(fails(&[&x, &i], || synced(x.index_select(&i, 1))), "index_select", 2, 2);
    let i = Tensor::from_slice(&[0u8, 200], 2, device).unwrap();
    idx_err(fails(&[&x, &i], || synced(x.index_select(&i, 0))), "index_select", 200, 3);

    let g = Tensor::from_slice(&[0i64, 1, 2, 5], (2, 2), device).unwrap();
    idx_err(fails(&[&x, &g], || synced(x.gather(&g, 0))), "gather", 5, 3);
    let g = Tensor::from_slice(&[0i64, -2, 1], (3, 1), device).unwrap();
    idx_err(fails(&[&x, &g], || synced(x.gather(&g, 1))), "gather", -2, 2);
    let src = f32s(device, &[3, 1]);
    idx_err(fails(&[&x, &g, &src], || synced(x.scatter_add(&g, &src, 1))), "scatter_add", -2, 2);
    let (g, src) = (Tensor::from_slice(&[7i64, 0, 1, 0], (2, 2), device).unwrap(), f32s(device, &[2, 2]));
    idx_err(fails(&[&x, &g, &src], || synced(x.scatter_add(&g, &src, 0))), "scatter_add", 7, 3);

    let c = ids(device, &[0, 2, 3]);
    idx_err(fails(&[&c], || c.one_hot(3, DType::F32)), "one_hot", 3, 3);
    let c = ids(device, &[0, -1]);
    idx_err(fails(&[&c], || c.one_hot(3, DType::F32)), "one_hot", -1, 3);
    // Indexing an empty dim: every index is out of range.
    let e = f32s(device, &[0, 2]);
    let i = ids(device, &[0]);
    idx_err(fails(&[&e, &i], || synced(e.index_select(&i, 0))), "index_select", 0, 0);
    // On a GPU the op itself returns; the error comes at the next sync point, once.
    if !device.is_cpu() {
        let bad = ids(device, &[4]);
        let pending = x.index_select(&bad, 0)?;
        idx_err(device.synchronize().unwrap_err(), "index_select", 4, 3);
        device.synchronize()?;
        drop(pending);
    }
    Ok(())
}
test_device!(index_out_of_range_test, index_out_of_range);

fn narrow_out_of_range(device: Device) -> Result<()> {
    let x = f32s(device, &[3, 4]);
    check!(fails(&[&x], || x.narrow(0, 1, 3)), Error::NarrowOutOfRange { op: "narrow", shape, .. } if shape.dims() == [3, 4],
        ["narrow", "start 1", "len 3", "[3, 4]"]);
    check!(fails(&[&x], || x.narrow(-1, 5, 0)), Error::NarrowOutOfRange { op: "narrow", .. }, ["narrow", "[3, 4]"]);
    check!(fails(&[&x], || x.narrow(1, usize::MAX, 2)), Error::NarrowOutOfRange { op: "narrow", .. }, ["narrow"]);
    check!(fails(&[&x], || x.narrow(1, 1, usize::MAX)), Error::NarrowOutOfRange { op: "narrow", .. }, ["narrow"]);
    // The public layout functions check their dims too.
    let l = Layout::contiguous((3, 4));
    check!(l.narrow(2, 0, 1).unwrap_err(), Error::DimOutOfRange { op: "narrow", dim: 2, .. }, ["narrow", "[3, 4]"]);
    check!(
        l.transpose(0, 5).unwrap_err(),
        Error::DimOutOfRange { op: "transpose", dim: 5, .. },
        ["transpose", "[3, 4]"]
    );
    Ok(())
}
test_device!(narrow_out_of_range_test, narrow_out_of_range);

fn empty_tensor(device: Device) -> Result<()> {
    let x = f32s(device, &[0, 3]);
    let empty_err = |e: Error, op: &str| {
        assert!(matches!(&e, Error::EmptyTensor { op: o, shape } if *o == op && shape.dims() == [0, 3]), "{e:?}");
        says(&e, &[op, "[0, 3]"]);
    };
    empty_err(fails(&[&x], || x.max(0)), "max");
    empty_err(fails(&[&x], || x.min_keepdim(0)), "min");
    empty_err(fails(&[&x], || x.argmax(0)), "argmax");
    empty_err(fails(&[&x], || x.argmin(-2)), "argmin");
    empty_err(fails(&[&x], || x.max_all()), "max");
    empty_err(fails(&[&x], || x.max([0, 1])), "max");
    // Reducing over a non-empty dim of an empty tensor is fine (an empty result).
    assert_eq!(x.max(1).unwrap().dims(), &[0]);
    assert_eq!(x.argmax(1).unwrap().dims(), &[0]);
    // The sum of nothing is 0.
    assert_eq!(x.sum(0).unwrap().to_vec1::<f32>().unwrap(), vec![0.0; 3]);
    assert_eq!(x.sum_all().unwrap().to_scalar::<f32>().unwrap(), 0.0);
    assert_eq!(x.sum_keepdim(0).unwrap().dims(), &[1, 3]);
    let y = f32s(device, &[2, 3, 0]);
    assert_eq!(y.sum([0, 2]).unwrap().to_vec1::<f32>().unwrap(), vec![0.0; 3]);
    assert_eq!(y.sum_keepdim([0, 2]).unwrap().dims(), &[1, 3, 1]);
    assert_eq!(y.transpose(0, 1).unwrap().sum([1, 2]).unwrap().to_vec1::<f32>().unwrap(), vec![0.0; 3]);
    Ok(())
}
test_device!(empty_tensor_test, empty_tensor);

fn element_count_mismatch(device: Device) -> Result<()> {
    let e = fails(&[], || Tensor::from_vec(vec![1f32; 5], (2, 3), device));
    check!(e, Error::ElementCountMismatch { op: "from_vec", expected: 6, got: 5, shape } if shape.dims() == [2, 3], ["from_vec", "5", "6", "[2, 3]"]);
    let x = f32s(device, &[2, 3]);
    check!(
        fails(&[&x], || x.reshape(4)),
        Error::ElementCountMismatch { op: "reshape", expected: 4, got: 6, .. },
        ["reshape", "[4]", "6"]
    );
    check!(
        fails(&[&x], || x.reshape(())),
        Error::ElementCountMismatch { op: "reshape", expected: 1, got: 6, .. },
        ["reshape", "[]"]
    );
    let t = x.t().unwrap(); // a non-contiguous input
    check!(
        fails(&[&t], || t.reshape((4, 2))),
        Error::ElementCountMismatch { op: "reshape", .. },
        ["reshape", "[4, 2]"]
    );
    Ok(())
}
test_device!(element_count_mismatch_test, element_count_mismatch);

#[test]
fn huge_sizes_are_errors() {
    // Shapes whose element count overflows, or whose bytes no machine has, fail cleanly.
    let big = (1usize << 40, 1usize << 40);
    assert!(Tensor::zeros(big, DType::F32, CPU).is_err());
    assert!(Tensor::zeros((usize::MAX, 2), DType::U8, CPU).is_err());
    assert!(Tensor::from_vec(Vec::<f32>::new(), (1usize << 32, 1usize << 32, 0), CPU).is_ok());
    assert!(Tensor::from_vec(Vec::<f32>::new(), (1usize << 32, 1usize << 32), CPU).is_err());
    assert!(Tensor::rand(0.0, 1.0, big, DType::F32, CPU).is_err());
    assert!(Tensor::arange(0.0f64, 1e30, CPU).is_err());
    let x = f32s(CPU, &[0]);
    assert!(x.reshape((1usize << 32, 1usize << 32)).is_err());
    assert!(x.broadcast_as((1usize << 32, 1usize << 32, 0)).is_ok());
    let one = f32s(CPU, &[1, 1]);
    assert!(one.broadcast_as((1usize << 40, 1usize << 40)).is_err());
    assert!(ids(CPU, &[0]).one_hot(1 << 62, DType::F32).is_err());
    // A size no machine can hold (2^47 bytes, past the address space) is an out-of-memory error, not an abort.
    check!(fails(&[], || Tensor::zeros(1usize << 45, DType::F32, CPU)), Error::OutOfMemory { .. }, []);
}

fn rank_mismatch(device: Device) -> Result<()> {
    let x = f32s(device, &[4]);
    check!(fails(&[&x], || x.to_vec2::<f32>()), Error::RankMismatch { op: "to_vec2", expected: 2, got: 1, shape } if shape.dims() == [4], ["to_vec2", "[4]"]);
    check!(
        fails(&[&x], || x.to_vec3::<f32>()),
        Error::RankMismatch { op: "to_vec3", expected: 3, got: 1, .. },
        ["to_vec3"]
    );
    check!(fails(&[&x], || x.t()), Error::RankMismatch { op: "t", expected: 2, got: 1, .. }, ["t", "[4]"]);
    let m = f32s(device, &[2, 2]);
    check!(
        fails(&[&m], || m.to_vec1::<f32>()),
        Error::RankMismatch { op: "to_vec1", expected: 1, got: 2, .. },
        ["to_vec1", "[2, 2]"]
    );
    let i2 = Tensor::zeros((1, 2), DType::I64, device).unwrap();
    check!(fails(&[&m, &i2], || m.index_select(&i2, 0)),
        Error::RankMismatch { op: "index_select", expected: 1, got: 2, shape } if shape.dims() == [1, 2], ["index_select", "[1, 2]"]);
    Ok(())
}
test_device!(rank_mismatch_test, rank_mismatch);

fn invalid_argument(device: Device) -> Result<()> {
    let x = f32s(device, &[2, 3]);
    let invalid = |e: Error, op: &str, parts: &[&str]| {
        assert!(matches!(&e, Error::InvalidArgument { op: o, .. } if *o == op), "{e:?}");
        says(&e, &[op]);
        says(&e, parts);
    };
    for perm in [&[0, 0][..], &[0][..], &[0, 2][..], &[1, 0, 2][..], &[][..]] {
        invalid(fails(&[&x], || x.permute(perm)), "permute", &["[2, 3]"]);
    }
    invalid(fails(&[&x], || x.clamp(1.0, 0.0)), "clamp", &["1", "0"]);
    invalid(fails(&[], || Tensor::arange_step(0f32, 5.0, 0.0, device)), "arange", &[]);
    invalid(fails(&[], || Tensor::arange_step(0i64, 5, 0, device)), "arange", &[]);
    invalid(fails(&[], || Tensor::arange(0f64, f64::INFINITY, device)), "arange", &[]);
    invalid(fails(&[], || Tensor::arange(f64::NAN, 1.0, device)), "arange", &[]);
    invalid(fails(&[], || Tensor::rand(1.0, 1.0, 3, DType::F32, device)), "rand", &[]);
    invalid(fails(&[], || Tensor::rand(2.0, 1.0, 3, DType::F32, device)), "rand", &[]);
    invalid(fails(&[], || Tensor::rand(0.0, f64::NAN, 3, DType::F32, device)), "rand", &[]);
    invalid(fails(&[], || Tensor::randn(0.0, -1.0, 3, DType::F32, device)), "randn", &[]);
    invalid(fails(&[&x], || x.to_scalar::<f32>()), "to_scalar", &["[2, 3]", "6"]);
    let e = f32s(device, &[0]);
    invalid(fails(&[&e], || e.to_scalar::<f32>()), "to_scalar", &["[0]"]);
    invalid(fails(&[&x], || x.squeeze(0)), "squeeze", &["[2, 3]"]);
    invalid(fails(&[&x], || x.flatten(1, 0)), "flatten", &[]);
    let s = Tensor::scalar(2f32, device).unwrap();
    invalid(fails(&[&s, &x], || s.matmul(&x)), "matmul", &["[]", "[2, 3]"]);
    invalid(fails(&[], || Tensor::cat(&[], 0)), "cat", &[]);
    invalid(fails(&[], || Tensor::stack(&[], 0)), "stack", &[]);
    invalid("f8".parse::<DType>().unwrap_err(), "dtype", &["f8"]);
    // assign only writes whole tensors, never a view of one.
    let big = f32s(device, &[4, 3]);
    let view = big.narrow(0, 1, 2).unwrap();
    invalid(fails(&[&view, &x, &big], || view.assign(&x)), "assign", &["view"]);
    Ok(())
}
test_device!(invalid_argument_test, invalid_argument);

fn backward_errors(device: Device) -> Result<()> {
    let x = f32s(device, &[2, 3]);
    let y = x.sqr().unwrap().sum_all().unwrap();
    check!(fails(&[&y], || y.backward().map(|g| g.len())), Error::Backward { .. }, ["backward", "requires_grad"]);
    let v = x.requires_grad();
    let d = v.mul_scalar(2.0).unwrap().detach();
    check!(fails(&[&d], || d.backward().map(|g| g.len())), Error::Backward { .. }, ["backward"]);
    let i = iota(device, &[3], DType::U32).requires_grad();
    check!(fails(&[&i], || i.backward().map(|g| g.len())), Error::Backward { .. }, ["backward", "u32"]);
    let s = i.sum_all().unwrap(); // an integer sum is i64, as in PyTorch
    check!(fails(&[&s], || s.backward().map(|g| g.len())), Error::Backward { .. }, ["i64"]);
    // An error inside the graph (log of an int) surfaces as that op's error.
    let n = iota(device, &[3], DType::I64).requires_grad();
    let p = n.pow(&n).unwrap().to_dtype(DType::F32).unwrap().sum_all().unwrap();
    check!(fails(&[&p, &n], || p.backward().map(|g| g.len())), Error::UnsupportedDType { op: "log", .. }, ["log"]);
    // The graph is intact after a failed call: a valid backward still works.
    let loss = v.sqr().unwrap().sum_all().unwrap();
    let g = loss.backward().unwrap();
    assert_eq!(g.get(&v).unwrap().to_vec2::<f32>().unwrap(), vec![vec![0.0, 2.0, 4.0], vec![6.0, 8.0, 10.0]]);
    Ok(())
}
test_device!(backward_errors_test, backward_errors);

fn assign_errors_leave_the_destination_intact(device: Device) -> Result<()> {
    let dst = f32s(device, &[2, 3]);
    let src = f32s(device, &[3, 2]);
    check!(fails(&[&dst, &src], || dst.assign(&src)),
        Error::ShapeMismatch { op: "assign", lhs, rhs } if lhs.dims() == [2, 3] && rhs.dims() == [3, 2], ["assign", "[2, 3]", "[3, 2]"]);
    check!(fails(&[&dst], || dst.assign(&f32s(device, &[6]))), Error::ShapeMismatch { op: "assign", .. }, ["[6]"]);
    // And a valid assign after the failures works.
    let new = dst.add_scalar(1.0).unwrap();
    dst.assign(&new).unwrap();
    assert_eq!(dst.to_vec2::<f32>().unwrap(), vec![vec![1.0, 2.0, 3.0], vec![4.0, 5.0, 6.0]]);
    Ok(())
}
test_device!(assign_errors_leave_the_destination_intact_test, assign_errors_leave_the_destination_intact);

/// `write_if_unique` writes only where no other handle or view could see it, and refuses
/// a wrong dtype or length with an error that leaves the tensor as it was.
fn write_if_unique_touches_only_unshared_tensors(device: Device) -> Result<()> {
    let lone = f32s(device, &[2, 2]).add_scalar(0.0)?;
    let written = lone.write_if_unique(&[9.0f32, 8.0, 7.0, 6.0])?;
    // Only a CPU tensor is written in place; elsewhere it is left for a new tensor.
    assert_eq!(written, device == Device::Cpu);
    let expected = if written { vec![9.0, 8.0, 7.0, 6.0] } else { vec![0.0, 1.0, 2.0, 3.0] };
    assert_eq!(lone.flatten_all()?.to_vec::<f32>()?, expected);
    let shared = f32s(device, &[2, 2]).add_scalar(0.0)?;
    let handle = shared.clone();
    let view = f32s(device, &[2, 2]).add_scalar(0.0)?;
    let _t = view.t()?;
    for t in [&shared, &view] {
        assert!(!t.write_if_unique(&[5.0f32; 4])?);
        assert_eq!(t.flatten_all()?.to_vec::<f32>()?, vec![0.0, 1.0, 2.0, 3.0]);
    }
    drop(handle);
    check!(
        fails(&[&lone], || lone.write_if_unique(&[1.0f32; 3])),
        Error::InvalidArgument { .. },
        ["3 values", "4 elements"]
    );
    check!(
        fails(&[&lone], || lone.write_if_unique(&[1.0f64; 4])),
        Error::DTypeMismatch { op: "write_if_unique", .. },
        ["F64"]
    );
    Ok(())
}
test_device!(write_if_unique_touches_only_unshared_tensors_test, write_if_unique_touches_only_unshared_tensors);

fn valid_edge_cases_are_not_errors(device: Device) -> Result<()> {
    // Vector-vector matmul is a dot product (rank 0), as in PyTorch.
    let (a, b) = (f32s(device, &[3]), f32s(device, &[3]));
    let dot = a.matmul(&b).unwrap();
    assert_eq!(dot.dims(), &[] as &[usize]);
    assert_eq!(dot.to_scalar::<f32>().unwrap(), 5.0);
    assert_eq!(a.matmul(&f32s(device, &[3, 2])).unwrap().dims(), &[2]);
    assert_eq!(f32s(device, &[4, 3]).matmul(&b).unwrap().dims(), &[4]);
    assert_eq!(f32s(device, &[2, 4, 3]).matmul(&b).unwrap().dims(), &[2, 4]);
    assert_eq!(a.matmul(&f32s(device, &[2, 3, 5])).unwrap().dims(), &[2, 5]);
    // Zero-sized dims flow through everything.
    let z = f32s(device, &[2, 0]);
    assert_eq!(z.matmul(&f32s(device, &[0, 3])).unwrap().to_vec2::<f32>().unwrap(), vec![vec![0.0; 3]; 2]);
    assert_eq!(z.t().unwrap().contiguous().unwrap().dims(), &[0, 2]);
    assert_eq!(z.to_vec2::<f32>().unwrap(), vec![Vec::<f32>::new(); 2]);
    assert_eq!(Tensor::cat(&[z.clone(), f32s(device, &[2, 1])], 1).unwrap().dims(), &[2, 1]);
    assert_eq!(ids(device, &[]).one_hot(4, DType::F32).unwrap().dims(), &[0, 4]);
    // u8 class ids above 255 classes keep one column per class.
    let c = Tensor::from_slice(&[255u8], 1, device).unwrap();
    let hot = c.one_hot(300, DType::U8).unwrap();
    assert_eq!(rnn_testutil::values(&hot.sum_all().unwrap()), vec![1.0]);
    assert_eq!(rnn_testutil::values(&hot.argmax(1).unwrap()), vec![255.0]);
    Ok(())
}
test_device!(valid_edge_cases_are_not_errors_test, valid_edge_cases_are_not_errors);

/// `try_into_vec` moves the elements out only of a whole CPU tensor that no other handle or
/// view shares, of the asked type; any other tensor comes back unchanged.
fn try_into_vec_takes_only_unshared_tensors(device: Device) -> Result<()> {
    let lone = f32s(device, &[2, 2]).add_scalar(0.0)?;
    match lone.try_into_vec::<f32>() {
        Ok(v) => assert!(device == Device::Cpu && v == vec![0.0, 1.0, 2.0, 3.0], "{device}: {v:?}"),
        Err(back) => assert!(device != Device::Cpu && back.to_vec2::<f32>()? == vec![vec![0.0, 1.0], vec![2.0, 3.0]]),
    }
    let flat = f32s(device, &[4]).add_scalar(0.0)?;
    let view = flat.narrow(0, 1, 2)?;
    let flat = flat.try_into_vec::<f32>().expect_err("a view shares the buffer");
    assert_eq!(flat.to_vec::<f32>()?, vec![0.0, 1.0, 2.0, 3.0]);
    drop(view);
    let flat = flat.try_into_vec::<f64>().expect_err("f32 elements are not f64");
    assert_eq!(flat.try_into_vec::<f32>().is_ok(), device == Device::Cpu, "{device}: the view is gone");
    // A view alone does not cover its whole buffer.
    let part = f32s(device, &[4]).add_scalar(0.0)?.narrow(0, 1, 2)?;
    assert_eq!(part.try_into_vec::<f32>().expect_err("a part of a buffer").to_vec::<f32>()?, vec![1.0, 2.0]);
    Ok(())
}
test_device!(try_into_vec_takes_only_unshared_tensors_test, try_into_vec_takes_only_unshared_tensors);
