//! `fused_update::step` on every device: it takes f32 groups everywhere (one launch on
//! CUDA, one dispatch per parameter on wgpu), updates parameters and states in place (the
//! same tensors, no new storage), agrees with the CPU loop, and declines what it cannot fuse.

use rnn_core::fused_update::{can_fuse, step, AdamHyper, ParamUpdate, SgdHyper, UpdateRule};
use rnn_core::{DType, Device, Result, Tensor};
use rnn_testutil::{max_abs_diff, rng, test_device, values};

fn adam(step: u64) -> UpdateRule {
    let (lr, beta1, beta2, eps, weight_decay) = (0.01, 0.9, 0.99, 1e-8, 0.1);
    UpdateRule::Adam(AdamHyper { lr, beta1, beta2, eps, weight_decay, decoupled: true, amsgrad: true, step })
}

/// SGD at learning rate 0.5, first step.
fn sgd(momentum: f64) -> UpdateRule {
    UpdateRule::Sgd(SgdHyper {
        lr: 0.5,
        momentum,
        dampening: 0.0,
        nesterov: false,
        weight_decay: 0.0,
        first_step: true,
    })
}

/// Ten AdamW + AMSGrad steps of three parameters on `device`; returns parameters and states.
fn run(device: Device, start: &[Tensor], grads: &[Vec<Tensor>]) -> Result<Vec<Vec<f64>>> {
    // Fresh storage: the updates are in place.
    let params: Vec<Tensor> = start.iter().map(|t| t.deep_copy()?.to_device(device)).collect::<Result<_>>()?;
    let states: Vec<[Tensor; 3]> =
        params.iter().map(|p| Ok([p.zeros_like()?, p.zeros_like()?, p.zeros_like()?])).collect::<Result<_>>()?;
    for (k, step_grads) in grads.iter().enumerate() {
        let g: Vec<Tensor> = step_grads.iter().map(|t| t.to_device(device)).collect::<Result<_>>()?;
        let updates: Vec<ParamUpdate> = (0..params.len())
            .map(|i| ParamUpdate {
                param: &params[i],
                grad: &g[i],
                states: [Some(&states[i][0]), Some(&states[i][1]), Some(&states[i][2])],
            })
            .collect();
        assert!(step(&adam(k as u64 + 1), &updates)?, "f32 on {device} is fused");
    }
    Ok(params.iter().chain(states.iter().flatten()).map(values).collect())
}

fn fused_step_matches_the_cpu(device: Device) -> Result<()> {
    let mut r = rng(3);
    let shapes: [&[usize]; 3] = [&[4, 700], &[1], &[0]];
    let mut randn = |s: &[usize]| Tensor::randn_with(&mut r, 0.0, 1.0, s, DType::F32, Device::Cpu);
    let start: Vec<Tensor> = shapes.iter().map(|s| randn(s)).collect::<Result<_>>()?;
    let grads: Vec<Vec<Tensor>> = (0..10).map(|_| shapes.iter().map(|s| randn(s)).collect()).collect::<Result<_>>()?;
    let (got, want) = (run(device, &start, &grads)?, run(Device::Cpu, &start, &grads)?);
    for (g, w) in got.iter().zip(&want) {
        assert!(max_abs_diff(g, w) <= 1e-5, "{device}: {}", max_abs_diff(g, w));
    }
    Ok(())
}
test_device!(fused_step_matches_the_cpu_test, fused_step_matches_the_cpu);

fn updates_in_place_and_declines_what_it_cannot_fuse(device: Device) -> Result<()> {
    let sgd = sgd(0.9);
    let p = Tensor::ones(3, DType::F32, device)?;
    let alias = p.detach();
    let (g, buf) = (Tensor::ones(3, DType::F32, device)?, Tensor::zeros(3, DType::F32, device)?);
    let update = ParamUpdate { param: &p, grad: &g, states: [Some(&buf), None, None] };
    assert!(step(&sgd, &[update])?);
    // The parameter and the buffer seen through other handles moved: written in place.
    assert_eq!((values(&alias), values(&buf)), (vec![0.5; 3], vec![1.0; 3]));
    // A missing momentum buffer, a gradient that is the parameter, a strided gradient.
    let missing = ParamUpdate { states: [None; 3], ..update };
    let same = ParamUpdate { grad: &p, ..update };
    let wide = Tensor::ones((3, 2), DType::F32, device)?;
    let strided_grad = wide.narrow(1, 0, 1)?.squeeze(1)?;
    let strided = ParamUpdate { grad: &strided_grad, ..update };
    for bad in [missing, same, strided] {
        assert!(!can_fuse(&sgd, &bad) && !step(&sgd, &[bad])?);
    }
    assert_eq!(values(&p), vec![0.5; 3], "a declined step moves nothing");
    Ok(())
}
test_device!(updates_in_place_and_declines_what_it_cannot_fuse_test, updates_in_place_and_declines_what_it_cannot_fuse);

/// Gradients that are views of one buffer (data-parallel gradient buckets) are fused on the
/// CPU, whose loop locks one update's buffers at a time, and give what separate gradients
/// give; GPU launches, which hold every buffer at once, decline them. A gradient that shares
/// a buffer another update writes is declined everywhere.
fn gradients_may_share_a_buffer_on_the_cpu(device: Device) -> Result<()> {
    let sgd = sgd(0.0);
    let bucket = Tensor::from_vec((1..=7).map(|i| i as f32).collect(), 7, device)?;
    let (ga, gb) = (bucket.narrow(0, 0, 3)?, bucket.narrow(0, 3, 4)?.reshape((2, 2))?);
    let (a, b) = (Tensor::ones(3, DType::F32, device)?, Tensor::ones((2, 2), DType::F32, device)?);
    let shared = [
        ParamUpdate { param: &a, grad: &ga, states: [None; 3] },
        ParamUpdate { param: &b, grad: &gb, states: [None; 3] },
    ];
    let fused = step(&sgd, &shared)?;
    assert_eq!(fused, device == Device::Cpu, "{device}");
    if fused {
        assert_eq!(values(&a), vec![0.5, 0.0, -0.5]);
        assert_eq!(values(&b), vec![-1.0, -1.5, -2.0, -2.5]);
    }
    let (c, gc) = (Tensor::ones(6, DType::F32, device)?, Tensor::ones(6, DType::F32, device)?);
    let d = Tensor::ones(3, DType::F32, device)?;
    let c_part = c.narrow(0, 0, 3)?;
    let clash = [
        ParamUpdate { param: &c, grad: &gc, states: [None; 3] },
        ParamUpdate { param: &d, grad: &c_part, states: [None; 3] },
    ];
    assert!(!step(&sgd, &clash)?, "{device}: a gradient in a buffer another update writes");
    assert_eq!((values(&c), values(&d)), (vec![1.0; 6], vec![1.0; 3]), "a declined step moves nothing");
    Ok(())
}
test_device!(gradients_may_share_a_buffer_on_the_cpu_test, gradients_may_share_a_buffer_on_the_cpu);
