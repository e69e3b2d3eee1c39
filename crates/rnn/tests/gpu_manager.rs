//! GpuManager lists real GPUs only; a software wgpu adapter (llvmpipe / lavapipe) appears
//! only when `RNN_GPU_DEVICE` asks for it. One test, because it sets a process-wide variable.

use rnn::{Device, GpuDeviceType, GpuManager};

#[test]
fn software_adapters_are_listed_only_when_asked_for() -> rnn::Result<()> {
    std::env::remove_var("RNN_GPU_DEVICE");
    let adapters = rnn::wgpu_adapters();
    let manager = GpuManager::new();
    for gpu in manager.devices() {
        if let Device::Wgpu(i) = gpu.device {
            assert!(!adapters[i].is_software, "{} listed as a GPU", gpu.name);
        }
    }
    assert_eq!(GpuManager::is_gpu_available(), !manager.devices().is_empty());
    if let Device::Wgpu(i) = Device::best()? {
        assert!(!adapters[i].is_software, "best() picked the software adapter {}", adapters[i].name);
    }
    assert!(manager.create_context(manager.devices().len()).is_err(), "an id past the list");

    let Some(software) = adapters.iter().find(|a| a.is_software) else {
        eprintln!("SKIPPED: no software adapter on this machine");
        return Ok(());
    };
    std::env::set_var("RNN_GPU_DEVICE", format!("wgpu:{}", software.ordinal));
    let manager = GpuManager::new();
    let gpu = manager.devices().iter().find(|g| g.device == Device::Wgpu(software.ordinal));
    let gpu = gpu.expect("the requested software adapter is listed");
    assert_eq!(gpu.device_type, GpuDeviceType::from_wgpu_backend(&software.backend));
    assert_eq!(GpuDeviceType::of(gpu.device), gpu.device_type);
    if software.backend == "Vulkan" {
        assert_eq!(gpu.device_type, GpuDeviceType::Vulkan);
    }
    assert_eq!((gpu.name.as_str(), gpu.backend.as_str()), (software.name.as_str(), software.backend.as_str()));
    assert_eq!(Device::best()?, Device::Wgpu(software.ordinal));
    let ctx = manager.create_context(gpu.id)?;
    let x = rnn::Tensor::ones(256, rnn::DType::F32, ctx.device())?;
    let stats = ctx.memory_stats();
    assert!(stats.allocated >= 1024, "{stats:?}");
    assert_eq!(stats.total, 0, "wgpu reports no memory size");
    drop(x);
    ctx.synchronize()?;
    std::env::remove_var("RNN_GPU_DEVICE");
    Ok(())
}
