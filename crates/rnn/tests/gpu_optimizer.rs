//! `GpuOptimizer` on every device: after several steps its parameters equal those of
//! `rnn::nn::optim`'s optimizers over the same data on the CPU; state is kept per parameter
//! tensor; bad input gives a clear error. `DeviceManager` lists what it picks from.

use rnn::gpu::{DeviceManager, GpuOptimizer, GpuTensor};
use rnn::nn::optim::{Adam, AdamConfig, Optimizer, OptimizerConfig, SgdConfig};
use rnn::{DType, Device, Error, GradStore, Result, Tensor};
use rnn_testutil::*;

const STEPS: u64 = 4;

/// Gradient number `step` of parameter `which`: fresh random values, the same on every device.
fn grad(which: u64, step: u64, shape: &[usize]) -> Result<Tensor> {
    rand64(100 * which + step, shape)?.to_dtype(DType::F32)
}

/// The values of an f32 tensor, flattened.
fn flat(t: &Tensor) -> Result<Vec<f32>> {
    t.flatten_all()?.to_vec1::<f32>()
}

/// Two parameters updated alternately for `STEPS` steps by `GpuOptimizer` on `device`, and
/// by one optimizer of `rnn::nn::optim` (built from `config`) over both on the CPU.
fn run_both(device: Device, config: OptimizerConfig) -> Result<(Vec<GpuTensor>, Vec<Tensor>)> {
    let shapes: [&[usize]; 2] = [&[33, 17], &[300]];
    let mut optimizer = GpuOptimizer::new(device).with_optimizer(config.clone()).build()?;
    let reference =
        vec![random(1, shapes[0], DType::F32, Device::Cpu)?, random(2, shapes[1], DType::F32, Device::Cpu)?];
    let mut params = Vec::new();
    for (shape, initial) in shapes.iter().zip(&reference) {
        params.push(optimizer.create_tensor_with_data(shape, &flat(initial)?)?);
    }
    let mut cpu_optimizer = config.build(reference.clone())?;
    for step in 0..STEPS {
        let mut cpu_grads = GradStore::new();
        for (i, p) in params.iter_mut().enumerate() {
            let g = grad(i as u64, step, shapes[i])?;
            optimizer.step(p, &optimizer.create_tensor_with_data(shapes[i], &flat(&g)?)?)?;
            cpu_grads.insert(&reference[i], g);
        }
        cpu_optimizer.step(&cpu_grads)?;
    }
    assert_eq!(optimizer.tracked_parameters(), 2);
    Ok((params, reference))
}

fn matches_rnn_nn(device: Device) -> Result<()> {
    let configs = [
        OptimizerConfig::adam(1e-2),
        OptimizerConfig::Adam(AdamConfig { lr: 3e-3, weight_decay: 0.1, amsgrad: true, ..Default::default() }),
        OptimizerConfig::adamw(1e-2),
        OptimizerConfig::sgd_momentum(0.1, 0.9),
        OptimizerConfig::rmsprop(1e-2),
    ];
    for config in configs {
        let (ours, want) = run_both(device, config.clone())?;
        for (p, w) in ours.iter().zip(&want) {
            assert_close_on(&format!("{} after {STEPS} steps", config.name()), p.tensor(), w, 1e-5);
        }
        // The parameters moved: a comparison of two unchanged tensors proves nothing.
        let initial = random(1, &[33, 17], DType::F32, Device::Cpu)?;
        assert!(max_abs_diff(&values(ours[0].tensor()), &values(&initial)) > 1e-3, "{} did not move", config.name());
    }
    Ok(())
}
test_device!(matches_rnn_nn_test, matches_rnn_nn);

/// The seed's shape of use: `Adam::new(lr)` as a config, `create_tensor`, `step`, read back.
fn seed_usage(device: Device) -> Result<()> {
    let mut optimizer = GpuOptimizer::new(device).with_optimizer(AdamConfig::with_lr(1e-3)).build()?;
    let mut params = optimizer.create_tensor(&[64, 8])?;
    let data: Vec<f32> = (0..64 * 8).map(|i| (i as f32 - 200.0) / 100.0).collect();
    // The seed makes the gradient with `create_tensor_from_slice`, which is 1-D: give it the
    // parameter's shape (a 1-D gradient for a 2-D parameter is a shape error).
    let flat_grads = optimizer.create_tensor_from_slice(&data)?;
    let grads = optimizer.create_tensor_with_data(&[64, 8], &data)?;
    let err = optimizer.step(&mut params, &flat_grads).unwrap_err();
    assert!(matches!(err, Error::ShapeMismatch { .. }), "{err}");
    for _ in 0..3 {
        optimizer.step(&mut params, &grads)?;
    }
    let reference = Tensor::zeros((64, 8), DType::F32, Device::Cpu)?;
    let mut adam = Adam::new(vec![reference.clone()], AdamConfig::with_lr(1e-3))?;
    let mut store = GradStore::new();
    store.insert(&reference, Tensor::from_slice(&data, (64, 8), Device::Cpu)?);
    (0..3).try_for_each(|_| adam.step(&store))?;
    assert_close_on("seed usage", params.tensor(), &reference, 1e-5);
    assert_eq!(params.to_array()?.shape(), &[64, 8]);
    optimizer.clear_cache()?;
    optimizer.synchronize()
}
test_device!(seed_usage_test, seed_usage);

fn learning_rate_and_forget(device: Device) -> Result<()> {
    let sgd = SgdConfig::with_lr(0.5);
    let mut optimizer = GpuOptimizer::new(device).with_optimizer(sgd).build()?;
    let mut p = optimizer.create_tensor(&[4])?;
    let g = optimizer.create_tensor_from_slice(&[1.0f32, 2.0, -1.0, 0.0])?;
    optimizer.step(&mut p, &g)?;
    optimizer.set_learning_rate(0.25);
    assert_eq!(optimizer.learning_rate(), 0.25);
    optimizer.step(&mut p, &g)?;
    assert_eq!(p.tensor().to_vec1::<f32>()?, vec![-0.75, -1.5, 0.75, 0.0]);
    assert!(optimizer.forget(&p));
    assert!(!optimizer.forget(&p));
    assert_eq!(optimizer.tracked_parameters(), 0);
    // Sgd is stateless, so a separate check that forgetting resets Adam's step count:
    let mut adam = GpuOptimizer::new(device).with_optimizer(AdamConfig::with_lr(0.1)).build()?;
    let mut q = adam.create_tensor(&[2])?;
    let h = adam.create_tensor_from_slice(&[1.0f32, -1.0])?;
    adam.step(&mut q, &h)?;
    adam.forget(&q);
    adam.step(&mut q, &h)?;
    // Two first steps of Adam move by lr each (bias correction makes a first step exactly lr).
    let q = q.tensor().to_vec1::<f32>()?;
    assert!((q[0] + 0.2).abs() < 1e-6 && (q[1] - 0.2).abs() < 1e-6, "{q:?}");
    Ok(())
}
test_device!(learning_rate_and_forget_test, learning_rate_and_forget);

fn errors_are_clear(device: Device) -> Result<()> {
    let mut optimizer = GpuOptimizer::new(device).build()?;
    let mut p = optimizer.create_tensor(&[3, 4])?;
    let wrong_shape = optimizer.create_tensor(&[4, 3])?;
    let err = optimizer.step(&mut p, &wrong_shape).unwrap_err();
    assert!(matches!(err, Error::ShapeMismatch { op: "GpuOptimizer::step", .. }), "{err}");
    assert!(err.to_string().contains("[3, 4]") && err.to_string().contains("[4, 3]"), "{err}");

    let other = other_dtype(device, DType::F32);
    let wrong_dtype = GpuTensor::from_tensor(Tensor::zeros((3, 4), other, device)?);
    if let Ok(wrong_dtype) = wrong_dtype {
        let err = optimizer.step(&mut p, &wrong_dtype).unwrap_err();
        assert!(matches!(err, Error::DTypeMismatch { op: "GpuOptimizer::step", .. }), "{err}");
    }
    let ints = GpuTensor::from_tensor(Tensor::zeros((3, 4), DType::U32, device)?);
    if let Ok(mut ints) = ints {
        let err = optimizer.step(&mut ints, &p).unwrap_err();
        assert!(matches!(err, Error::UnsupportedDType { dtype: DType::U32, .. }), "{err}");
    }
    if !device.is_cpu() {
        // A gradient on the CPU for a GPU parameter, and a CPU optimizer given GPU tensors.
        let cpu_grad = GpuOptimizer::new(Device::Cpu).build()?.create_tensor(&[3, 4])?;
        let err = optimizer.step(&mut p, &cpu_grad).unwrap_err();
        assert!(matches!(err, Error::DeviceMismatch { lhs, rhs: Device::Cpu, .. } if lhs == device), "{err}");
        let mut cpu_optimizer = GpuOptimizer::new(Device::Cpu).build()?;
        let same = p.clone();
        let err = cpu_optimizer.step(&mut p, &same).unwrap_err();
        assert!(matches!(err, Error::DeviceMismatch { lhs: Device::Cpu, .. }), "{err}");
    }
    assert_eq!(optimizer.tracked_parameters(), 0, "a failed step keeps no state");
    let bad_lr = GpuOptimizer::new(device).with_optimizer(OptimizerConfig::adam(-1.0)).build();
    expect_err(bad_lr, "lr must be a finite number >= 0");
    Ok(())
}
test_device!(errors_are_clear_test, errors_are_clear);

#[test]
fn unavailable_device_is_an_error() {
    let err = GpuOptimizer::new(Device::Cuda(97)).build().err().expect("no CUDA device 97");
    assert!(matches!(err, Error::DeviceNotAvailable(_) | Error::NotCompiledWith("cuda")), "{err}");
}

#[test]
fn device_manager_lists_the_best_device_first_and_the_cpu_last() -> Result<()> {
    let manager = DeviceManager::new()?;
    let best = manager.select_best_device()?;
    assert_eq!(best, Device::best()?);
    let devices = manager.available_devices();
    assert_eq!(devices.first(), Some(&best));
    assert_eq!(devices.last(), Some(&Device::Cpu));
    assert!(devices.iter().all(|d| d.is_available()));
    assert_eq!(manager.device_name(Device::Cpu), "CPU");
    for gpu in manager.gpus() {
        assert!(manager.device_name(gpu.device).contains(&gpu.name));
    }
    Ok(())
}

/// Replica `i`'s gradients for `params` (the shapes of `shapes`): fresh random values.
fn replica_grads(seed: u64, params: &[Tensor]) -> Result<GradStore> {
    let mut grads = GradStore::new();
    for (j, p) in params.iter().enumerate() {
        grads.insert(p, grad(seed, j as u64, p.dims())?.to_device(p.device())?);
    }
    Ok(grads)
}

/// What every replica must hold after one step: Adam on CPU copies stepped with the mean of
/// `count` gradient sets (seeds `0..count`).
fn stepped_with_mean(initial: &[Tensor], count: u64) -> Result<Vec<Tensor>> {
    let reference: Vec<Tensor> =
        initial.iter().map(|t| t.deep_copy().map(|c| c.requires_grad())).collect::<Result<_>>()?;
    let mut mean = GradStore::new();
    for (j, p) in reference.iter().enumerate() {
        let mut sum = Tensor::zeros(p.dims(), DType::F32, Device::Cpu)?;
        for seed in 0..count {
            sum = sum.add(&grad(seed, j as u64, p.dims())?)?;
        }
        mean.insert(p, sum.mul_scalar(1.0 / count as f64)?);
    }
    OptimizerConfig::adam(1e-2).build(reference.clone())?.step(&mean)?;
    Ok(reference)
}

/// The optirs-gpu guide's multi-GPU snippet (without its `.await`, see docs/seed-api.md) on
/// this machine's devices, and two CPU replicas.
#[test]
fn multi_gpu_optimizer_steps_every_replica_with_the_mean() -> Result<()> {
    use rnn::gpu::{DataParallelStrategy, MultiGpuOptimizer};
    let initial = vec![random(1, &[5, 4], DType::F32, Device::Cpu)?, random(2, &[4], DType::F32, Device::Cpu)?];
    let device_manager = DeviceManager::new()?;
    for devices in [device_manager.available_devices(), vec![Device::Cpu, Device::Cpu]] {
        let model_parameters: Vec<Tensor> =
            initial.iter().map(|t| t.deep_copy().map(|c| c.requires_grad())).collect::<Result<_>>()?;
        let mut multi_gpu = MultiGpuOptimizer::new()
            .with_strategy(DataParallelStrategy::AllReduce)
            .with_devices(&devices)
            .with_optimizer(OptimizerConfig::adam(1e-2))
            .build()?;
        multi_gpu.distribute_model(&model_parameters)?;
        let gradients: Vec<GradStore> =
            (0..devices.len()).map(|i| replica_grads(i as u64, multi_gpu.replica(i))).collect::<Result<_>>()?;
        multi_gpu.step_synchronized(&gradients)?;
        let want = stepped_with_mean(&initial, devices.len() as u64)?;
        for (i, device) in devices.iter().enumerate() {
            for (p, w) in multi_gpu.replica(i).iter().zip(&want) {
                assert_close_on(&format!("replica {i} on {device}"), p, w, 1e-5);
            }
        }
        // The CPU replica is the given tensors, updated in place.
        let cpu = devices.iter().position(|d| d.is_cpu()).expect("the CPU is listed");
        assert!(multi_gpu.replica(cpu)[0].same_storage(&model_parameters[0]));
        assert!(max_abs_diff(&values(&model_parameters[0]), &values(&initial[0])) > 1e-3, "no step was taken");
    }
    Ok(())
}

#[test]
fn multi_gpu_optimizer_averages_across_a_process_group() -> Result<()> {
    use rnn::distributed::ProcessGroup;
    use rnn::gpu::MultiGpuOptimizer;
    let initial = vec![random(3, &[6, 3], DType::F32, Device::Cpu)?];
    // Two ranks with two CPU replicas each: every replica steps with the mean of four.
    let groups = ProcessGroup::threads(2)?;
    let results: Vec<Result<Vec<Tensor>>> = std::thread::scope(|s| {
        let handles: Vec<_> = groups
            .into_iter()
            .map(|group| {
                s.spawn(|| {
                    let rank = group.rank() as u64;
                    let mut multi = MultiGpuOptimizer::new()
                        .with_devices(&[Device::Cpu, Device::Cpu])
                        .with_optimizer(OptimizerConfig::adam(1e-2))
                        .with_process_group(group)
                        .build()?;
                    // Rank 1 starts from other values: distribute_model gives it rank 0's.
                    let start = if rank == 0 { initial[0].deep_copy()? } else { initial[0].ones_like()? };
                    multi.distribute_model(&[start.requires_grad()])?;
                    let grads = (0..2)
                        .map(|i| replica_grads(2 * rank + i, multi.replica(i as usize)))
                        .collect::<Result<Vec<_>>>()?;
                    multi.step_synchronized(&grads)?;
                    Ok(vec![multi.replica(0)[0].clone(), multi.replica(1)[0].clone()])
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().expect("rank panicked")).collect()
    });
    let want = stepped_with_mean(&initial, 4)?;
    for result in results {
        for p in result? {
            assert_close_on("replica", &p, &want[0], 1e-5);
        }
    }
    Ok(())
}

#[test]
fn multi_gpu_optimizer_errors_are_clear() -> Result<()> {
    use rnn::gpu::MultiGpuOptimizer;
    assert!(MultiGpuOptimizer::new().build().unwrap_err().to_string().contains("with_devices"));
    let mut multi = MultiGpuOptimizer::new().with_devices(&[Device::Cpu, Device::Cpu]).build()?;
    let err = multi.step_synchronized(&[]).unwrap_err().to_string();
    assert!(err.contains("distribute_model"), "{err}");
    multi.distribute_model(&[Tensor::zeros(3, DType::F32, Device::Cpu)?.requires_grad()])?;
    let one = replica_grads(0, multi.replica(0))?;
    let err = multi.step_synchronized(std::slice::from_ref(&one)).unwrap_err().to_string();
    assert!(err.contains("1 gradient sets for 2 replicas"), "{err}");
    let err = multi.step_synchronized(&[one, GradStore::new()]).unwrap_err().to_string();
    assert!(err.contains("replica 1 has no gradient"), "{err}");
    let ints = Tensor::zeros(3, DType::U32, Device::Cpu)?;
    assert!(multi.distribute_model(&[ints]).is_err(), "integer parameters");
    Ok(())
}
