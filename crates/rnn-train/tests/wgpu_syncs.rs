//! Training on wgpu waits for the device only where it reads values back: once per progress
//! update (and, with progress off, once per epoch), never inside a training step. The counts
//! come from `rnn_core::wgpu::sync_count`. Bad labels and token ids are clear errors. On a
//! machine without a wgpu adapter the tests say they are skipped (and fail when
//! `RNN_REQUIRE_GPU` requires wgpu).

use std::sync::Mutex;

use rnn_core::{DType, Device, Error, Result, Tensor};
use rnn_testutil::{usable, wgpu_test_device};
use rnn_train::{
    ActivationFunction::ReLU, ActivationFunction::Softmax, LayerBuilder, LossFunction, Network, TrainingConfig,
};

/// The sync counter is per device: the tests of this file run one at a time.
static SERIAL: Mutex<()> = Mutex::new(());

const SAMPLES: usize = 128;
const BATCH: usize = 16;

fn wgpu_ordinal() -> Option<(Device, usize)> {
    match usable(wgpu_test_device()) {
        Some(d @ Device::Wgpu(i)) => Some((d, i)),
        _ => None,
    }
}

fn mlp() -> Result<Network> {
    Network::with_input_size(784)?
        .add_layer(LayerBuilder::dense(64).activation(ReLU))
        .add_layer(LayerBuilder::dense(10).activation(Softmax))
        .loss(LossFunction::CategoricalCrossEntropy)
        .seed(3)
        .build()
}

/// Random inputs `[SAMPLES, 784]` and class ids `[SAMPLES]` on the host.
fn data() -> Result<(Tensor, Tensor)> {
    rnn_core::manual_seed(11);
    let x = Tensor::rand(0.0, 1.0, (SAMPLES, 784), DType::F32, Device::Cpu)?;
    let y: Vec<u32> = (0..SAMPLES as u32).map(|i| (i * 7 + 3) % 10).collect();
    Ok((x, Tensor::from_vec(y, SAMPLES, Device::Cpu)?))
}

fn config(device: Device, epochs: usize, verbose: bool) -> TrainingConfig {
    TrainingConfig { max_epochs: epochs, batch_size: BATCH, verbose, device: Some(device), ..Default::default() }
}

/// Host syncs of `train` on `ordinal` with `config`.
fn syncs_of_training(ordinal: usize, config: &TrainingConfig) -> Result<u64> {
    let (x, y) = data()?;
    let mut net = mlp()?;
    let before = rnn_core::wgpu::sync_count(ordinal)?;
    let history = net.train(&x, &y, config)?;
    let syncs = rnn_core::wgpu::sync_count(ordinal)? - before;
    assert_eq!(history.train_loss.len(), config.max_epochs);
    assert!(history.train_loss.iter().all(|l| l.is_finite()), "{:?}", history.train_loss);
    Ok(syncs)
}

#[test]
fn silent_training_syncs_once_per_epoch() -> Result<()> {
    let _serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let Some((device, ordinal)) = wgpu_ordinal() else { return Ok(()) };
    let epochs = 2;
    // SAMPLES / BATCH = 8 steps per epoch, none of which waits for the device: the epoch's
    // loss and accuracy are read back once, at its end.
    assert_eq!(syncs_of_training(ordinal, &config(device, epochs, false))?, epochs as u64);
    Ok(())
}

#[test]
fn progress_updates_are_the_only_syncs() -> Result<()> {
    let _serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let Some((device, ordinal)) = wgpu_ordinal() else { return Ok(()) };
    let epochs = 1;
    // With 8 batches the progress display updates after every batch (at most 50 updates
    // an epoch), then shows the epoch's summary: one read-back each.
    let steps = (SAMPLES / BATCH) as u64;
    assert_eq!(syncs_of_training(ordinal, &config(device, epochs, true))?, steps + 1);
    Ok(())
}

#[test]
fn a_bad_label_is_a_clear_error_before_training() -> Result<()> {
    let _serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let Some((device, _)) = wgpu_ordinal() else { return Ok(()) };
    let (x, _) = data()?;
    let mut labels: Vec<u32> = vec![1; SAMPLES];
    labels[5] = 10;
    let y = Tensor::from_vec(labels, SAMPLES, Device::Cpu)?;
    let err = mlp()?.train(&x, &y, &config(device, 1, false)).unwrap_err();
    let msg = err.to_string();
    assert!(msg.contains("label 5 is 10") && msg.contains("0..10"), "{msg}");
    Ok(())
}

#[test]
fn bad_ids_on_the_device_are_reported_at_the_next_sync() -> Result<()> {
    let _serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let Some((device, _)) = wgpu_ordinal() else { return Ok(()) };
    // Class ids already on the device are checked there: the loss returns, and the bad id
    // surfaces, naming the op and the value, when the loss is read.
    let logits = Tensor::rand(0.0, 1.0, (4, 10), DType::F32, device)?;
    let ids = Tensor::from_vec(vec![1u32, 12, 3, 4], 4, device)?;
    let loss = rnn_nn::cross_entropy(&logits, &ids)?;
    let err = loss.to_f64_scalar().unwrap_err();
    assert!(matches!(err, Error::IndexOutOfRange { op: "cross_entropy", index: 12, size: 10, .. }), "{err:?}");
    // A token id of an embedding network is checked on the host, before training.
    let mut net = Network::with_input_size(3)?
        .add_layer(LayerBuilder::embedding(5, 4))
        .add_layer(LayerBuilder::flatten())
        .add_layer(LayerBuilder::dense(2).activation(Softmax))
        .loss(LossFunction::CategoricalCrossEntropy)
        .build()?;
    let tokens = Tensor::from_vec(vec![0f32, 1.0, 2.0, 3.0, 4.0, 5.0], (2, 3), Device::Cpu)?;
    let y = Tensor::from_vec(vec![0u32, 1], 2, Device::Cpu)?;
    let err = net.train(&tokens, &y, &config(device, 1, false)).unwrap_err();
    assert!(err.to_string().contains("input 5 is 5") && err.to_string().contains("0..5"), "{err}");
    // Token ids already on the device are read back and checked too: NaN or 1.5 would
    // otherwise be cast to ids 0 and 1.
    for (bad, shown) in [(f32::NAN, "NaN"), (1.5, "1.5")] {
        let tokens = Tensor::from_vec(vec![0f32, 1.0, bad, 3.0, 4.0, 2.0], (2, 3), device)?;
        let err = net.train(&tokens, &y, &config(device, 1, false)).unwrap_err();
        assert!(err.to_string().contains(&format!("input 2 is {shown};")), "{err}");
    }
    Ok(())
}
