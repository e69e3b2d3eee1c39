//! Which devices a test runs on, and what each of them can hold.

use rnn_core::{DType, Device, Result};

/// `test_device!(name, body_fn)` makes a module `name` with the tests `cpu`, `cuda` and
/// `wgpu`, each calling `body_fn(Device) -> Result<()>`: the CPU always runs it; the GPU arms
/// run it through [`on_gpu`](crate::on_gpu), which reports the test skipped when this build
/// of rnn-core has no such backend or the machine no such device (and fails instead when
/// `RNN_REQUIRE_GPU` names the backend). No `cfg` is involved, so the macro works the same in
/// every crate, whatever features that crate declares.
#[macro_export]
macro_rules! test_device {
    ($name:ident, $body:path) => {
        mod $name {
            use super::*;
            #[test]
            fn cpu() -> $crate::__private::Result<()> {
                $body($crate::__private::Device::Cpu)
            }
            #[test]
            fn cuda() -> $crate::__private::Result<()> {
                $crate::on_gpu($crate::cuda_test_device(), $body)
            }
            #[test]
            fn wgpu() -> $crate::__private::Result<()> {
                $crate::on_gpu($crate::wgpu_test_device(), $body)
            }
        }
    };
}

/// Runs `body` on a GPU device, or prints why it is skipped. When `RNN_REQUIRE_GPU` names the
/// backend (CI) a missing device is a failure, so a broken driver setup cannot pass as skipped.
pub fn on_gpu(device: Device, body: impl FnOnce(Device) -> Result<()>) -> Result<()> {
    match usable(device) {
        Some(device) => body(device),
        None => Ok(()),
    }
}

/// `Some(device)` when tests can use it; otherwise prints `SKIPPED on <device>: <why>` and
/// returns `None` (for a test that skips its GPU part), or panics when `RNN_REQUIRE_GPU` names
/// the backend. Why it cannot be used: the backend is not compiled in
/// (`Error::NotCompiledWith`), or the machine has no such device.
pub fn usable(device: Device) -> Option<Device> {
    match device.check_available() {
        Ok(()) => Some(device),
        Err(e) if device.is_required_by_env() => {
            panic!("RNN_REQUIRE_GPU requires {device}, but it is not available: {e}")
        }
        Err(e) => {
            eprintln!("SKIPPED on {device}: {e}");
            None
        }
    }
}

/// The device `RNN_GPU_DEVICE` names when it is one `wanted` accepts.
fn env_device(wanted: fn(Device) -> bool) -> Option<Device> {
    let named = Device::env_request().and_then(|s| Device::parse(&s).ok());
    named.filter(|&d| wanted(d))
}

/// The wgpu device tests use: `RNN_GPU_DEVICE` when it names one, else adapter 0.
pub fn wgpu_test_device() -> Device {
    env_device(|d| matches!(d, Device::Wgpu(_))).unwrap_or(Device::Wgpu(0))
}

/// The CUDA device tests use: `RNN_GPU_DEVICE` when it names one, else `cuda:0`.
pub fn cuda_test_device() -> Device {
    env_device(|d| matches!(d, Device::Cuda(_))).unwrap_or(Device::Cuda(0))
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

/// The float dtypes of `device` that layer, loss and optimizer results are checked in: f32
/// and, where the device has it, f64 (f16 / bf16 round too coarsely for a long computation
/// to be compared element by element).
pub fn checked_floats(device: Device) -> Vec<DType> {
    floats(device).into_iter().filter(|&d| matches!(d, DType::F32 | DType::F64)).collect()
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
