//! Every WGSL kernel variant the wgpu backend can launch compiles on the adapter (naga's
//! validation, then the driver's compiler: lavapipe in CI). The op tests run them on data.
#![cfg(feature = "wgpu")]

use rnn_core::Device;

#[test]
fn every_wgsl_kernel_compiles() -> rnn_core::Result<()> {
    let device = match Device::env_request().and_then(|s| Device::parse(&s).ok()) {
        Some(d @ Device::Wgpu(_)) => d,
        _ => Device::Wgpu(0),
    };
    if let Err(e) = device.check_available() {
        assert!(!device.is_required_by_env(), "RNN_REQUIRE_GPU requires {device}: {e}");
        eprintln!("SKIPPED on {device}: {e}");
        return Ok(());
    }
    let Device::Wgpu(ordinal) = device else { unreachable!("a wgpu device was chosen above") };
    let variants = rnn_core::wgpu::kernel_variants(ordinal)?;
    assert!(variants.len() > 250, "only {} variants", variants.len());
    let mut failures = Vec::new();
    for (name, source) in &variants {
        if let Err(e) = rnn_core::wgpu::compile_user_kernel(ordinal, source, "main") {
            failures.push(format!("{name}: {e}"));
        }
    }
    eprintln!("{} WGSL variants compiled on {device}", variants.len() - failures.len());
    assert!(failures.is_empty(), "{} failed, first: {:#?}", failures.len(), &failures[..failures.len().min(3)]);
    Ok(())
}
