//! Shared test helpers. `test_device!(body)` runs one test body on every device this build
//! and machine offer: always the CPU, plus CUDA / wgpu when their features are on (a test
//! on a missing GPU is reported as skipped, never passed silently; with `RNN_REQUIRE_GPU` naming the backend
//! it fails instead).
//!
//! Bodies ask the device what it can hold (`supports`, `dtypes`, `floats`) instead of
//! naming devices: the wgpu backend has no f64 / bf16, f16 only with `shader-f16`, and
//! stores i64 in 32 bits.
#![allow(dead_code)]

use rnn_core::{DType, Device, Result, Tensor};

/// `test_device!(name, body_fn)` makes a module `name` with tests `cpu`, `cuda` and `wgpu`,
/// each calling `body_fn(Device) -> Result<()>`.
#[macro_export]
macro_rules! test_device {
    ($name:ident, $body:path) => {
        mod $name {
            use super::*;
            #[test]
            fn cpu() -> rnn_core::Result<()> {
                $body(rnn_core::Device::Cpu)
            }
            #[cfg(feature = "cuda")]
            #[test]
            fn cuda() -> rnn_core::Result<()> {
                $crate::common::on_gpu(rnn_core::Device::Cuda(0), $body)
            }
            #[cfg(feature = "wgpu")]
            #[test]
            fn wgpu() -> rnn_core::Result<()> {
                $crate::common::on_gpu($crate::common::wgpu_test_device(), $body)
            }
        }
    };
}

/// Runs `body` on a GPU device, or prints why it is skipped. When `RNN_REQUIRE_GPU` names the
/// backend (CI) a missing device is a failure, so a broken driver setup cannot pass as skipped.
pub fn on_gpu(device: Device, body: impl FnOnce(Device) -> Result<()>) -> Result<()> {
    match device.check_available() {
        Ok(()) => body(device),
        Err(e) if device.is_required_by_env() => {
            panic!("RNN_REQUIRE_GPU requires {device}, but it is not available: {e}")
        }
        Err(e) => {
            eprintln!("SKIPPED on {device}: {e}");
            Ok(())
        }
    }
}

/// The wgpu device tests use: `RNN_GPU_DEVICE` when it names one, else adapter 0.
pub fn wgpu_test_device() -> Device {
    match std::env::var("RNN_GPU_DEVICE").ok().and_then(|s| Device::parse(&s).ok()) {
        Some(d @ Device::Wgpu(_)) => d,
        _ => Device::Wgpu(0),
    }
}

// ---- what a device supports ----

/// Whether tensors of `dtype` can live on `device`. The CPU holds every dtype; CUDA is
/// assumed to as well; wgpu stores f32, u32, u8 and i64 (as i32), and f16 only where the
/// adapter has `shader-f16`.
pub fn supports(device: Device, dtype: DType) -> bool {
    match device {
        Device::Cpu | Device::Cuda(_) => true,
        Device::Wgpu(ordinal) => match dtype {
            DType::F32 | DType::U32 | DType::U8 | DType::I64 => true,
            DType::F16 => wgpu_shader_f16(ordinal),
            DType::F64 | DType::BF16 => false,
        },
    }
}

fn wgpu_shader_f16(ordinal: usize) -> bool {
    rnn_core::wgpu_adapters().iter().any(|a| a.ordinal == ordinal && a.shader_f16)
}

/// Every dtype `device` supports, in `DType::ALL` order.
pub fn dtypes(device: Device) -> Vec<DType> {
    DType::ALL.iter().copied().filter(|&d| supports(device, d)).collect()
}

/// The float dtypes `device` supports, in the order f32, f64, f16, bf16 (f32 is always
/// there, so it comes first).
pub fn floats(device: Device) -> Vec<DType> {
    [DType::F32, DType::F64, DType::F16, DType::BF16].into_iter().filter(|&d| supports(device, d)).collect()
}

/// The most precise float dtype of `device`: f64 where it has one, else f32.
pub fn widest_float(device: Device) -> DType {
    if supports(device, DType::F64) {
        DType::F64
    } else {
        DType::F32
    }
}

/// A supported dtype other than `dtype` (a float when there is one), for dtype-mismatch
/// checks.
pub fn other_dtype(device: Device, dtype: DType) -> DType {
    let all = dtypes(device);
    let float = all.iter().copied().find(|&d| d != dtype && d.is_float());
    float.or_else(|| all.iter().copied().find(|&d| d != dtype)).expect("a device with a second dtype")
}

/// Whether i64 tensors on `device` hold the full i64 range (wgpu stores them as i32, and
/// uploading a larger value is an error).
pub fn wide_i64(device: Device) -> bool {
    !matches!(device, Device::Wgpu(_))
}

/// Whether sizes, strides and offsets past `u32::MAX` work on `device` (wgpu indexes in
/// 32 bits and rejects larger ones with `InvalidArgument`).
pub fn wide_index(device: Device) -> bool {
    !matches!(device, Device::Wgpu(_))
}

/// GPU backends compute floats in f32 with the GPU's own `exp`, `sin`, `pow`, .. (WGSL
/// only bounds their error loosely): a relative error this large is within their accuracy.
pub const GPU_F32_TOL: f64 = 1e-5;

/// The tolerance a check with CPU tolerance `cpu_tol` has on `device`: the same on the
/// CPU; on a GPU never tighter than `GPU_F32_TOL` (exact checks, `cpu_tol == 0`, stay exact).
pub fn tol_on(device: Device, cpu_tol: f64) -> f64 {
    if device.is_cpu() || cpu_tol == 0.0 {
        cpu_tol
    } else {
        cpu_tol.max(GPU_F32_TOL)
    }
}

// ---- comparing values ----

/// Max |a - b| / (1 + |b|) over two equal-length slices. A NaN where the other side has
/// none (or unequal infinities) counts as an infinite error, not one `f64::max` skips.
pub fn max_rel_err(a: &[f64], b: &[f64]) -> f64 {
    assert_eq!(a.len(), b.len(), "length mismatch");
    let err = |x: f64, y: f64| match (x.is_nan(), y.is_nan()) {
        (true, true) => 0.0,
        (false, false) if x == y => 0.0,
        (false, false) => (x - y).abs() / (1.0 + y.abs()),
        _ => f64::INFINITY,
    };
    a.iter().zip(b).map(|(&x, &y)| err(x, y)).map(|e| if e.is_nan() { f64::INFINITY } else { e }).fold(0.0, f64::max)
}

/// The tensor's elements as f64 (any dtype, any device: converted on the host).
pub fn values(t: &Tensor) -> Vec<f64> {
    t.to_device(Device::Cpu)
        .and_then(|t| t.to_dtype(DType::F64))
        .and_then(|t| t.to_vec::<f64>())
        .expect("read back tensor")
}

/// Where `got` and `want` differ most, for failure messages: the element count, the index
/// and both values of the worst element, and the first few elements of each (never a dump
/// of a whole tensor).
pub fn diff_summary(got: &[f64], want: &[f64]) -> String {
    let err = |(&x, &y): (&f64, &f64)| max_rel_err(&[x], &[y]);
    let worst = got.iter().zip(want).map(err).enumerate().fold((0, 0.0), |b, (i, e)| if e > b.1 { (i, e) } else { b });
    let head = |v: &[f64]| v.iter().take(6).map(|x| format!("{x:.6}")).collect::<Vec<_>>().join(", ");
    let (g, w) = (got.get(worst.0).copied().unwrap_or(f64::NAN), want.get(worst.0).copied().unwrap_or(f64::NAN));
    format!(
        "{} elements; worst at {}: got {g}, want {w}; first got [{}], want [{}]",
        got.len(),
        worst.0,
        head(got),
        head(want)
    )
}

/// Asserts two tensors have the same shape and close values.
pub fn assert_close(a: &Tensor, b: &Tensor, tol: f64) {
    assert_eq!(a.dims(), b.dims(), "shape mismatch");
    let (av, bv) = (values(a), values(b));
    let err = max_rel_err(&av, &bv);
    assert!(err <= tol, "max relative error {err:.3e} > {tol:.1e}: {}", diff_summary(&av, &bv));
}

/// A tensor from f64 values in the given dtype (converted on the host, then moved).
pub fn tensor(data: &[f64], shape: &[usize], dtype: DType, device: Device) -> Tensor {
    try_tensor(data, shape, dtype, device).expect("build test tensor")
}

/// `tensor`, with the error of an unsupported dtype or value returned.
pub fn try_tensor(data: &[f64], shape: &[usize], dtype: DType, device: Device) -> Result<Tensor> {
    Tensor::from_vec(data.to_vec(), shape.to_vec(), Device::Cpu)?.to_dtype(dtype)?.to_device(device)
}

// ---- naive references (row-major index math, f64), for tests of forward ops ----

/// Row-major multi-index of the linear position `i` in `dims`.
pub fn unravel(mut i: usize, dims: &[usize]) -> Vec<usize> {
    let mut idx = vec![0; dims.len()];
    for d in (0..dims.len()).rev() {
        idx[d] = i % dims[d];
        i /= dims[d];
    }
    idx
}

/// Row-major linear position of `idx` in `dims`.
pub fn ravel(idx: &[usize], dims: &[usize]) -> usize {
    idx.iter().zip(dims).fold(0, |acc, (&i, &d)| acc * d + i)
}

/// numpy broadcasting of two shapes (panics when incompatible: tests pass valid shapes).
pub fn broadcast_dims(a: &[usize], b: &[usize]) -> Vec<usize> {
    let rank = a.len().max(b.len());
    let at = |s: &[usize], k: usize| if k < rank - s.len() { 1 } else { s[k - (rank - s.len())] };
    (0..rank)
        .map(|k| match (at(a, k), at(b, k)) {
            (x, y) if x == y => x,
            (1, y) => y,
            (x, 1) => x,
            (x, y) => panic!("shapes {a:?} and {b:?} do not broadcast ({x} vs {y})"),
        })
        .collect()
}

/// The element of `x` (shape `dims`) that position `out_idx` of a broadcast result reads.
pub fn broadcast_get(x: &[f64], dims: &[usize], out_idx: &[usize]) -> f64 {
    let skip = out_idx.len() - dims.len();
    let idx: Vec<usize> = dims.iter().enumerate().map(|(k, &d)| if d == 1 { 0 } else { out_idx[k + skip] }).collect();
    x[ravel(&idx, dims)]
}

/// `f(a, b)` elementwise with broadcasting; returns the output shape and values.
pub fn zip_ref(
    a: &[f64],
    ad: &[usize],
    b: &[f64],
    bd: &[usize],
    f: impl Fn(f64, f64) -> f64,
) -> (Vec<usize>, Vec<f64>) {
    let od = broadcast_dims(ad, bd);
    let n: usize = od.iter().product();
    let out = (0..n)
        .map(|i| {
            let idx = unravel(i, &od);
            f(broadcast_get(a, ad, &idx), broadcast_get(b, bd, &idx))
        })
        .collect();
    (od, out)
}

/// Reduces `x` over `red` (sorted dims): each output (keepdim shape) is `f` of its group of
/// elements, listed in row-major order (so a position in the group is the flattened index
/// over the reduced dims).
pub fn reduce_ref(x: &[f64], dims: &[usize], red: &[usize], f: impl Fn(&[f64]) -> f64) -> (Vec<usize>, Vec<f64>) {
    let out_dims: Vec<usize> = dims.iter().enumerate().map(|(d, &s)| if red.contains(&d) { 1 } else { s }).collect();
    let mut groups = vec![Vec::new(); out_dims.iter().product()];
    for (i, &v) in x.iter().enumerate() {
        let mut idx = unravel(i, dims);
        red.iter().for_each(|&d| idx[d] = 0);
        groups[ravel(&idx, &out_dims)].push(v);
    }
    (out_dims, groups.iter().map(|g| f(g)).collect())
}

/// Batched matmul `[.., m, k] @ [.., k, n]` with broadcast batch dims (both rank >= 2).
pub fn matmul_ref(a: &[f64], ad: &[usize], b: &[f64], bd: &[usize]) -> (Vec<usize>, Vec<f64>) {
    let (ra, rb) = (ad.len(), bd.len());
    let (m, k, n) = (ad[ra - 2], ad[ra - 1], bd[rb - 1]);
    assert_eq!(k, bd[rb - 2], "inner dims");
    let batch = broadcast_dims(&ad[..ra - 2], &bd[..rb - 2]);
    let nb: usize = batch.iter().product();
    let offset = |bi: &[usize], d: &[usize]| {
        let own = &d[..d.len() - 2];
        let skip = bi.len() - own.len();
        let idx: Vec<usize> = own.iter().enumerate().map(|(j, &s)| if s == 1 { 0 } else { bi[j + skip] }).collect();
        ravel(&idx, own) * d[d.len() - 2] * d[d.len() - 1]
    };
    let mut out = Vec::with_capacity(nb * m * n);
    for bi in 0..nb {
        let idx = unravel(bi, &batch);
        let (oa, ob) = (offset(&idx, ad), offset(&idx, bd));
        for i in 0..m {
            for j in 0..n {
                out.push((0..k).map(|l| a[oa + i * k + l] * b[ob + l * n + j]).sum());
            }
        }
    }
    (batch.into_iter().chain([m, n]).collect(), out)
}
