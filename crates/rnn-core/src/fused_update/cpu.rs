//! The fused updates on the CPU: each parameter and its states are rewritten in their own
//! buffers, element by element, in one pass (f32, f64). The formulas here are the reference
//! of the CUDA and WGSL kernels (`rnn-kernels/{cuda/optim.cu, wgsl/optim.wgsl}`).

use num_traits::Float;
use rayon::prelude::*;

use super::{internal, AdagradHyper, AdamHyper, ParamUpdate, RmsPropHyper, SgdHyper, UpdateRule};
use crate::cpu::parallel::par_work;
use crate::cpu::simd::update_slices;
use crate::storage::Storage;
use crate::{DType, Result, Tensor, WithDType};

/// Units of `cpu::parallel::PAR_WORK` (an add) per element. An Adam element moves 28
/// bytes against an add's 12 and adds a square root and a division. Under load from other
/// processes the 2-thread loop was measured 2.5x slower than the 1-thread loop on the
/// 400K-element weight of a 784-512-256-10 MLP, so tensors of that size stay serial here,
/// as adds of that size do.
const ADAPTIVE_WORK: usize = 4;
const SGD_WORK: usize = 2;

/// Updates each parameter of the group in turn (checked by `super::step`).
pub(super) fn step(rule: &UpdateRule, updates: &[ParamUpdate], dtype: DType) -> Result<()> {
    for u in updates {
        match dtype {
            DType::F32 => one::<f32>(rule, u)?,
            DType::F64 => one::<f64>(rule, u)?,
            _ => return Err(internal("no CPU loop for this dtype")),
        }
    }
    Ok(())
}

fn one<T: WithDType + Float>(rule: &UpdateRule, u: &ParamUpdate) -> Result<()> {
    let (p, g) = (u.param, u.grad);
    match (rule, u.states) {
        (UpdateRule::Sgd(hp), [None, ..]) => sgd_plain::<T>(p, g, hp),
        (UpdateRule::Sgd(hp), [Some(b), ..]) => sgd_momentum::<T>(p, g, b, hp),
        (UpdateRule::Adam(hp), [Some(m), Some(v), max_v]) => adam::<T>(p, g, [m, v], max_v, hp),
        (UpdateRule::RmsProp(hp), [Some(sq), ga, buf]) => rmsprop::<T>(p, g, sq, ga, buf, hp),
        (UpdateRule::Adagrad(hp), [Some(sum), ..]) => adagrad::<T>(p, g, sum, hp),
        _ => Err(internal("states do not match the rule")),
    }
}

fn sgd_plain<T: WithDType + Float>(param: &Tensor, grad: &Tensor, hp: &SgdHyper) -> Result<()> {
    let (lr, wd) = (T::from_f64(hp.lr), T::from_f64(hp.weight_decay));
    let decay = hp.weight_decay != 0.0;
    in_place::<T, 0>(param, grad, [], SGD_WORK, move |p, g, _| {
        let d = if decay { g + p * wd } else { g };
        p - d * lr
    })
}

fn sgd_momentum<T: WithDType + Float>(param: &Tensor, grad: &Tensor, buf: &Tensor, hp: &SgdHyper) -> Result<()> {
    let (lr, wd, mu) = (T::from_f64(hp.lr), T::from_f64(hp.weight_decay), T::from_f64(hp.momentum));
    let keep = T::from_f64(1.0 - hp.dampening);
    let (decay, first, nesterov) = (hp.weight_decay != 0.0, hp.first_step, hp.nesterov);
    in_place::<T, 1>(param, grad, [buf], SGD_WORK, move |p, g, [b]| {
        let d = if decay { g + p * wd } else { g };
        *b = if first { d } else { *b * mu + d * keep };
        let d = if nesterov { d + *b * mu } else { *b };
        p - d * lr
    })
}

/// Adam or AdamW; `max_v` is AMSGrad's running maximum of `v`.
fn adam<T: WithDType + Float>(
    param: &Tensor,
    grad: &Tensor,
    [m, v]: [&Tensor; 2],
    max_v: Option<&Tensor>,
    hp: &AdamHyper,
) -> Result<()> {
    let (step_size, bc2_sqrt) = (T::from_f64(hp.step_size()), T::from_f64(hp.bias_correction2_sqrt()));
    let (w1, b2, w2) = (T::from_f64(1.0 - hp.beta1), T::from_f64(hp.beta2), T::from_f64(1.0 - hp.beta2));
    let (eps, wd, shrink) =
        (T::from_f64(hp.eps), T::from_f64(hp.weight_decay), T::from_f64(1.0 - hp.lr * hp.weight_decay));
    let (decay, decoupled) = (hp.weight_decay != 0.0, hp.decoupled);
    // Weight decay, then the moment updates; returns the parameter, decayed for AdamW.
    let moments = move |p: T, g: T, m: &mut T, v: &mut T| {
        let (p, g) = match (decay, decoupled) {
            (true, true) => (p * shrink, g),
            (true, false) => (p, g + p * wd),
            _ => (p, g),
        };
        *m = *m + (g - *m) * w1;
        *v = *v * b2 + g * g * w2;
        p
    };
    let apply = move |p: T, m: T, v_hat: T| p - m / (v_hat.sqrt() / bc2_sqrt + eps) * step_size;
    match max_v {
        None => in_place::<T, 2>(param, grad, [m, v], ADAPTIVE_WORK, move |p, g, [m, v]| {
            let p = moments(p, g, m, v);
            apply(p, *m, *v)
        }),
        Some(max_v) => in_place::<T, 3>(param, grad, [m, v, max_v], ADAPTIVE_WORK, move |p, g, [m, v, vmax]| {
            let p = moments(p, g, m, v);
            // NaN-propagating, as torch.maximum (f32::max would keep the old maximum).
            *vmax = if Float::is_nan(*vmax) || *vmax >= *v { *vmax } else { *v };
            apply(p, *m, *vmax)
        }),
    }
}

/// RMSprop; `grad_avg` is present when centered, `buf` with momentum.
fn rmsprop<T: WithDType + Float>(
    param: &Tensor,
    grad: &Tensor,
    sq: &Tensor,
    grad_avg: Option<&Tensor>,
    buf: Option<&Tensor>,
    hp: &RmsPropHyper,
) -> Result<()> {
    let (lr, alpha, w, eps) =
        (T::from_f64(hp.lr), T::from_f64(hp.alpha), T::from_f64(1.0 - hp.alpha), T::from_f64(hp.eps));
    let (wd, decay, mu) = (T::from_f64(hp.weight_decay), hp.weight_decay != 0.0, T::from_f64(hp.momentum));
    let decayed = move |p: T, g: T| if decay { g + p * wd } else { g };
    let square = move |sq: &mut T, g: T| *sq = *sq * alpha + g * g * w;
    let centered = move |sq: T, ga: &mut T, g: T| {
        *ga = *ga + (g - *ga) * w;
        (sq - *ga * *ga).sqrt() + eps
    };
    match (grad_avg, buf) {
        (None, None) => in_place::<T, 1>(param, grad, [sq], ADAPTIVE_WORK, move |p, g, [sq]| {
            let g = decayed(p, g);
            square(sq, g);
            p - g / (sq.sqrt() + eps) * lr
        }),
        (None, Some(buf)) => in_place::<T, 2>(param, grad, [sq, buf], ADAPTIVE_WORK, move |p, g, [sq, b]| {
            let g = decayed(p, g);
            square(sq, g);
            *b = *b * mu + g / (sq.sqrt() + eps);
            p - *b * lr
        }),
        (Some(ga), None) => in_place::<T, 2>(param, grad, [sq, ga], ADAPTIVE_WORK, move |p, g, [sq, ga]| {
            let g = decayed(p, g);
            square(sq, g);
            p - g / centered(*sq, ga, g) * lr
        }),
        (Some(ga), Some(buf)) => {
            in_place::<T, 3>(param, grad, [sq, ga, buf], ADAPTIVE_WORK, move |p, g, [sq, ga, b]| {
                let g = decayed(p, g);
                square(sq, g);
                *b = *b * mu + g / centered(*sq, ga, g);
                p - *b * lr
            })
        }
    }
}

fn adagrad<T: WithDType + Float>(param: &Tensor, grad: &Tensor, sum: &Tensor, hp: &AdagradHyper) -> Result<()> {
    let (lr, eps, wd, decay) =
        (T::from_f64(hp.lr), T::from_f64(hp.eps), T::from_f64(hp.weight_decay), hp.weight_decay != 0.0);
    in_place::<T, 1>(param, grad, [sum], ADAPTIVE_WORK, move |p, g, [s]| {
        let g = if decay { g + p * wd } else { g };
        *s = *s + g * g;
        p - g / (s.sqrt() + eps) * lr
    })
}

/// The contiguous elements of a CPU tensor of dtype `T`, for writing.
fn slice_mut<'a, T: WithDType>(storage: &'a mut Storage, t: &Tensor) -> Result<&'a mut [T]> {
    let (start, end) = t.layout().contiguous_offsets().ok_or_else(|| internal("a strided operand"))?;
    let Storage::Cpu(cpu) = storage else { return Err(internal("an operand off the CPU")) };
    T::slice_of_mut(cpu).and_then(|s| s.get_mut(start..end)).ok_or_else(|| internal("an operand of another dtype"))
}

fn slice<'a, T: WithDType>(storage: &'a Storage, t: &Tensor) -> Result<&'a [T]> {
    let (start, end) = t.layout().contiguous_offsets().ok_or_else(|| internal("a strided operand"))?;
    let Storage::Cpu(cpu) = storage else { return Err(internal("an operand off the CPU")) };
    T::slice_of(cpu).and_then(|s| s.get(start..end)).ok_or_else(|| internal("an operand of another dtype"))
}

/// Runs `update(p, g, state) -> new p` on every element, writing the parameter and its `K`
/// states in their own buffers. The operands are distinct storages (`can_fuse`), so holding
/// a write lock on each and a read lock on the gradient cannot deadlock.
fn in_place<T, const K: usize>(
    param: &Tensor,
    grad: &Tensor,
    states: [&Tensor; K],
    work: usize,
    update: impl Fn(T, T, &mut [T; K]) -> T + Sync,
) -> Result<()>
where
    T: WithDType + Float,
{
    let mut p_guard = param.storage_mut();
    let g_guard = grad.storage();
    let mut s_guards: Vec<_> = states.iter().map(|t| t.storage_mut()).collect();
    let p = slice_mut::<T>(&mut p_guard, param)?;
    let g = slice::<T>(&g_guard, grad)?;
    let s: Vec<&mut [T]> =
        s_guards.iter_mut().zip(states).map(|(guard, t)| slice_mut::<T>(guard, t)).collect::<Result<_>>()?;
    let s: [&mut [T]; K] = s.try_into().map_err(|_| internal("state count"))?;
    run_chunks(p, g, s, work, &update);
    Ok(())
}

/// Splits the work in chunks run on the thread pool when the job is large enough (see
/// `cpu::parallel::par_fill`, whose policy this follows for several outputs at once).
fn run_chunks<T, const K: usize, F>(p: &mut [T], g: &[T], s: [&mut [T]; K], work: usize, f: &F)
where
    T: Copy + Send + Sync,
    F: Fn(T, T, &mut [T; K]) -> T + Sync,
{
    let n = p.len();
    let threads = rayon::current_num_threads().max(1);
    let par_work = par_work();
    if n.saturating_mul(work) < par_work || threads == 1 {
        update_slices(p, g, s, f);
        return;
    }
    let chunk = n.div_ceil(threads * 4).max(par_work / 4 / work).max(1);
    let mut state_chunks = s.map(|s| s.chunks_mut(chunk));
    let jobs: Vec<_> = p
        .chunks_mut(chunk)
        .zip(g.chunks(chunk))
        .map(|(p, g)| (p, g, state_chunks.each_mut().map(|c| c.next().unwrap_or_default())))
        .collect();
    jobs.into_par_iter().for_each(|(p, g, s)| update_slices(p, g, s, f));
}
