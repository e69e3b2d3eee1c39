//! Gradient buckets: the gradients of a step averaged over the ranks in a few large
//! all_reduce calls, each started as soon as its gradients are ready during backward, so
//! that communication overlaps the rest of the backward pass.

use std::collections::HashMap;

use rnn_core::{DType, Error, GradStore, Result, Tensor, TensorId};
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
        Ok(GradBuckets { group, params, buckets, slots })
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
        let fills = self
            .buckets
            .iter()
            .enumerate()
            .map(|(i, b)| {
                let len = b.len + if i == last { extras.len() } else { 0 };
                let mut values = Values::zeros(b.dtype, len);
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
    fn zeros(dtype: DType, len: usize) -> Values {
        match dtype {
            DType::F64 => Values::F64(vec![0.0; len]),
            _ => Values::F32(vec![0.0; len]),
        }
    }

    /// Copies `grad` (of the bucket's dtype) to `offset`.
    fn write_tensor(&mut self, offset: usize, grad: &Tensor) -> Result<()> {
        let flat = grad.flatten_all()?;
        match self {
            Values::F32(v) => v[offset..offset + flat.elem_count()].copy_from_slice(&flat.to_vec::<f32>()?),
            Values::F64(v) => v[offset..offset + flat.elem_count()].copy_from_slice(&flat.to_vec::<f64>()?),
        }
        Ok(())
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
            if let Some(values) = fill.values.take() {
                fill.work = Some(values.launch(&self.layout.group));
            }
            self.next_launch += 1;
        }
    }

    /// Waits for every bucket and returns the averaged gradients (of the parameters that
    /// had one on this rank) on their parameters' devices, and the averaged extras.
    pub fn finish(mut self) -> Result<(GradStore, Vec<f64>)> {
        self.launch_complete(true);
        let layout = self.layout;
        let mut grads = GradStore::new();
        let mut extras = Vec::new();
        let last = layout.buckets.len() - 1;
        for (i, (bucket, fill)) in layout.buckets.iter().zip(self.fills).enumerate() {
            let values = fill.work.ok_or_else(|| Error::Msg("a bucket was never launched".into()))?.wait()?;
            for member in &bucket.members {
                let p = &layout.params[member.param];
                if self.had_grad[member.param] {
                    grads.insert(p, values.tensor(member.offset, p)?);
                }
            }
            if i == last {
                extras = values.tail(bucket.len, self.extras);
            }
        }
        Ok((grads, extras))
    }
}

impl Values {
    /// The values at `offset` shaped as `like`, on its device.
    fn tensor(&self, offset: usize, like: &Tensor) -> Result<Tensor> {
        let n = like.elem_count();
        let t = match self {
            Values::F32(v) => {
                Tensor::from_vec(v[offset..offset + n].to_vec(), like.shape().clone(), rnn_core::Device::Cpu)?
            }
            Values::F64(v) => {
                Tensor::from_vec(v[offset..offset + n].to_vec(), like.shape().clone(), rnn_core::Device::Cpu)?
            }
        };
        t.to_device(like.device())
    }

    fn tail(&self, from: usize, count: usize) -> Vec<f64> {
        match self {
            Values::F32(v) => v[from..from + count].iter().map(|x| *x as f64).collect(),
            Values::F64(v) => v[from..from + count].to_vec(),
        }
    }
}
