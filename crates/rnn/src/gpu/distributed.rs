//! `DistributedTraining`: the seed API's multi-GPU trainer. Data-parallel training over
//! several GPUs is not implemented yet: the type exists so code written against the seed
//! compiles, checks its devices, and its `train` returns an error saying what to use instead.

use std::borrow::Borrow;

use rnn_core::{Error, Result};
use rnn_train::{History, IntoTensor, Network};

use super::GpuDevice;

/// What `train` answers until data-parallel training exists.
const NOT_IMPLEMENTED: &str = "multi-GPU data-parallel training is not implemented yet; train on one GPU \
     with `Network::train` (it picks the best device, or set `TrainingConfig::device`)";

/// A set of distinct GPUs to train one network on (see the module documentation: `train`
/// returns an error).
#[derive(Clone, Debug)]
pub struct DistributedTraining {
    devices: Vec<GpuDevice>,
}

impl DistributedTraining {
    /// The GPUs to train on, from `GpuManager::devices()`: at least one, each once.
    pub fn new<I>(devices: I) -> Result<DistributedTraining>
    where
        I: IntoIterator,
        I::Item: Borrow<GpuDevice>,
    {
        let devices: Vec<GpuDevice> = devices.into_iter().map(|d| d.borrow().clone()).collect();
        if devices.is_empty() {
            return Err(Error::invalid("DistributedTraining::new", "no GPU given"));
        }
        for (i, d) in devices.iter().enumerate() {
            if devices[..i].iter().any(|e| e.device == d.device) {
                let msg = format!("{} ({}) is given twice", d.name, d.device);
                return Err(Error::invalid("DistributedTraining::new", msg));
            }
        }
        Ok(DistributedTraining { devices })
    }

    pub fn devices(&self) -> &[GpuDevice] {
        &self.devices
    }

    /// Not implemented yet: always `Error::InvalidArgument` naming `Network::train` as the
    /// way to train (on one GPU).
    pub fn train(&self, network: &Network, data: &impl IntoTensor, labels: &impl IntoTensor) -> Result<History> {
        let _ = (network, data, labels);
        Err(Error::invalid("DistributedTraining::train", NOT_IMPLEMENTED))
    }
}
