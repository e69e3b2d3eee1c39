//! Fused optimizer updates for CPU tensors: one pass over parameter, gradient and optimizer
//! state, instead of about ten elementwise tensor ops that each allocate their result.
//!
//! Every `*_step` function returns `Ok(false)` when it does not apply (an operand not on the
//! CPU, a dtype other than f32 / f64, a non-contiguous or mismatched operand, operands
//! sharing storage), so that the caller falls back to its tensor-op path, which works on
//! every device and reports bad input. When it applies, the parameter is overwritten in
//! place (`Tensor::assign`, so it keeps its identity) and each state tensor is replaced by
//! its new value. The formulas follow PyTorch's single-tensor `torch.optim` code, operation
//! for operation, so that both paths give the same results up to rounding.

use std::mem::MaybeUninit;

use num_traits::Float;
use rayon::prelude::*;

use crate::cpu::parallel::PAR_WORK;
use crate::error::try_vec;
use crate::storage::Storage;
use crate::{DType, Device, Layout, Result, Tensor, WithDType};

/// Hyper-parameters of one SGD update (`torch.optim.SGD`).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct SgdHyper {
    pub lr: f64,
    pub momentum: f64,
    pub dampening: f64,
    pub nesterov: bool,
    pub weight_decay: f64,
    /// The momentum buffer's first update: it is set to the gradient rather than decayed.
    pub first_step: bool,
}

/// Hyper-parameters of one Adam / AdamW update (`torch.optim.Adam`, `AdamW`).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct AdamHyper {
    pub lr: f64,
    pub beta1: f64,
    pub beta2: f64,
    pub eps: f64,
    pub weight_decay: f64,
    /// AdamW: decay the parameter (`p *= 1 - lr * wd`) instead of adding `wd * p` to the gradient.
    pub decoupled: bool,
    /// The parameter's update count, starting at 1 (for the bias corrections).
    pub step: u64,
}

impl AdamHyper {
    /// `lr / (1 - beta1^step)`: the learning rate with the first moment's bias correction.
    pub fn step_size(&self) -> f64 {
        self.lr / (1.0 - self.beta1.powi(self.step_exponent()))
    }

    /// `sqrt(1 - beta2^step)`: the second moment's bias correction, on its square root.
    pub fn bias_correction2_sqrt(&self) -> f64 {
        (1.0 - self.beta2.powi(self.step_exponent())).sqrt()
    }

    /// The step as an exponent (saturating: beta^step is 0 long before it matters).
    fn step_exponent(&self) -> i32 {
        i32::try_from(self.step).unwrap_or(i32::MAX)
    }
}

/// Hyper-parameters of one RMSprop update (`torch.optim.RMSprop`).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RmsPropHyper {
    pub lr: f64,
    pub alpha: f64,
    pub eps: f64,
    pub weight_decay: f64,
    pub momentum: f64,
    pub centered: bool,
}

/// Hyper-parameters of one Adagrad update (`torch.optim.Adagrad`); `lr` is the decayed rate
/// `lr / (1 + (step - 1) * lr_decay)`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct AdagradHyper {
    pub lr: f64,
    pub eps: f64,
    pub weight_decay: f64,
}

/// Units of `cpu::parallel::PAR_WORK` (an add) per element. An Adam element moves 28
/// bytes against an add's 12 and adds a square root and a division. Under load from other
/// processes the 2-thread loop was measured 2.5x slower than the 1-thread loop on the
/// 400K-element weight of a 784-512-256-10 MLP, so tensors of that size stay serial here,
/// as adds of that size do.
const ADAPTIVE_WORK: usize = 4;
const SGD_WORK: usize = 2;

/// SGD with optional weight decay, momentum (buffer `momentum_buffer`, ignored as input on
/// the first step) and Nesterov momentum.
pub fn sgd_step(param: &Tensor, grad: &Tensor, momentum_buffer: Option<&mut Tensor>, hp: &SgdHyper) -> Result<bool> {
    match (param.dtype(), momentum_buffer) {
        (DType::F32, None) => sgd_plain::<f32>(param, grad, hp),
        (DType::F64, None) => sgd_plain::<f64>(param, grad, hp),
        (DType::F32, Some(buf)) => sgd_momentum::<f32>(param, grad, buf, hp),
        (DType::F64, Some(buf)) => sgd_momentum::<f64>(param, grad, buf, hp),
        _ => Ok(false),
    }
}

fn sgd_plain<T: WithDType + Float>(param: &Tensor, grad: &Tensor, hp: &SgdHyper) -> Result<bool> {
    let (lr, wd) = (T::from_f64(hp.lr), T::from_f64(hp.weight_decay));
    let decay = hp.weight_decay != 0.0;
    fused::<T, 0>(param, grad, [], SGD_WORK, move |p, g, _| {
        let d = if decay { g + p * wd } else { g };
        p - d * lr
    })
}

fn sgd_momentum<T: WithDType + Float>(param: &Tensor, grad: &Tensor, buf: &mut Tensor, hp: &SgdHyper) -> Result<bool> {
    let (lr, wd, mu) = (T::from_f64(hp.lr), T::from_f64(hp.weight_decay), T::from_f64(hp.momentum));
    let keep = T::from_f64(1.0 - hp.dampening);
    let (decay, first, nesterov) = (hp.weight_decay != 0.0, hp.first_step, hp.nesterov);
    fused::<T, 1>(param, grad, [buf], SGD_WORK, move |p, g, [b]| {
        let d = if decay { g + p * wd } else { g };
        *b = if first { d } else { *b * mu + d * keep };
        let d = if nesterov { d + *b * mu } else { *b };
        p - d * lr
    })
}

/// Adam or AdamW; `max_v` is AMSGrad's running maximum of `v`.
pub fn adam_step(
    param: &Tensor,
    grad: &Tensor,
    m: &mut Tensor,
    v: &mut Tensor,
    max_v: Option<&mut Tensor>,
    hp: &AdamHyper,
) -> Result<bool> {
    match param.dtype() {
        DType::F32 => adam_typed::<f32>(param, grad, m, v, max_v, hp),
        DType::F64 => adam_typed::<f64>(param, grad, m, v, max_v, hp),
        _ => Ok(false),
    }
}

fn adam_typed<T: WithDType + Float>(
    param: &Tensor,
    grad: &Tensor,
    m: &mut Tensor,
    v: &mut Tensor,
    max_v: Option<&mut Tensor>,
    hp: &AdamHyper,
) -> Result<bool> {
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
        None => fused::<T, 2>(param, grad, [m, v], ADAPTIVE_WORK, move |p, g, [m, v]| {
            let p = moments(p, g, m, v);
            apply(p, *m, *v)
        }),
        Some(max_v) => fused::<T, 3>(param, grad, [m, v, max_v], ADAPTIVE_WORK, move |p, g, [m, v, vmax]| {
            let p = moments(p, g, m, v);
            *vmax = vmax.max(*v);
            apply(p, *m, *vmax)
        }),
    }
}

/// RMSprop; `grad_avg` must be given exactly when `hp.centered`, `momentum_buffer` exactly
/// when `hp.momentum > 0`.
pub fn rmsprop_step(
    param: &Tensor,
    grad: &Tensor,
    square_avg: &mut Tensor,
    grad_avg: Option<&mut Tensor>,
    momentum_buffer: Option<&mut Tensor>,
    hp: &RmsPropHyper,
) -> Result<bool> {
    if grad_avg.is_some() != hp.centered || momentum_buffer.is_some() != (hp.momentum > 0.0) {
        return Ok(false);
    }
    match param.dtype() {
        DType::F32 => rmsprop_typed::<f32>(param, grad, square_avg, grad_avg, momentum_buffer, hp),
        DType::F64 => rmsprop_typed::<f64>(param, grad, square_avg, grad_avg, momentum_buffer, hp),
        _ => Ok(false),
    }
}

fn rmsprop_typed<T: WithDType + Float>(
    param: &Tensor,
    grad: &Tensor,
    sq: &mut Tensor,
    grad_avg: Option<&mut Tensor>,
    buf: Option<&mut Tensor>,
    hp: &RmsPropHyper,
) -> Result<bool> {
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
        (None, None) => fused::<T, 1>(param, grad, [sq], ADAPTIVE_WORK, move |p, g, [sq]| {
            let g = decayed(p, g);
            square(sq, g);
            p - g / (sq.sqrt() + eps) * lr
        }),
        (None, Some(buf)) => fused::<T, 2>(param, grad, [sq, buf], ADAPTIVE_WORK, move |p, g, [sq, b]| {
            let g = decayed(p, g);
            square(sq, g);
            *b = *b * mu + g / (sq.sqrt() + eps);
            p - *b * lr
        }),
        (Some(ga), None) => fused::<T, 2>(param, grad, [sq, ga], ADAPTIVE_WORK, move |p, g, [sq, ga]| {
            let g = decayed(p, g);
            square(sq, g);
            p - g / centered(*sq, ga, g) * lr
        }),
        (Some(ga), Some(buf)) => fused::<T, 3>(param, grad, [sq, ga, buf], ADAPTIVE_WORK, move |p, g, [sq, ga, b]| {
            let g = decayed(p, g);
            square(sq, g);
            *b = *b * mu + g / centered(*sq, ga, g);
            p - *b * lr
        }),
    }
}

/// Adagrad with the accumulated squared gradients in `sum`.
pub fn adagrad_step(param: &Tensor, grad: &Tensor, sum: &mut Tensor, hp: &AdagradHyper) -> Result<bool> {
    match param.dtype() {
        DType::F32 => adagrad_typed::<f32>(param, grad, sum, hp),
        DType::F64 => adagrad_typed::<f64>(param, grad, sum, hp),
        _ => Ok(false),
    }
}

fn adagrad_typed<T: WithDType + Float>(
    param: &Tensor,
    grad: &Tensor,
    sum: &mut Tensor,
    hp: &AdagradHyper,
) -> Result<bool> {
    let (lr, eps, wd, decay) =
        (T::from_f64(hp.lr), T::from_f64(hp.eps), T::from_f64(hp.weight_decay), hp.weight_decay != 0.0);
    fused::<T, 1>(param, grad, [sum], ADAPTIVE_WORK, move |p, g, [s]| {
        let g = if decay { g + p * wd } else { g };
        *s = *s + g * g;
        p - g / (s.sqrt() + eps) * lr
    })
}

/// Whether the fused loop can run: every operand a contiguous CPU tensor of dtype `T` with
/// the parameter's shape, and no two sharing storage (each is read while the others are).
fn applicable<T: WithDType>(operands: &[&Tensor]) -> bool {
    let Some(first) = operands.first() else { return false };
    let ok = |t: &&Tensor| {
        t.device() == Device::Cpu && t.dtype() == T::DTYPE && t.is_contiguous() && t.shape() == first.shape()
    };
    let distinct = operands.iter().enumerate().all(|(i, a)| operands[i + 1..].iter().all(|b| !a.same_storage(b)));
    operands.iter().all(ok) && distinct
}

/// The contiguous elements of a CPU tensor of dtype `T` (checked by `applicable`).
fn cpu_slice<'a, T: WithDType>(storage: &'a Storage, t: &Tensor) -> Option<&'a [T]> {
    let Storage::Cpu(cpu) = storage else { return None };
    let (start, end) = t.layout().contiguous_offsets()?;
    T::slice_of(cpu)?.get(start..end)
}

/// Runs `update(p, g, state) -> new p` on every element, where `state` holds the element's
/// `K` state values and is updated in place; then writes the new parameter into `param`
/// and replaces each state tensor by its new value.
fn fused<T, const K: usize>(
    param: &Tensor,
    grad: &Tensor,
    states: [&mut Tensor; K],
    work: usize,
    update: impl Fn(T, T, &mut [T; K]) -> T + Sync,
) -> Result<bool>
where
    T: WithDType + Float,
{
    let mut operands = vec![param, grad];
    operands.extend(states.iter().map(|t| &**t));
    if !applicable::<T>(&operands) {
        return Ok(false);
    }
    let n = param.elem_count();
    let mut p_out = try_vec::<T>(n)?;
    let mut s_out: Vec<Vec<T>> = (0..K).map(|_| try_vec::<T>(n)).collect::<Result<_>>()?;
    {
        let guards: Vec<_> = operands.iter().map(|t| t.storage()).collect();
        let slices: Option<Vec<&[T]>> = guards.iter().zip(&operands).map(|(s, t)| cpu_slice::<T>(s, t)).collect();
        let Some(slices) = slices else { return Ok(false) };
        let (p_in, rest) = slices.split_at(1);
        let (g_in, s_in) = rest.split_at(1);
        let s_in: [&[T]; K] = std::array::from_fn(|k| s_in[k]);
        let inputs = Inputs { p: p_in[0], g: g_in[0], s: s_in };
        // The outputs are written once each, so they are not zeroed first (that was a
        // fifth of the time of an Adam step).
        let mut spare = s_out.iter_mut().map(|v| &mut v.spare_capacity_mut()[..n]);
        let s_uninit: [&mut [MaybeUninit<T>]; K] = std::array::from_fn(|_| spare.next().unwrap_or_default());
        run_chunks(inputs, &mut p_out.spare_capacity_mut()[..n], s_uninit, work, &update);
    }
    // SAFETY: each vector has capacity >= n (`try_vec`), and `run_chunks` wrote elements
    // 0..n of every output: its chunks of the outputs cover 0..n, and `update_chunk`
    // writes every element of its chunk. A panic there would skip these lines.
    unsafe {
        p_out.set_len(n);
        s_out.iter_mut().for_each(|v| v.set_len(n));
    }
    param.assign(&cpu_tensor(p_out, param.shape().clone()))?;
    for (t, data) in states.into_iter().zip(s_out) {
        *t = cpu_tensor(data, t.shape().clone());
    }
    Ok(true)
}

fn cpu_tensor<T: WithDType>(data: Vec<T>, shape: crate::Shape) -> Tensor {
    Tensor::from_parts(Storage::Cpu(T::into_storage(data)), Layout::contiguous(shape), None)
}

/// The read-only operands of one fused loop.
#[derive(Clone, Copy)]
struct Inputs<'a, T, const K: usize> {
    p: &'a [T],
    g: &'a [T],
    s: [&'a [T]; K],
}

/// Splits the outputs in chunks run on the thread pool when the job is large enough (see
/// `cpu::parallel::par_fill`, whose policy this follows for several outputs at once).
fn run_chunks<T, const K: usize, F>(
    inputs: Inputs<'_, T, K>,
    p_out: &mut [MaybeUninit<T>],
    s_out: [&mut [MaybeUninit<T>]; K],
    work: usize,
    f: &F,
) where
    T: Copy + Send + Sync,
    F: Fn(T, T, &mut [T; K]) -> T + Sync,
{
    let n = p_out.len();
    let threads = rayon::current_num_threads().max(1);
    if n.saturating_mul(work) < PAR_WORK || threads == 1 {
        update_chunk(inputs, 0, p_out, s_out, f);
        return;
    }
    let chunk = n.div_ceil(threads * 4).max(PAR_WORK / 4 / work).max(1);
    let mut state_chunks = s_out.map(|s| s.chunks_mut(chunk));
    let jobs: Vec<_> = p_out
        .chunks_mut(chunk)
        .enumerate()
        .map(|(i, p)| (i * chunk, p, state_chunks.each_mut().map(|c| c.next().unwrap_or_default())))
        .collect();
    jobs.into_par_iter().for_each(|(start, p, s)| update_chunk(inputs, start, p, s, f));
}

/// The elementwise loop over elements `start..start + p_out.len()`.
#[inline(always)]
fn update_chunk<T: Copy, const K: usize, F: Fn(T, T, &mut [T; K]) -> T>(
    inputs: Inputs<'_, T, K>,
    start: usize,
    p_out: &mut [MaybeUninit<T>],
    s_out: [&mut [MaybeUninit<T>]; K],
    f: &F,
) {
    let n = p_out.len();
    let (p_in, g_in) = (&inputs.p[start..start + n], &inputs.g[start..start + n]);
    let s_in = inputs.s.map(|s| &s[start..start + n]);
    let mut s_out = s_out.map(|s| &mut s[..n]);
    for i in 0..n {
        let mut state: [T; K] = std::array::from_fn(|k| s_in[k][i]);
        p_out[i] = MaybeUninit::new(f(p_in[i], g_in[i], &mut state));
        for (out, value) in s_out.iter_mut().zip(state) {
            out[i] = MaybeUninit::new(value);
        }
    }
}
