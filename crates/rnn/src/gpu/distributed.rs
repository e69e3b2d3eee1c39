//! `DistributedTraining`: the seed API's multi-GPU trainer. One worker thread per device,
//! each holding a copy of the network and training on its shard of every batch; the
//! workers form a thread group (`rnn::distributed::ProcessGroup::threads`) and average
//! their gradients after every backward pass, so they all take the same steps (see
//! `rnn::train::distributed`). Across processes and machines, use `mpirun` with
//! `TrainingConfig::distributed` instead (docs/distributed.md).

use std::borrow::Borrow;

use rnn_core::{Device, Error, Result, Tensor};
use rnn_dist::ProcessGroup;
use rnn_train::checkpoint::{apply, Checkpoint};
use rnn_train::distributed::DataParallel;
use rnn_train::{History, IntoTensor, Network, TrainingConfig};

use super::GpuDevice;

const NEW: &str = "DistributedTraining::new";

/// Data-parallel training of one network on several devices of this machine.
///
/// ```
/// use rnn::{Device, DistributedTraining, TrainingConfig};
/// # fn main() -> rnn::Result<()> {
/// # let network = rnn::Network::with_input_size(784)?
/// #     .add_layer(rnn::LayerBuilder::dense(10).activation(rnn::ActivationFunction::Softmax))
/// #     .build()?;
/// # let data = rnn::train::data::synthetic_digits(64, 1)?;
/// // Two workers sharing the CPU (with GPUs: `DistributedTraining::new(gpu_devices)?`).
/// let trainer = DistributedTraining::on_devices(&[Device::Cpu, Device::Cpu])?
///     .with_config(TrainingConfig { max_epochs: 1, batch_size: 16, verbose: false, ..Default::default() });
/// let history = trainer.train(&network, &data.inputs, &data.labels)?; // `network` gets the weights
/// assert_eq!(history.train_loss.len(), 1);
/// # Ok(()) }
/// ```
#[derive(Clone, Debug)]
pub struct DistributedTraining {
    devices: Vec<GpuDevice>,
    workers: Vec<Device>,
    config: TrainingConfig,
}

impl DistributedTraining {
    /// One worker on each of these GPUs, from `GpuManager::devices()`: at least one, each
    /// once. Trains with `TrainingConfig::default()` (10 epochs, batches of 32 per GPU) until
    /// `with_config` says otherwise.
    pub fn new<I>(devices: I) -> Result<DistributedTraining>
    where
        I: IntoIterator,
        I::Item: Borrow<GpuDevice>,
    {
        let devices: Vec<GpuDevice> = devices.into_iter().map(|d| d.borrow().clone()).collect();
        for (i, d) in devices.iter().enumerate() {
            if devices[..i].iter().any(|e| e.device == d.device) {
                let msg = format!("{} ({}) is given twice", d.name, d.device);
                return Err(Error::invalid(NEW, msg));
            }
        }
        let workers: Vec<Device> = devices.iter().map(|d| d.device).collect();
        Ok(DistributedTraining { devices, ..Self::on_devices(&workers)? })
    }

    /// One worker per entry of `devices`, which may name the CPU several times (workers
    /// that share its cores, each with its own share of every batch). A GPU given twice is
    /// an error: one worker per GPU.
    pub fn on_devices(devices: &[Device]) -> Result<DistributedTraining> {
        if devices.is_empty() {
            return Err(Error::invalid(NEW, "no device given"));
        }
        for (i, d) in devices.iter().enumerate() {
            d.check_available()?;
            if !d.is_cpu() && devices[..i].contains(d) {
                return Err(Error::invalid(NEW, format!("{d} is given twice")));
            }
        }
        let config = TrainingConfig::default();
        Ok(DistributedTraining { devices: Vec::new(), workers: devices.to_vec(), config })
    }

    /// The settings each worker trains with (`batch_size` is per worker; `device` and
    /// `distributed` are set by `train`).
    pub fn with_config(mut self, config: TrainingConfig) -> DistributedTraining {
        self.config = config;
        self
    }

    /// The GPUs given to `new` (empty after `on_devices`).
    pub fn devices(&self) -> &[GpuDevice] {
        &self.devices
    }

    /// The device of each worker, worker (rank) 0 first.
    pub fn workers(&self) -> &[Device] {
        &self.workers
    }

    /// Trains a copy of `network` on every worker, then puts worker 0's trained weights (all
    /// workers end with the same) into `network`, and returns worker 0's history (losses and
    /// accuracies are over all workers' samples). When a worker fails, the others stop at
    /// their next gradient exchange, `network` is left as it was, and the error is returned
    /// (the workers' errors together when they differ).
    pub fn train(&self, network: &Network, data: &impl IntoTensor, labels: &impl IntoTensor) -> Result<History> {
        let (x, y) = (data.to_tensor()?, labels.to_tensor()?);
        let copies = self.workers.iter().map(|d| network.copy_to(*d)).collect::<Result<Vec<_>>>()?;
        let groups = ProcessGroup::threads(self.workers.len())?;
        let results: Vec<Result<(Network, History)>> = std::thread::scope(|s| {
            let handles: Vec<_> = copies
                .into_iter()
                .zip(groups)
                .zip(&self.workers)
                .map(|((net, group), device)| s.spawn(|| self.worker(net, group, *device, &x, &y)))
                .collect();
            handles
                .into_iter()
                .map(|h| h.join().unwrap_or_else(|_| Err(Error::Msg("a worker panicked".into()))))
                .collect()
        });
        let first = one_result(results)?;
        let (trained, history) = first;
        apply(&network.state(), &Checkpoint { tensors: trained.state(), metadata: Default::default() })?;
        Ok(history)
    }

    fn worker(
        &self,
        mut net: Network,
        group: ProcessGroup,
        device: Device,
        x: &Tensor,
        y: &Tensor,
    ) -> Result<(Network, History)> {
        let config =
            TrainingConfig { device: Some(device), distributed: Some(DataParallel::new(group)), ..self.config.clone() };
        let history = net.train(x, y, &config)?;
        Ok((net, history))
    }
}

/// Worker 0's result, or the workers' errors: one as it is, several in one message.
fn one_result(results: Vec<Result<(Network, History)>>) -> Result<(Network, History)> {
    let mut errors: Vec<(usize, Error)> = Vec::new();
    let mut first = None;
    for (rank, result) in results.into_iter().enumerate() {
        match result {
            Ok(done) if first.is_none() => first = Some(done),
            Ok(_) => {}
            Err(e) => errors.push((rank, e)),
        }
    }
    let distinct = |a: &Error, b: &Error| a.to_string() != b.to_string();
    match errors.len() {
        0 => first.ok_or_else(|| Error::invalid(NEW, "no worker")),
        _ if errors.iter().all(|(_, e)| !distinct(e, &errors[0].1)) => Err(errors.swap_remove(0).1),
        n => {
            let each: Vec<String> = errors.iter().map(|(rank, e)| format!("worker {rank}: {e}")).collect();
            Err(Error::Msg(format!("{n} workers failed: {}", each.join("; "))))
        }
    }
}
