//! A lost wgpu device (here destroyed on purpose) turns every later op into
//! `Error::DeviceNotAvailable`; nothing panics or hangs, and the CPU keeps working. A separate
//! test binary, because the device stays lost for the rest of the process.
#![cfg(feature = "wgpu")]

use rnn_core::{DType, Device, Error, Tensor};

#[test]
fn a_lost_device_is_reported_not_a_panic() -> rnn_core::Result<()> {
    let Some(device) = rnn_testutil::usable(rnn_testutil::wgpu_test_device()) else { return Ok(()) };
    let Device::Wgpu(i) = device else { unreachable!() };
    let x = Tensor::ones(16, DType::F32, device)?;
    rnn_core::wgpu::destroy(i)?;
    let lost = |e: Error| matches!(e, Error::DeviceNotAvailable(ref m) if m.contains("lost"));
    let err = x.exp().and_then(|y| y.to_vec::<f32>()).unwrap_err();
    assert!(lost(err.clone()), "{err:?}");
    let err = Tensor::zeros(4, DType::F32, device).unwrap_err();
    assert!(lost(err.clone()), "{err:?}");
    let cpu = Tensor::ones(3, DType::F32, Device::Cpu)?;
    assert_eq!(cpu.exp()?.to_vec::<f32>()?.len(), 3);
    Ok(())
}
