//! Data-parallel training across processes: every rank trains the same network on its share
//! of each batch and the gradients are averaged after every backward pass.
//!
//! ```sh
//! cargo build --release -p rnn --features mpi --example ddp
//! mpirun -np 4 --oversubscribe -x RAYON_NUM_THREADS=1 target/release/examples/ddp
//! ```
//! Run without `mpirun`, it trains as a group of one. Rank 0 alone prints and saves
//! `ddp-model.safetensors` (or the path given as the first argument).

use rnn::distributed::ProcessGroup;
use rnn::train::distributed::DataParallel;
use rnn::{ActivationFunction, Device, LayerBuilder, LossFunction, Network, TrainingConfig};

fn main() -> rnn::Result<()> {
    let group = ProcessGroup::from_env()?;
    let main_rank = group.is_main();
    if main_rank {
        println!("{} rank(s) ({:?})", group.world_size(), group.backend());
    }
    // Every rank builds the same network and loads the same data; the sampler gives each
    // rank its own share of every epoch.
    let data = rnn::train::data::synthetic_digits(4_000, 1)?;
    let mut network = Network::with_input_size(784)?
        .add_layer(LayerBuilder::dense(128).activation(ActivationFunction::ReLU))
        .add_layer(LayerBuilder::dense(10).activation(ActivationFunction::Softmax))
        .loss(LossFunction::CategoricalCrossEntropy)
        .build()?;
    let config = TrainingConfig {
        max_epochs: 3,
        batch_size: 32, // per rank
        validation_split: 0.1,
        // The CPU here; with a GPU per rank, pick it from the rank (docs/distributed.md).
        device: Some(Device::Cpu),
        distributed: Some(DataParallel::new(group)),
        ..TrainingConfig::default()
    };
    let history = network.train(&data.inputs, &data.labels, &config)?;
    if main_rank {
        let accuracy = history.val_metrics.get("accuracy").and_then(|a| a.last()).copied().unwrap_or(f64::NAN);
        println!("validation accuracy {:.2}%", accuracy * 100.0);
        let path = std::env::args().nth(1).unwrap_or_else(|| "ddp-model.safetensors".into());
        network.save(&path)?;
        println!("saved {path}");
    }
    Ok(())
}
