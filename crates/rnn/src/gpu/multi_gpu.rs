//! `MultiGpuOptimizer`: the optirs-gpu API for data-parallel optimization. One replica of
//! the parameters per device; `step_synchronized` averages the replicas' gradients (over
//! the devices of this process, then over the processes of a group by all_reduce) and steps
//! every replica with the same mean, so the replicas stay identical.
//!
//! As with `GpuOptimizer`, the calls return when the work is queued or done, so the seed's
//! `.await` is not needed.

use rnn_core::{no_grad, DType, Device, Error, GradStore, Result, Tensor};
use rnn_dist::ProcessGroup;
use rnn_nn::optim::{Optimizer, OptimizerConfig};
use rnn_train::distributed::{check_same_on_all_ranks, check_same_structure, GradBuckets, DEFAULT_BUCKET_BYTES};

/// How replicas are kept in step. All-reduce data parallelism (every replica holds all
/// parameters, gradients are averaged) is the one strategy.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum DataParallelStrategy {
    #[default]
    AllReduce,
}

/// Builds a [`MultiGpuOptimizer`].
#[derive(Clone, Debug)]
pub struct MultiGpuOptimizerBuilder {
    strategy: DataParallelStrategy,
    devices: Vec<Device>,
    config: OptimizerConfig,
    group: Option<ProcessGroup>,
    bucket_bytes: usize,
}

impl MultiGpuOptimizerBuilder {
    pub fn with_strategy(mut self, strategy: DataParallelStrategy) -> Self {
        self.strategy = strategy;
        self
    }

    /// The devices of this process to hold a replica each (e.g.
    /// `DeviceManager::available_devices()`); a GPU may appear once, the CPU several times.
    pub fn with_devices(mut self, devices: &[Device]) -> Self {
        self.devices = devices.to_vec();
        self
    }

    /// The optimizer each replica runs (Adam with PyTorch's defaults when not called).
    pub fn with_optimizer(mut self, config: impl Into<OptimizerConfig>) -> Self {
        self.config = config.into();
        self
    }

    /// Averages over the processes of `group` too (say `ProcessGroup::from_env()` under
    /// `mpirun`): each process gives its own devices, the same number in every process.
    pub fn with_process_group(mut self, group: ProcessGroup) -> Self {
        self.group = Some(group);
        self
    }

    /// Bytes per all_reduce call between processes (default 25 MiB).
    pub fn with_bucket_bytes(mut self, bytes: usize) -> Self {
        self.bucket_bytes = bytes;
        self
    }

    /// Checks the settings and the devices.
    pub fn build(self) -> Result<MultiGpuOptimizer> {
        const OP: &str = "MultiGpuOptimizer::build";
        self.config.validate()?;
        if self.devices.is_empty() {
            return Err(Error::invalid(OP, "no device: call with_devices"));
        }
        for (i, d) in self.devices.iter().enumerate() {
            d.check_available()?;
            if !d.is_cpu() && self.devices[..i].contains(d) {
                return Err(Error::invalid(OP, format!("{d} is given twice")));
            }
        }
        if self.bucket_bytes == 0 {
            return Err(Error::invalid(OP, "bucket_bytes must be at least 1"));
        }
        let group = self.group.unwrap_or_else(ProcessGroup::single);
        Ok(MultiGpuOptimizer {
            strategy: self.strategy,
            devices: self.devices,
            config: self.config,
            group,
            bucket_bytes: self.bucket_bytes,
            replicas: Vec::new(),
            buckets: None,
        })
    }
}

/// One device's copy of the parameters and its optimizer.
struct Replica {
    params: Vec<Tensor>,
    optimizer: Box<dyn Optimizer>,
}

/// Data-parallel optimization over the devices of this process (and the processes of a
/// group): `distribute_model`, then `step_synchronized` with each replica's gradients.
///
/// ```
/// use rnn::gpu::{DataParallelStrategy, DeviceManager, MultiGpuOptimizer};
/// use rnn::{DType, Device, GradStore, Tensor};
/// # fn main() -> rnn::Result<()> {
/// let mut multi = MultiGpuOptimizer::new()
///     .with_strategy(DataParallelStrategy::AllReduce)
///     .with_devices(&[Device::Cpu, Device::Cpu])
///     .build()?;
/// let w = Tensor::zeros((2, 3), DType::F32, Device::Cpu)?.requires_grad();
/// multi.distribute_model(&[w])?;
/// // Each replica's gradient (from its own batch); here made up.
/// let grads: Vec<GradStore> = (0..2)
///     .map(|i| {
///         let mut g = GradStore::new();
///         g.insert(&multi.replica(i)[0], Tensor::full(i as f64, (2, 3), DType::F32, Device::Cpu)?);
///         Ok(g)
///     })
///     .collect::<rnn::Result<_>>()?;
/// multi.step_synchronized(&grads)?; // both replicas step with the mean gradient
/// assert_eq!(multi.replica(0)[0].to_vec2::<f32>()?, multi.replica(1)[0].to_vec2::<f32>()?);
/// # Ok(()) }
/// ```
pub struct MultiGpuOptimizer {
    strategy: DataParallelStrategy,
    devices: Vec<Device>,
    config: OptimizerConfig,
    group: ProcessGroup,
    bucket_bytes: usize,
    replicas: Vec<Replica>,
    /// The all_reduce between processes (replica 0's parameters), once distributed.
    buckets: Option<GradBuckets>,
}

impl std::fmt::Debug for MultiGpuOptimizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MultiGpuOptimizer")
            .field("strategy", &self.strategy)
            .field("devices", &self.devices)
            .field("optimizer", &self.config.name())
            .field("group", &self.group)
            .field("replicas", &self.replicas.len())
            .finish()
    }
}

impl MultiGpuOptimizer {
    /// Starts building: `.with_strategy(..).with_devices(..).build()`.
    #[allow(clippy::new_ret_no_self)]
    pub fn new() -> MultiGpuOptimizerBuilder {
        MultiGpuOptimizerBuilder {
            strategy: DataParallelStrategy::AllReduce,
            devices: Vec::new(),
            config: OptimizerConfig::default(),
            group: None,
            bucket_bytes: DEFAULT_BUCKET_BYTES,
        }
    }

    pub fn strategy(&self) -> DataParallelStrategy {
        self.strategy
    }

    pub fn devices(&self) -> &[Device] {
        &self.devices
    }

    pub fn group(&self) -> &ProcessGroup {
        &self.group
    }

    /// Replica `i`'s parameters (on `devices()[i]`), in the order given to
    /// `distribute_model` (empty before it, or for an `i` past the devices).
    pub fn replica(&self, i: usize) -> &[Tensor] {
        self.replicas.get(i).map_or(&[], |r| &r.params)
    }

    /// Copies `params` (f32 or f64) to every device, after taking rank 0's values when the
    /// group has several processes (which must all give the same shapes and as many
    /// devices). Where `params` already live on a device, that device's replica is `params`
    /// themselves, updated in place by `step_synchronized`. Starts the optimizers afresh.
    pub fn distribute_model(&mut self, params: &[Tensor]) -> Result<()> {
        const OP: &str = "MultiGpuOptimizer::distribute_model";
        if let Some(p) = params.iter().find(|p| !matches!(p.dtype(), DType::F32 | DType::F64)) {
            return Err(Error::UnsupportedDType { op: OP, dtype: p.dtype(), hint: ": parameters must be f32 or f64" });
        }
        let named: Vec<(String, Tensor)> = params.iter().enumerate().map(|(i, p)| (i.to_string(), p.clone())).collect();
        check_same_structure(&self.group, OP, "parameters", &named)?;
        check_same_on_all_ranks(&self.group, OP, "the devices", &[("devices", self.devices.len() as f64)])?;
        rnn_train::distributed::broadcast_from_main(&self.group, params)?;
        let mut replicas = Vec::with_capacity(self.devices.len());
        for (i, device) in self.devices.iter().enumerate() {
            // The first replica on the device of `params` is `params` themselves.
            let first_here = self.devices.iter().position(|d| d == device) == Some(i);
            let own = |p: &Tensor| -> Result<Tensor> {
                match first_here && p.device() == *device && p.is_variable() {
                    true => Ok(p.clone()),
                    false => Ok(p.detach().to_device(*device)?.deep_copy()?.requires_grad()),
                }
            };
            let params = params.iter().map(own).collect::<Result<Vec<_>>>()?;
            let optimizer = self.config.build(params.clone())?;
            replicas.push(Replica { params, optimizer });
        }
        let first = replicas.first().map(|r| r.params.clone()).unwrap_or_default();
        self.buckets = Some(GradBuckets::new(self.group.clone(), first, self.bucket_bytes)?);
        self.replicas = replicas;
        Ok(())
    }

    /// One synchronized step: `gradients[i]` holds replica `i`'s gradients (keyed by
    /// `replica(i)`'s tensors, as `loss.backward()` on that replica gives them). Every
    /// replica, in every process, steps with the mean over all replicas.
    pub fn step_synchronized(&mut self, gradients: &[GradStore]) -> Result<()> {
        const OP: &str = "MultiGpuOptimizer::step_synchronized";
        let buckets = self.buckets.as_ref().ok_or_else(|| Error::invalid(OP, "call distribute_model first"))?;
        if gradients.len() != self.replicas.len() {
            let msg =
                format!("{} gradient sets for {} replicas (one per device)", gradients.len(), self.replicas.len());
            return Err(Error::invalid(OP, msg));
        }
        let local = self.local_mean(gradients)?;
        let (mean, _) = buckets.average(&local, &[])?;
        for replica in &mut self.replicas {
            let mut grads = GradStore::new();
            for (p, p0) in replica.params.iter().zip(buckets.params()) {
                if let Some(g) = mean.get(p0) {
                    grads.insert(p, g.to_device(p.device())?);
                }
            }
            replica.optimizer.step(&grads)?;
        }
        Ok(())
    }

    /// The mean of the replicas' gradients, keyed by replica 0's parameters, on its devices.
    fn local_mean(&self, gradients: &[GradStore]) -> Result<GradStore> {
        const OP: &str = "MultiGpuOptimizer::step_synchronized";
        let mut mean = GradStore::new();
        let first = &self.replicas[0].params;
        no_grad(|| {
            for (j, p0) in first.iter().enumerate() {
                let mut sum: Option<Tensor> = None;
                for (i, (replica, grads)) in self.replicas.iter().zip(gradients).enumerate() {
                    let p = &replica.params[j];
                    let g = grads.get(p).ok_or_else(|| {
                        Error::invalid(OP, format!("replica {i} has no gradient for parameter {j} ({:?})", p.dims()))
                    })?;
                    rnn_nn::optim::check_grad(OP, p, g)?;
                    let g = g.to_device(p0.device())?;
                    sum = Some(match sum {
                        Some(s) => s.add(&g)?,
                        None => g,
                    });
                }
                if let Some(s) = sum {
                    mean.insert(p0, s.mul_scalar(1.0 / self.replicas.len() as f64)?);
                }
            }
            Ok(mean)
        })
    }
}
