//! Shared test helpers. `test_device!(body)` runs one test body on every device this build
//! and machine offer: always the CPU, plus CUDA / wgpu when their features are on (a test
//! on a missing GPU is reported as skipped, never passed silently).
#![allow(dead_code)]

use rnn_core::{DType, Device, Result, Tensor};

/// `test_device!(name, body_fn)` makes `name_cpu`, `name_cuda`, `name_wgpu` tests, each
/// calling `body_fn(Device) -> Result<()>`.
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

/// Runs `body` on a GPU device, or prints why it is skipped.
pub fn on_gpu(device: Device, body: impl FnOnce(Device) -> Result<()>) -> Result<()> {
    match device.check_available() {
        Ok(()) => body(device),
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

/// Max |a - b| / (1 + |b|) over two equal-length slices.
pub fn max_rel_err(a: &[f64], b: &[f64]) -> f64 {
    assert_eq!(a.len(), b.len(), "length mismatch");
    a.iter().zip(b).map(|(x, y)| (x - y).abs() / (1.0 + y.abs())).fold(0.0, f64::max)
}

/// The tensor's elements as f64 (any dtype).
pub fn values(t: &Tensor) -> Vec<f64> {
    t.to_dtype(DType::F64).and_then(|t| t.to_vec::<f64>()).expect("read back tensor")
}

/// Asserts two tensors have the same shape and close values.
pub fn assert_close(a: &Tensor, b: &Tensor, tol: f64) {
    assert_eq!(a.dims(), b.dims(), "shape mismatch");
    let err = max_rel_err(&values(a), &values(b));
    assert!(err <= tol, "max relative error {err} > {tol}\n a = {:?}\n b = {:?}", values(a), values(b));
}

/// A tensor from f64 values in the given dtype.
pub fn tensor(data: &[f64], shape: &[usize], dtype: DType, device: Device) -> Tensor {
    Tensor::from_vec(data.to_vec(), shape.to_vec(), Device::Cpu)
        .and_then(|t| t.to_dtype(dtype))
        .and_then(|t| t.to_device(device))
        .expect("build test tensor")
}
