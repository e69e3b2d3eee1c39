//! Failure paths of the wgpu backend: a missing adapter, a tensor larger than the adapter's
//! buffer limit, a lost device. Each must be an `Error`, never a panic or a hang, and the
//! process must keep working afterwards.
#![cfg(feature = "wgpu")]

use rnn_core::{DType, Device, Error, Tensor};
use rnn_testutil::{values, wgpu_test_device};

/// Held by every test that uses the adapter: its memory pool is one per process, so the pool
/// test's counts must not see another test's buffers, cached between its calls.
static ADAPTER: std::sync::Mutex<()> = std::sync::Mutex::new(());

type Guard = std::sync::MutexGuard<'static, ()>;

/// The test adapter and the lock on it, or `None` (with a message) on a machine without one.
fn adapter() -> Option<(Device, rnn_core::WgpuAdapterInfo, Guard)> {
    let guard = ADAPTER.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    let device = wgpu_test_device();
    let Device::Wgpu(i) = device else { return None };
    match rnn_core::wgpu_adapters().into_iter().find(|a| a.ordinal == i) {
        Some(info) => Some((device, info, guard)),
        None => {
            assert!(!device.is_required_by_env(), "no wgpu adapter {device}");
            eprintln!("SKIPPED: no wgpu adapter {device}");
            None
        }
    }
}

#[test]
fn a_missing_adapter_is_device_not_available() {
    let missing = Device::Wgpu(rnn_core::wgpu_adapters().len() + 7);
    assert!(matches!(missing.check_available(), Err(Error::DeviceNotAvailable(_))));
    let err = Tensor::zeros(4, DType::F32, missing).unwrap_err();
    assert!(matches!(err, Error::DeviceNotAvailable(_)), "{err:?}");
    assert!(Device::parse("wgpu:no-such-adapter-anywhere").is_err());
}

#[test]
fn a_tensor_over_the_buffer_limit_is_a_clear_error() -> rnn_core::Result<()> {
    let Some((device, info, _guard)) = adapter() else { return Ok(()) };
    let too_many = (info.max_buffer_bytes / 4 + 1) as usize;
    let err = Tensor::zeros(too_many, DType::F32, device).unwrap_err();
    let msg = err.to_string();
    assert!(msg.contains("buffer limit") && msg.contains(&info.max_buffer_bytes.to_string()), "{msg}");
    // The device still works.
    let x = Tensor::from_vec(vec![1.0f32, 2.0, 3.0], 3, device)?;
    assert_eq!(values(&x.add(&x)?), vec![2.0, 4.0, 6.0]);
    Ok(())
}

#[test]
fn unsupported_dtypes_are_errors() -> rnn_core::Result<()> {
    let Some((device, _, _guard)) = adapter() else { return Ok(()) };
    let x = Tensor::from_vec(vec![1.0f64, 2.0], 2, Device::Cpu)?;
    assert!(matches!(x.to_device(device), Err(Error::UnsupportedDType { dtype: DType::F64, .. })));
    let big = Tensor::from_vec(vec![1i64 << 40], 1, Device::Cpu)?;
    assert!(big.to_device(device).is_err(), "an i64 beyond i32 range must not be truncated silently");
    Ok(())
}

#[test]
fn the_pool_reuses_buffers_and_empties() -> rnn_core::Result<()> {
    let Some((device, _, _guard)) = adapter() else { return Ok(()) };
    let x = Tensor::ones(1000, DType::F32, device)?;
    for _ in 0..5 {
        let _ = x.exp()?;
    }
    let stats = rnn_core::gpu_memory::memory_stats(device)?;
    assert!(stats.cache_hits >= 4, "{stats:?}");
    assert!(stats.reserved >= stats.allocated && stats.peak >= stats.allocated, "{stats:?}");
    rnn_core::gpu_memory::empty_cache(device)?;
    let after = rnn_core::gpu_memory::memory_stats(device)?;
    assert_eq!(after.reserved, after.allocated, "{after:?}");
    Ok(())
}
