//! The fused optimizer updates: the multi-tensor kernel on the emulator against the CPU's
//! in-place loop (`fused_update`), over many steps of random gradients, for every option
//! combination the kernel distinguishes, on tensors that are empty, single, inside one chunk,
//! cross chunk boundaries and (all together) cross the emulated grid.

use rand::Rng;

use super::{compare, rng, up, Tol};
use crate::cpu::CpuStorage;
use crate::emu::EmuStorage;
use crate::fused_update::{self, AdagradHyper, AdamHyper, ParamUpdate, RmsPropHyper, SgdHyper, UpdateRule};
use crate::gpu::optim::{run, Operands, CHUNK};
use crate::gpu::GpuStorage;
use crate::{DType, Device, Layout, Tensor};

const STEPS: u64 = 100;

/// Element counts: empty, one, small, one chunk, a chunk and one, several chunks.
const SIZES: [usize; 6] = [0, 1, 37, CHUNK, CHUNK + 1, 2 * CHUNK + 905];

/// The CUDA kernel's parameter buffers start at this offset (the address table's offsets).
const OFFSET: usize = 3;

/// The rule of update number `step` (from 1) of one configuration.
type RuleAt = Box<dyn Fn(u64) -> UpdateRule>;

/// Every option combination, named.
fn configs() -> Vec<(&'static str, RuleAt)> {
    let sgd = |momentum: f64, dampening: f64, nesterov: bool, weight_decay: f64| {
        move |step: u64| {
            let first_step = step == 1;
            UpdateRule::Sgd(SgdHyper { lr: 0.05, momentum, dampening, nesterov, weight_decay, first_step })
        }
    };
    let adam = |weight_decay: f64, decoupled: bool, amsgrad: bool| {
        move |step: u64| {
            let (lr, beta1, beta2, eps) = (0.01, 0.9, 0.99, 1e-8);
            UpdateRule::Adam(AdamHyper { lr, beta1, beta2, eps, weight_decay, decoupled, amsgrad, step })
        }
    };
    let rms = |momentum: f64, centered: bool| {
        move |_: u64| {
            let (lr, alpha, eps, weight_decay) = (0.01, 0.99, 1e-8, 0.01);
            UpdateRule::RmsProp(RmsPropHyper { lr, alpha, eps, weight_decay, momentum, centered })
        }
    };
    let adagrad = |step: u64| {
        let lr = 0.1 / (1.0 + (step - 1) as f64 * 0.1);
        UpdateRule::Adagrad(AdagradHyper { lr, eps: 1e-10, weight_decay: 0.01 })
    };
    vec![
        ("sgd", Box::new(sgd(0.0, 0.0, false, 0.0))),
        ("sgd decay", Box::new(sgd(0.0, 0.0, false, 0.1))),
        ("sgd momentum dampening decay", Box::new(sgd(0.9, 0.2, false, 0.1))),
        ("sgd nesterov", Box::new(sgd(0.9, 0.0, true, 0.0))),
        ("adam", Box::new(adam(0.0, false, false))),
        ("adam decay amsgrad", Box::new(adam(0.1, false, true))),
        ("adamw", Box::new(adam(0.1, true, false))),
        ("adamw amsgrad", Box::new(adam(0.1, true, true))),
        ("rmsprop", Box::new(rms(0.0, false))),
        ("rmsprop momentum", Box::new(rms(0.5, false))),
        ("rmsprop centered", Box::new(rms(0.0, true))),
        ("rmsprop centered momentum", Box::new(rms(0.5, true))),
        ("adagrad lr decay", Box::new(adagrad)),
    ]
}

fn uniform(rng: &mut rand::rngs::StdRng, dtype: DType, n: usize, range: std::ops::Range<f64>) -> CpuStorage {
    let v: Vec<f64> = (0..n).map(|_| rng.random_range(range.clone())).collect();
    CpuStorage::F64(v).to_dtype(&Layout::contiguous(n), dtype).expect("cast")
}

fn cpu_tensor(s: &CpuStorage) -> Tensor {
    Tensor::from_parts(crate::storage::Storage::Cpu(s.clone()), Layout::contiguous(s.len()), None)
}

/// `data` at `OFFSET` in a fresh emulator buffer.
fn up_at_offset(data: &CpuStorage) -> EmuStorage {
    let padding = CpuStorage::full(0.5, OFFSET, data.dtype()).expect("full");
    let parts = [(&padding, &Layout::contiguous(OFFSET)), (data, &Layout::contiguous(data.len()))];
    up(&crate::storage::BackendStorage::cat(&parts, 0).expect("cat"))
}

/// One configuration in one dtype: STEPS updates on the CPU and on the emulator, then the
/// parameters and every state compared.
fn check(name: &str, rule_at: &dyn Fn(u64) -> UpdateRule, dtype: DType, rng: &mut rand::rngs::StdRng) {
    let used = rule_at(1).states();
    let params: Vec<CpuStorage> = SIZES.iter().map(|&n| uniform(rng, dtype, n, -2.0..2.0)).collect();
    let initial_state = |n| CpuStorage::full(0.0, n, dtype).expect("full");
    let cpu_params: Vec<Tensor> = params.iter().map(cpu_tensor).collect();
    let cpu_states: Vec<[Option<Tensor>; 3]> =
        SIZES.iter().map(|&n| used.map(|u| u.then(|| cpu_tensor(&initial_state(n))))).collect();
    let emu_params: Vec<EmuStorage> = params.iter().map(up_at_offset).collect();
    let emu_states: Vec<[Option<EmuStorage>; 3]> =
        SIZES.iter().map(|&n| used.map(|u| u.then(|| up(&initial_state(n))))).collect();
    for step in 1..=STEPS {
        let rule = rule_at(step);
        let grads: Vec<CpuStorage> = SIZES.iter().map(|&n| uniform(rng, dtype, n, -1.0..1.0)).collect();
        let cpu_grads: Vec<Tensor> = grads.iter().map(cpu_tensor).collect();
        let updates: Vec<ParamUpdate> = (0..SIZES.len())
            .map(|i| ParamUpdate {
                param: &cpu_params[i],
                grad: &cpu_grads[i],
                states: [0, 1, 2].map(|k| cpu_states[i][k].as_ref()),
            })
            .collect();
        assert!(fused_update::step(&rule, &updates).expect("cpu step"), "{name}: the CPU loop applies");
        let emu_grads: Vec<EmuStorage> = grads.iter().map(up).collect();
        let group: Vec<Operands<EmuStorage>> = (0..SIZES.len())
            .map(|i| {
                let states = [0, 1, 2].map(|k| emu_states[i][k].as_ref().map(|s| (s, 0)));
                let [s0, s1, s2] = states;
                Operands {
                    n: SIZES[i],
                    buffers: [Some((&emu_params[i], OFFSET)), Some((&emu_grads[i], 0)), s0, s1, s2],
                }
            })
            .collect();
        run(&rule, dtype, 0, &group).unwrap_or_else(|e| panic!("{name} {dtype} step {step}: {e}"));
    }
    for (i, &n) in SIZES.iter().enumerate() {
        let what = format!("{name} {dtype} x {n} after {STEPS} steps");
        let got = emu_params[i].download().expect("download");
        let got = got.copy_strided(&Layout::contiguous_with_offset(vec![n], OFFSET)).map(|g| up(&g));
        compare(&format!("{what}: parameter"), got, cpu_params[i].storage().to_cpu(), Tol::of(dtype));
        for k in 0..3 {
            if let (Some(e), Some(c)) = (&emu_states[i][k], &cpu_states[i][k]) {
                compare(&format!("{what}: state {k}"), Ok(e.clone()), c.storage().to_cpu(), Tol::of(dtype));
            }
        }
    }
}

pub(super) fn optimizers() {
    let mut rng = rng(9);
    for dtype in [DType::F32, DType::F64] {
        for (name, rule_at) in configs() {
            check(name, rule_at.as_ref(), dtype, &mut rng);
        }
    }
    // The CPU entry point refuses what the kernels do not take (the tensor-op path runs then).
    let p = Tensor::zeros(4, DType::F16, Device::Cpu).expect("zeros");
    let update = ParamUpdate { param: &p, grad: &p.zeros_like().expect("zeros"), states: [None; 3] };
    let rule = configs()[0].1(1);
    assert!(!fused_update::can_fuse(&rule, &update), "f16 has no fused loop");
}
