//! Saving and loading a `Network` as safetensors. The file holds every parameter and buffer
//! (`layers.<i>.<name>`) plus, in its metadata, the architecture as JSON, so `Network::load`
//! can rebuild the model without the code that built it.

use std::collections::BTreeMap;
use std::path::Path;

use rnn_core::{Error, Result};
use serde::{Deserialize, Serialize};

use crate::checkpoint::{self, Checkpoint};
use crate::network::Network;
use crate::spec::{LayerBuilder, LossFunction};

const FORMAT_KEY: &str = "rnn.format";
const FORMAT: &str = "rnn.network.v1";
const ARCH_KEY: &str = "rnn.architecture";

#[derive(Serialize, Deserialize)]
struct Architecture {
    input_shape: Vec<usize>,
    layers: Vec<LayerBuilder>,
    loss: LossFunction,
    seed: u64,
}

impl Network {
    /// Writes the network to `path` (safetensors). The write is atomic: on any error the
    /// previous file at `path`, if there was one, is untouched. Weights holding a NaN or
    /// infinite value are an error, so a diverged run never replaces a good checkpoint.
    pub fn save(&self, path: impl AsRef<Path>) -> Result<()> {
        if let Some(name) = self.first_non_finite()? {
            let msg = format!("{name} holds NaN or infinite values; {} was not written", path.as_ref().display());
            return Err(Error::invalid("Network::save", msg));
        }
        let arch = Architecture {
            input_shape: self.input_shape().to_vec(),
            layers: self.layers().to_vec(),
            loss: self.loss_function(),
            seed: self.init_seed(),
        };
        let json =
            serde_json::to_string(&arch).map_err(|e| Error::Msg(format!("cannot encode the architecture: {e}")))?;
        let metadata = BTreeMap::from([(FORMAT_KEY.to_string(), FORMAT.to_string()), (ARCH_KEY.to_string(), json)]);
        checkpoint::save(path, &self.state(), &metadata)
    }

    /// Rebuilds a network saved by `save` (on the CPU).
    pub fn load(path: impl AsRef<Path>) -> Result<Network> {
        let path = path.as_ref();
        let ckpt = checkpoint::load(path)?;
        let arch = architecture(path, &ckpt)?;
        let mut builder = Network::with_input_shape(&arch.input_shape)?.loss(arch.loss).seed(arch.seed);
        for layer in arch.layers {
            builder = builder.add_layer(layer);
        }
        let net =
            builder.build().map_err(|e| Error::bad_file(path, format!("the saved architecture is invalid: {e}")))?;
        checkpoint::apply(&net.state(), &ckpt)?;
        Ok(net)
    }

    /// Loads the weights saved at `path` into this network. Every name, shape and dtype is
    /// checked before anything is written: on error the network is unchanged. The optimizer
    /// state `train` carried over is reset (its moments belonged to the old weights).
    pub fn load_weights(&mut self, path: impl AsRef<Path>) -> Result<()> {
        let ckpt = checkpoint::load(path)?;
        checkpoint::apply(&self.state(), &ckpt)?;
        self.reset_optimizer();
        Ok(())
    }
}

fn architecture(path: &Path, ckpt: &Checkpoint) -> Result<Architecture> {
    match ckpt.metadata.get(FORMAT_KEY).map(String::as_str) {
        Some(FORMAT) => {}
        Some(other) => return Err(Error::bad_file(path, format!("unsupported format '{other}' (expected {FORMAT})"))),
        None => {
            let msg = "no network architecture in this file (not saved by Network::save); use load_weights";
            return Err(Error::bad_file(path, msg));
        }
    }
    let json = ckpt.metadata.get(ARCH_KEY).ok_or_else(|| Error::bad_file(path, "the architecture is missing"))?;
    serde_json::from_str(json).map_err(|e| Error::bad_file(path, format!("the architecture does not parse: {e}")))
}
