//! Gradient buckets: the gradients of a step averaged over the ranks in a few large
//! all_reduce calls, each started as soon as its gradients are ready during backward, so
//! that communication overlaps the rest of the backward pass.
//!
//! The averaged gradients of CPU parameters are views of their bucket's buffer (PyTorch's
//! `gradient_as_bucket_view`): nothing is copied back after the all_reduce. The next step
//! takes the buffer back once the optimizer has dropped those views.

use std::collections::HashMap;
use std::sync::Mutex;

use rnn_core::{DType, Device, Error, GradStore, Result, Tensor, TensorId};
use rnn_dist::{ProcessGroup, ReduceOp, Work};

/// The default bucket size, PyTorch DDP's (`bucket_cap_mb = 25`).
pub const DEFAULT_BUCKET_BYTES: usize = 25 << 20;

/// One parameter's place in a bucket.
struct Member {
    param: usize,
    offset: usize,
}

/// Parameters of one dtype whose gradients travel together.
struct Bucket {
    dtype: DType,
    members: Vec<Member>,
    len: usize,
}

/// Which bucket each parameter's gradient goes to. Buckets are filled in the reverse of the
/// parameters' order, the order in which backward finishes them (the last layers first), and
/// launched in their own order, which is the same on every rank.
pub struct GradBuckets {
    group: ProcessGroup,
    params: Vec<Tensor>,
    buckets: Vec<Bucket>,
    /// Parameter id to (bucket, member).
    slots: HashMap<TensorId, (usize, usize)>,
    /// Each bucket's averaged values of the last step, as a flat CPU tensor that the
    /// gradients handed out view. Its buffer becomes the next step's bucket when no view is
    /// left: a fresh multi-megabyte buffer every step costs its page faults again (measured:
    /// a third of a small MLP's step).
    spare: Mutex<Vec<Option<Tensor>>>,
}

impl GradBuckets {
    /// Buckets of at most `bucket_bytes` (a larger parameter gets a bucket of its own) over
    /// `params`, which must be f32 or f64.
    pub fn new(group: ProcessGroup, params: Vec<Tensor>, bucket_bytes: usize) -> Result<GradBuckets> {
        if bucket_bytes == 0 {
            return Err(Error::invalid("GradBuckets", "bucket_bytes must be at least 1"));
        }
        if params.is_empty() {
            return Err(Error::invalid("GradBuckets", "the model has no parameters to average"));
        }
        let mut buckets: Vec<Bucket> = Vec::new();
        let mut slots = HashMap::new();
        for (i, p) in params.iter().enumerate().rev() {
            if !matches!(p.dtype(), DType::F32 | DType::F64) {
                let hint = ": data-parallel training averages f32 and f64 gradients";
                return Err(Error::UnsupportedDType { op: "GradBuckets", dtype: p.dtype(), hint });
            }
            let bytes = p.elem_count() * p.dtype().size_in_bytes();
            let fits = buckets
                .last()
                .is_some_and(|b| b.dtype == p.dtype() && (b.len * b.dtype.size_in_bytes() + bytes <= bucket_bytes));
            if !fits {
                buckets.push(Bucket { dtype: p.dtype(), members: Vec::new(), len: 0 });
            }
            let (index, bucket) = (buckets.len() - 1, buckets.last_mut().expect("a bucket was just pushed"));
            slots.insert(p.id(), (index, bucket.members.len()));
            bucket.members.push(Member { param: i, offset: bucket.len });
            bucket.len += p.elem_count();
        }
        let spare = Mutex::new(buckets.iter().map(|_| None).collect());
        Ok(GradBuckets { group, params, buckets, slots, spare })
    }

    pub fn group(&self) -> &ProcessGroup {
        &self.group
    }

    /// The parameters, in the order they were given.
    pub fn params(&self) -> &[Tensor] {
        &self.params
    }

    pub fn num_buckets(&self) -> usize {
        self.buckets.len()
    }

    /// Starts the averaging of one step. `extras` (say, the step's loss) travel in the last
    /// bucket and come back averaged from [`Reduction::finish`].
    pub fn start(&self, extras: &[f64]) -> Reduction<'_> {
        let last = self.buckets.len().saturating_sub(1);
        let mut spare = self.spare.lock().unwrap_or_else(|e| e.into_inner());
        let fills = self
            .buckets
            .iter()
            .enumerate()
            .map(|(i, b)| {
                let len = b.len + if i == last { extras.len() } else { 0 };
                // Stale values of the last step are overwritten by `ready`, or zeroed at
                // launch for parameters that get no gradient.
                let mut values = match spare[i].take().and_then(Values::reclaim) {
                    Some(v) if v.len() == len => v,
                    _ => Values::zeros(b.dtype, len),
                };
                if i == last {
                    values.write_f64(b.len, extras);
                }
                Fill { values: Some(values), missing: b.members.len(), work: None }
            })
            .collect();
        Reduction {
            layout: self,
            fills,
            next_launch: 0,
            had_grad: vec![false; self.params.len()],
            extras: extras.len(),
        }
    }

    /// The mean over ranks of `grads` (gradients of `params()`, all computed), and of
    /// `extras`: the whole reduction at once, for gradients computed without the hook.
    pub fn average(&self, grads: &GradStore, extras: &[f64]) -> Result<(GradStore, Vec<f64>)> {
        let mut reduction = self.start(extras);
        for p in self.params.iter().rev() {
            if let Some(g) = grads.get(p) {
                reduction.ready(p, g)?;
            }
        }
        reduction.finish()
    }
}

/// A bucket's host values.
enum Values {
    F32(Vec<f32>),
    F64(Vec<f64>),
}

impl Values {
    fn len(&self) -> usize {
        match self {
            Values::F32(v) => v.len(),
            Values::F64(v) => v.len(),
        }
    }

    fn zeros(dtype: DType, len: usize) -> Values {
        match dtype {
            DType::F64 => Values::F64(vec![0.0; len]),
            _ => Values::F32(vec![0.0; len]),
        }
    }

    /// The buffer of a bucket's flat tensor once nothing else views it.
    fn reclaim(flat: Tensor) -> Option<Values> {
        match flat.dtype() {
            DType::F64 => flat.try_into_vec().ok().map(Values::F64),
            _ => flat.try_into_vec().ok().map(Values::F32),
        }
    }

    /// Copies `grad` (of the bucket's dtype) to `offset`: straight from a contiguous CPU
    /// gradient's storage.
    fn write_tensor(&mut self, offset: usize, grad: &Tensor) -> Result<()> {
        let n = grad.elem_count();
        match self {
            Values::F32(v) => grad.with_host_slice(|g: &[f32]| v[offset..offset + n].copy_from_slice(g)),
            Values::F64(v) => grad.with_host_slice(|g: &[f64]| v[offset..offset + n].copy_from_slice(g)),
        }
    }

    fn zero(&mut self, offset: usize, len: usize) {
        match self {
            Values::F32(v) => v[offset..offset + len].fill(0.0),
            Values::F64(v) => v[offset..offset + len].fill(0.0),
        }
    }

    fn write_f64(&mut self, offset: usize, values: &[f64]) {
        match self {
            Values::F32(v) => v[offset..].iter_mut().zip(values).for_each(|(d, s)| *d = *s as f32),
            Values::F64(v) => v[offset..].copy_from_slice(values),
        }
    }

    fn launch(self, group: &ProcessGroup) -> Pending {
        match self {
            Values::F32(v) => Pending::F32(group.all_reduce_vec_async(v, ReduceOp::Mean)),
            Values::F64(v) => Pending::F64(group.all_reduce_vec_async(v, ReduceOp::Mean)),
        }
    }
}

/// A bucket's all_reduce under way.
enum Pending {
    F32(Work<Vec<f32>>),
    F64(Work<Vec<f64>>),
}

impl Pending {
    fn wait(self) -> Result<Values> {
        Ok(match self {
            Pending::F32(w) => Values::F32(w.wait()?),
            Pending::F64(w) => Values::F64(w.wait()?),
        })
    }
}

struct Fill {
    /// The values, until the bucket is launched.
    values: Option<Values>,
    /// Gradients not yet written.
    missing: usize,
    work: Option<Pending>,
}

/// The averaging of one step's gradients, fed by the backward hook
/// (`Tensor::backward_with_hook`): `ready` for each gradient, then `finish`.
pub struct Reduction<'a> {
    layout: &'a GradBuckets,
    fills: Vec<Fill>,
    /// Buckets are launched in order (every rank must issue the same collectives in the
    /// same order), each once it and all before it are complete.
    next_launch: usize,
    had_grad: Vec<bool>,
    extras: usize,
}

impl Reduction<'_> {
    /// Takes the final gradient of `param` (tensors that are not parameters are ignored) and
    /// launches every bucket that is now complete.
    pub fn ready(&mut self, param: &Tensor, grad: &Tensor) -> Result<()> {
        let Some(&(b, m)) = self.layout.slots.get(&param.id()) else { return Ok(()) };
        let member = &self.layout.buckets[b].members[m];
        if grad.dtype() != param.dtype() || grad.shape() != param.shape() {
            let msg = format!(
                "a {} gradient of shape {:?} for a {} parameter of shape {:?}",
                grad.dtype(),
                grad.dims(),
                param.dtype(),
                param.dims()
            );
            return Err(Error::invalid("GradBuckets", msg));
        }
        let fill = &mut self.fills[b];
        let values = fill.values.as_mut().ok_or_else(|| Error::invalid("GradBuckets", "gradient given twice"))?;
        if self.had_grad[member.param] {
            return Err(Error::invalid("GradBuckets", "gradient given twice"));
        }
        values.write_tensor(member.offset, grad)?;
        self.had_grad[member.param] = true;
        fill.missing -= 1;
        self.launch_complete(false);
        Ok(())
    }

    /// Launches buckets in order from `next_launch`: those complete, or all when `all`
    /// (parameters without a gradient count as zeros there).
    fn launch_complete(&mut self, all: bool) {
        while let Some(fill) = self.fills.get_mut(self.next_launch) {
            if fill.missing > 0 && !all {
                break;
            }
            if let Some(mut values) = fill.values.take() {
                if fill.missing > 0 {
                    zero_missing(self.layout, &self.had_grad, self.next_launch, &mut values);
                }
                fill.work = Some(values.launch(&self.layout.group));
            }
            self.next_launch += 1;
        }
    }

    /// Waits for every bucket and returns the averaged gradients (of the parameters that
    /// had one on this rank) on their parameters' devices, and the averaged extras. A CPU
    /// parameter's gradient is a view of its bucket's buffer; others are copied to their
    /// device. The gradients given to `ready` are no longer needed; the views keep the
    /// bucket's buffer from the next step until they are dropped.
    pub fn finish(mut self) -> Result<(GradStore, Vec<f64>)> {
        self.launch_complete(true);
        let layout = self.layout;
        let mut extras = Vec::new();
        let last = layout.buckets.len() - 1;
        let mut averaged = GradStore::new();
        for (i, (bucket, fill)) in layout.buckets.iter().zip(self.fills).enumerate() {
            let values = fill.work.ok_or_else(|| Error::Msg("a bucket was never launched".into()))?.wait()?;
            let flat = values.into_tensor()?;
            for member in bucket.members.iter().filter(|m| self.had_grad[m.param]) {
                let p = &layout.params[member.param];
                let view = flat.narrow(0, member.offset, p.elem_count())?.reshape(p.shape())?;
                let grad = if p.device() == Device::Cpu { view } else { view.to_device(p.device())? };
                averaged.insert(p, grad);
            }
            if i == last {
                extras = flat.narrow(0, bucket.len, self.extras)?.to_dtype(DType::F64)?.to_vec()?;
            }
            layout.spare.lock().unwrap_or_else(|e| e.into_inner())[i] = Some(flat);
        }
        Ok((averaged, extras))
    }
}

/// Zeroes the places of the members of bucket `b` that got no gradient: a parameter this
/// rank did not use contributes zeros to the mean.
fn zero_missing(layout: &GradBuckets, had_grad: &[bool], b: usize, values: &mut Values) {
    for member in layout.buckets[b].members.iter().filter(|m| !had_grad[m.param]) {
        values.zero(member.offset, layout.params[member.param].elem_count());
    }
}

impl Values {
    /// The whole bucket as a flat CPU tensor, without a copy: the averaged gradients view
    /// it, and the next step takes its buffer back (`reclaim`).
    fn into_tensor(self) -> Result<Tensor> {
        let n = self.len();
        match self {
            Values::F32(v) => Tensor::from_vec(v, n, Device::Cpu),
            Values::F64(v) => Tensor::from_vec(v, n, Device::Cpu),
        }
    }
}
