//! Every Rust snippet of the two GPU guides our users came from (the "GPU Acceleration
//! Support" guide and the "Real GPU Acceleration Implementation Status" page), compiled and
//! run. Each snippet is copied between `// guide:` and `// end guide` markers, with only the
//! names it leaves undefined declared before it (and `Ok(())` after it where it ends a
//! function); docs/seed-api.md lists every place where a snippet had to change and why.
//!
//! The snippets run on whatever this machine has: with no GPU they take their no-GPU branch
//! or return the error `create_context` gives, which the tests check; with a GPU (CI runs this
//! file a second time with `RNN_GPU_DEVICE=wgpu:0`, Mesa's software Vulkan adapter) they run
//! on it.

// The snippets declare variables they never use, `let mut` what they do not mutate, import
// more than they use and drop the profiler's results, as user code does.
// Clippy's advice (e.g. `let_and_return`, needless borrows) would change the guides' text.
#![allow(unused_variables, unused_mut, unused_imports, unused_must_use, clippy::all)]

#[path = "seed_snippets/guide.rs"]
mod guide_snippets;

use guide_snippets::*;
use rnn::gpu::{GpuContext, GpuDevice, GpuDeviceType, GpuManager, GpuTensor, KernelArg};
use rnn::{DType, Device, Error, Tensor};

/// A GPU context on the first listed GPU, or `None` after checking that the guide's
/// `create_context(0)` fails with a clear error.
fn context_or_checked_error() -> Option<(GpuManager, GpuContext)> {
    let manager = GpuManager::new();
    match manager.create_context(0) {
        Ok(context) => Some((manager, context)),
        Err(e) => {
            assert!(manager.devices().is_empty(), "a listed GPU failed to open: {e}");
            assert!(matches!(e, Error::DeviceNotAvailable(_)), "{e:?}");
            assert!(e.to_string().contains("no GPU with id 0"), "{e}");
            let required = Device::Wgpu(0).is_required_by_env() && Device::env_request().is_some();
            assert!(!required, "RNN_GPU_DEVICE names a wgpu adapter but no GPU is listed");
            None
        }
    }
}

#[test]
fn basic_gpu_usage_and_memory_stats() -> rnn::Result<()> {
    basic_gpu_usage()?;
    let stats = memory_management();
    match context_or_checked_error() {
        Some(_) => stats?,
        None => assert!(matches!(stats, Err(Error::DeviceNotAvailable(_))), "{stats:?}"),
    }
    not_detected();
    Ok(())
}

#[test]
fn networks_train_on_the_best_device() -> rnn::Result<()> {
    let history = gpu_accelerated_network()?;
    assert_eq!(history.train_loss.len(), 100);
    assert!(history.train_loss.iter().all(|l| l.is_finite()));
    let (gpu, cpu) = gpu_versus_cpu()?;
    assert_eq!(gpu.train_loss.len(), cpu.train_loss.len());
    complete_training::main()
}

#[test]
fn batch_sizes_by_device_type() {
    let gpu = |device_type, total_memory| GpuDevice {
        id: 0,
        name: "test".into(),
        device_type,
        backend: String::new(),
        total_memory,
        compute_capability: None,
        device: Device::Cpu,
    };
    assert_eq!(batch_size_for(&gpu(GpuDeviceType::Cuda, 16 << 30)), 256);
    assert_eq!(batch_size_for(&gpu(GpuDeviceType::Cuda, 4 << 30)), 128);
    assert_eq!(batch_size_for(&gpu(GpuDeviceType::OpenCL, 0)), 64);
    assert_eq!(batch_size_for(&gpu(GpuDeviceType::Metal, 0)), 32);
    assert_eq!(batch_size_for(&gpu(GpuDeviceType::Vulkan, 0)), 32);
    for device in GpuManager::new().devices() {
        assert!(batch_size_for(device) >= 32);
        assert_eq!(device.device_type, GpuDeviceType::of(device.device));
        assert_ne!(device.device_type, GpuDeviceType::Cpu, "GpuManager lists GPUs only");
    }
    assert_eq!(GpuDeviceType::of(Device::Cpu), GpuDeviceType::Cpu);
}

#[test]
fn memory_layouts_keep_the_values() -> rnn::Result<()> {
    let Some((manager, context)) = context_or_checked_error() else { return Ok(()) };
    let data = rnn::ndarray::Array2::from_shape_fn((3, 4), |(i, j)| (i * 4 + j) as f32);
    let tensor = memory_layout(data.clone(), 0, context)?;
    assert_eq!(tensor.to_cpu(context)?, data.clone().into_dyn());
    assert_eq!(tensor.memory_layout(), Some(rnn::MemoryLayout::RowMajor));
    Ok(())
}

/// The weights of a network, flattened in order.
fn weights(net: &rnn::Network) -> rnn::Result<Vec<f32>> {
    Ok(net.state().iter().map(|(_, t)| t.flatten_all()?.to_vec::<f32>()).collect::<rnn::Result<Vec<_>>>()?.concat())
}

#[test]
fn multi_gpu_training_trains_a_copy_per_device() -> rnn::Result<()> {
    multi_gpu()?; // Runs the guide's branch only with two GPUs or more.
    assert!(rnn::DistributedTraining::new(Vec::<&GpuDevice>::new()).is_err(), "no device");
    let config = |batch_size| rnn::TrainingConfig {
        batch_size,
        max_epochs: 2,
        optimizer: rnn::OptimizerConfig::sgd(0.1),
        learning_rate: 0.1,
        verbose: false,
        ..Default::default()
    };
    let data = rnn::train::data::synthetic_digits(64, 3)?;
    // Two workers sharing the CPU, batches of 8 each, take the steps of one with batches of 16.
    let network = small_network()?;
    let before = weights(&network)?;
    let trainer = rnn::DistributedTraining::on_devices(&[Device::Cpu, Device::Cpu])?.with_config(config(8));
    let history = trainer.train(&network, &data.inputs, &data.labels)?;
    let mut alone = small_network()?;
    let expected = alone.train(&data.inputs, &data.labels, &rnn::TrainingConfig { use_gpu: false, ..config(16) })?;
    let (got, want) = (weights(&network)?, weights(&alone)?);
    assert_ne!(got, before, "train puts the trained weights into the network");
    let err = got.iter().zip(&want).map(|(a, b)| (a - b).abs() / (1.0 + b.abs())).fold(0.0, f32::max);
    assert!(err < 1e-4, "two CPU workers vs one: {err:e}");
    assert!((history.train_loss[1] - expected.train_loss[1]).abs() < 1e-4, "{history:?} vs {expected:?}");
    // A worker error (here every worker's: a label out of range) is returned, the network kept.
    let bad = Tensor::from_vec(vec![99u32; 64], 64, Device::Cpu)?;
    let err = trainer.train(&network, &data.inputs, &bad).expect_err("labels out of range");
    assert!(err.to_string().contains("99"), "{err}");
    assert_eq!(weights(&network)?, got, "a failed run leaves the network as it was");
    // On this machine's GPUs (lavapipe in CI), one worker each.
    let devices = GpuManager::new().devices().to_vec();
    let Some(first) = devices.first() else { return Ok(()) };
    assert!(rnn::DistributedTraining::new([first, first]).is_err(), "a device twice");
    let network = small_network()?;
    rnn::DistributedTraining::new(&devices)?.with_config(config(16)).train(&network, &data.inputs, &data.labels)?;
    assert_ne!(weights(&network)?, before);
    Ok(())
}

#[test]
fn custom_kernels_compile_or_say_why_not() {
    let cuda = Device::Cuda(0).is_available();
    let result = custom_kernel();
    assert_eq!(result.is_ok(), cuda, "{result:?}");
    if let Err(e) = result {
        let why = e.to_string();
        assert!(why.contains("cuda") || why.contains("CUDA"), "{why}");
    }
    compilation_errors(); // prints the error
}

#[test]
fn profiler_records_regions_with_their_memory() -> rnn::Result<()> {
    let profiler = profiling(1u64 << 20, 0);
    let summary = profiler.summary();
    let names: Vec<_> = summary.iter().map(|s| (s.name.as_str(), s.max_memory_used)).collect();
    assert_eq!(names, [("matrix_multiply", 1u64 << 20), ("activation", 1u64 << 20)]);
    Ok(())
}

#[test]
fn status_page_snippets() -> rnn::Result<()> {
    let devices = device_detection();
    let Some((manager, context)) = context_or_checked_error() else {
        assert_eq!(devices, 0);
        return Ok(());
    };
    memory_operations(&manager, 0)?;

    // The matmul built-in on random inputs against a naive product on the CPU.
    let (m, k, n) = (7usize, 5usize, 9usize);
    let a: Vec<f32> = (0..m * k).map(|i| ((i * 37 % 23) as f32 - 11.0) / 7.0).collect();
    let b: Vec<f32> = (0..k * n).map(|i| ((i * 53 % 19) as f32 - 9.0) / 5.0).collect();
    let ga = Tensor::from_vec(a.clone(), m * k, context.device())?;
    let gb = Tensor::from_vec(b.clone(), k * n, context.device())?;
    let gc = Tensor::zeros(m * n, DType::F32, context.device())?;
    let dims = [m, n, k, k, n, n].map(|d| KernelArg::I32(d as i32));
    let mut args = vec![KernelArg::Input(&ga), KernelArg::Input(&gb), KernelArg::Output(&gc)];
    args.extend(dims);
    kernel_infrastructure(context, &args)?;
    let got = gc.to_vec::<f32>()?;
    for (i, row) in got.chunks(n).enumerate() {
        for (j, &value) in row.iter().enumerate() {
            let want: f32 = (0..k).map(|p| a[i * k + p] * b[p * n + j]).sum();
            assert!((value - want).abs() <= 1e-4 * (1.0 + want.abs()), "C[{i},{j}] = {value}, want {want}");
        }
    }

    // The training pipeline and the memory management method, on a linear model.
    let mut model = GpuModel::new(context, 6, 2)?;
    let data = rnn::ndarray::Array2::from_shape_fn((16, 6), |(i, j)| ((i * 3 + j) % 7) as f32 / 7.0);
    let targets = rnn::ndarray::Array2::from_shape_fn((16, 2), |(i, j)| ((i + j) % 3) as f32 / 3.0);
    let before = model.loss(&data, &targets)?;
    let gpu_data = GpuTensor::from_cpu(&data, context.id(), context)?;
    let gpu_targets = GpuTensor::from_cpu(&targets, context.id(), context)?;
    model.train_on_gpu(&gpu_data, &gpu_targets)?;
    model.train_with_data_on_gpu(data.clone(), targets.clone(), context.id(), context)?;
    let after = model.loss(&data, &targets)?;
    assert!(after < before, "training lowered the loss: {before} -> {after}");
    Ok(())
}

/// The features the guide's Cargo.toml lines name exist (their effect: docs/seed-api.md).
#[test]
fn the_guide_features_are_declared() {
    let manifest = include_str!("../Cargo.toml");
    let features = manifest.split("[features]").nth(1).expect("a [features] table");
    for name in ["gpu", "cuda", "opencl", "metal", "rocm", "wgpu"] {
        assert!(features.lines().any(|l| l.starts_with(&format!("{name} = "))), "feature {name}");
    }
}

/// The built-in kernels' CUDA C compiles with NVRTC where it is installed (builds with the
/// `cuda` feature; `RNN_REQUIRE_NVRTC=1` makes a missing NVRTC a failure).
#[cfg(feature = "cuda")]
#[test]
fn builtin_cuda_sources_compile() -> rnn::Result<()> {
    use rnn::gpu::CudaKernels;
    let required = std::env::var("RNN_REQUIRE_NVRTC").is_ok_and(|v| v == "1");
    if !required && rnn::cuda::nvrtc_version().is_err() {
        eprintln!("SKIPPED: NVRTC not found");
        return Ok(());
    }
    for name in CudaKernels::names() {
        let kernel = CudaKernels::kernel(name).expect("a built-in");
        let cubin = rnn::cuda::compile_cubin_for_check(&kernel.source, "sm_80")?;
        assert!(rnn::cuda::is_cubin(&cubin), "{name}");
    }
    Ok(())
}
