//! The Network API end to end: building (and its errors), training, evaluation, prediction,
//! early stopping, schedules, determinism, and save / load.

use rnn_core::{DType, Device, Error, Result, Tensor};
use rnn_nn::optim::{LrSchedule, OptimizerConfig};
use rnn_train::data::{synthetic_digits, Dataset};
use rnn_train::{
    ActivationFunction::{ReLU, Sigmoid, Softmax, Tanh},
    EarlyStopping, LayerBuilder, LossFunction, Monitor, Network, TrainingConfig,
};

fn quiet(epochs: usize) -> TrainingConfig {
    TrainingConfig { max_epochs: epochs, batch_size: 32, verbose: false, use_gpu: false, ..Default::default() }
}

fn mlp(hidden: usize) -> Result<Network> {
    Network::with_input_size(784)?
        .add_layer(LayerBuilder::dense(hidden).activation(ReLU))
        .add_layer(LayerBuilder::dense(10).activation(Softmax))
        .loss(LossFunction::CategoricalCrossEntropy)
        .build()
}

fn digits(n: usize, seed: u64) -> Dataset {
    synthetic_digits(n, seed).unwrap()
}

fn temp_path(name: &str) -> std::path::PathBuf {
    std::env::temp_dir().join(format!("rnn-network-test-{}-{name}", std::process::id()))
}

#[test]
fn mlp_learns_the_builtin_digits() -> Result<()> {
    let (train, test) = (digits(2000, 1), digits(500, 2));
    let mut net = mlp(64)?;
    let config = TrainingConfig { validation_split: 0.2, ..quiet(4) };
    let history = net.train(&train.inputs, &train.labels, &config)?;
    assert_eq!(history.train_loss.len(), 4);
    assert_eq!(history.val_loss.len(), 4);
    assert_eq!(history.val_metrics["accuracy"].len(), 4);
    assert_eq!(history.epoch_times.len(), 4);
    assert!(history.train_loss[3] < history.train_loss[0], "{:?}", history.train_loss);
    let eval = net.evaluate(&test.inputs, &test.labels)?;
    assert!(eval.accuracy.unwrap() > 0.85, "held-out accuracy {eval:?}");
    // evaluate agrees with predict_classes
    let predicted = net.predict_classes(&test.inputs)?;
    let labels = test.labels.to_vec::<u32>()?;
    let hits = predicted.iter().zip(&labels).filter(|(p, l)| p == l).count();
    assert!((hits as f64 / labels.len() as f64 - eval.accuracy.unwrap()).abs() < 1e-9);
    Ok(())
}

#[test]
fn predict_returns_probabilities() -> Result<()> {
    let net = mlp(16)?;
    let x = digits(20, 3).inputs;
    let p = net.predict(&x)?;
    assert_eq!(p.dims(), &[20, 10]);
    for row in p.to_vec2::<f32>()? {
        assert!((row.iter().sum::<f32>() - 1.0).abs() < 1e-5 && row.iter().all(|v| *v >= 0.0));
    }
    Ok(())
}

#[test]
fn same_seed_same_run_different_seed_different_run() -> Result<()> {
    let data = digits(300, 4);
    let run = |seed: u64| -> Result<Vec<f64>> {
        let mut net = mlp(16)?;
        Ok(net.train(&data.inputs, &data.labels, &TrainingConfig { seed, ..quiet(2) })?.train_loss)
    };
    assert_eq!(run(5)?, run(5)?);
    assert_ne!(run(5)?, run(6)?);
    Ok(())
}

#[test]
fn build_errors_name_the_layer() {
    let err = Network::with_input_size(0).unwrap_err();
    assert!(err.to_string().contains("input shape"), "{err}");
    let err = Network::with_input_size(4).unwrap().build().unwrap_err();
    assert!(err.to_string().contains("no layers"), "{err}");
    let err = Network::with_input_size(784).unwrap().add_layer(LayerBuilder::conv2d(8, 3)).build().unwrap_err();
    assert!(err.to_string().contains("layer 0 (conv2d(8, 3x3))"), "{err}");
    let err = Network::with_input_shape(&[1, 4, 4])
        .unwrap()
        .add_layer(LayerBuilder::conv2d(8, 5))
        .loss(LossFunction::MeanSquaredError)
        .build()
        .unwrap_err();
    assert!(err.to_string().contains("does not fit"), "{err}");
    let err = Network::with_input_size(4).unwrap().add_layer(LayerBuilder::dense(1)).build().unwrap_err();
    assert!(err.to_string().contains("CategoricalCrossEntropy"), "{err}");
    let err = Network::with_input_size(4).unwrap().add_layer(LayerBuilder::dropout(1.5)).build().unwrap_err();
    assert!(matches!(err, Error::InvalidArgument { .. }), "{err}");
}

#[test]
fn train_rejects_bad_data_and_config_without_changing_the_model() -> Result<()> {
    let mut net = mlp(8)?;
    let before = net.predict(&digits(5, 1).inputs)?.to_vec::<f32>()?;
    let data = digits(40, 1);
    let wrong_n = data.labels.narrow(0, 0, 39)?;
    assert!(net.train(&data.inputs, &wrong_n, &quiet(1)).unwrap_err().to_string().contains("labels"));
    let bad_label = Tensor::full(10.0, 40, DType::F32, Device::Cpu)?;
    let err = net.train(&data.inputs, &bad_label, &quiet(1)).unwrap_err();
    assert!(err.to_string().contains("0..10"), "{err}");
    let wrong_width = Tensor::zeros((40, 783), DType::F32, Device::Cpu)?;
    assert!(net.train(&wrong_width, &data.labels, &quiet(1)).unwrap_err().to_string().contains("[n, 784]"));
    for bad in [
        TrainingConfig { batch_size: 0, ..quiet(1) },
        TrainingConfig { max_epochs: 0, ..quiet(1) },
        TrainingConfig { learning_rate: -1.0, ..quiet(1) },
        TrainingConfig { validation_split: 1.0, ..quiet(1) },
    ] {
        assert!(matches!(net.train(&data.inputs, &data.labels, &bad), Err(Error::InvalidArgument { .. })));
    }
    assert!(net.predict(&digits(5, 1).inputs)?.to_vec::<f32>()? == before, "a failed train changed the model");
    Ok(())
}

#[test]
fn one_hot_labels_and_ndarray_inputs_work() -> Result<()> {
    let data = digits(200, 7);
    let x = data.inputs.to_ndarray_dim::<f32, ndarray::Ix2>()?;
    let ids: Vec<usize> = data.labels.to_vec::<u32>()?.into_iter().map(|v| v as usize).collect();
    let one_hot = data.labels.one_hot(10, DType::F32)?;
    let (mut a, mut b) = (mlp(16)?, mlp(16)?);
    let ha = a.train(&x, &ndarray::Array1::from(ids), &quiet(2))?;
    let hb = b.train(&data.inputs, &one_hot, &quiet(2))?;
    for (la, lb) in ha.train_loss.iter().zip(&hb.train_loss) {
        assert!((la - lb).abs() < 1e-5, "{:?} vs {:?}", ha.train_loss, hb.train_loss);
    }
    Ok(())
}

#[test]
fn early_stopping_stops_and_restores_the_best_weights() -> Result<()> {
    let data = digits(400, 8);
    let mut net = mlp(32)?;
    // A learning rate this large makes validation loss worse after the first epochs.
    let rule = EarlyStopping { monitor: Monitor::ValLoss, patience: 2, min_delta: 0.0, restore_best_weights: true };
    let config =
        TrainingConfig { learning_rate: 0.05, validation_split: 0.25, early_stopping: Some(rule), ..quiet(30) };
    let history = net.train(&data.inputs, &data.labels, &config)?;
    assert!(history.epochs() < 30, "never stopped: {:?}", history.val_loss);
    let best = history.best_epoch.unwrap();
    let best_loss = history.val_loss.iter().copied().fold(f64::INFINITY, f64::min);
    assert_eq!(history.val_loss[best], best_loss);
    assert_eq!(history.epochs() - 1 - best, 2, "patience 2 after the best epoch");
    let val = data.split_at(300)?.1;
    let restored = net.evaluate(&val.inputs, &val.labels)?;
    assert!((restored.loss - best_loss).abs() < 1e-4, "{} vs best {}", restored.loss, best_loss);
    Ok(())
}

#[test]
fn schedule_and_clipping_are_applied() -> Result<()> {
    let data = digits(200, 9);
    let mut net = mlp(16)?;
    let config = TrainingConfig {
        learning_rate: 0.01,
        optimizer: OptimizerConfig::sgd(0.01),
        lr_schedule: Some(LrSchedule::Step { step_size: 1, gamma: 0.5 }),
        clip_grad_norm: Some(1.0),
        ..quiet(3)
    };
    let history = net.train(&data.inputs, &data.labels, &config)?;
    let lrs = &history.learning_rates;
    assert!(
        (lrs[0] - 0.01).abs() < 1e-12 && (lrs[1] - 0.005).abs() < 1e-12 && (lrs[2] - 0.0025).abs() < 1e-12,
        "{lrs:?}"
    );
    Ok(())
}

#[test]
fn save_load_round_trip_and_bad_files() -> Result<()> {
    let data = digits(100, 10);
    let mut net = Network::with_input_shape(&[1, 28, 28])?
        .add_layer(LayerBuilder::conv2d(4, 3).padding(1).activation(ReLU))
        .add_layer(LayerBuilder::batch_norm())
        .add_layer(LayerBuilder::max_pool2d(2))
        .add_layer(LayerBuilder::flatten())
        .add_layer(LayerBuilder::dropout(0.2))
        .add_layer(LayerBuilder::dense(10).activation(Softmax))
        .build()?;
    let x = data.inputs.reshape((100, 1, 28, 28))?;
    net.train(&x, &data.labels, &quiet(1))?;
    let path = temp_path("model.safetensors");
    net.save(&path)?;
    let loaded = Network::load(&path)?;
    assert!(loaded.predict(&x)?.to_vec::<f32>()? == net.predict(&x)?.to_vec::<f32>()?, "predictions differ");
    assert_eq!(loaded.summary(), net.summary());

    // Weights of another architecture: an error, and the model is unchanged.
    let mut other = mlp(8)?;
    let before = other.predict(&data.inputs)?.to_vec::<f32>()?;
    assert!(other.load_weights(&path).is_err());
    assert!(other.predict(&data.inputs)?.to_vec::<f32>()? == before, "load_weights changed the model");

    // A truncated file.
    let bytes = std::fs::read(&path).map_err(|e| Error::io(&path, e))?;
    std::fs::write(&path, &bytes[..bytes.len() / 2]).map_err(|e| Error::io(&path, e))?;
    assert!(matches!(Network::load(&path), Err(Error::BadFile { .. })));
    std::fs::remove_file(&path).ok();
    assert!(matches!(Network::load(&path), Err(Error::Io { .. })));
    Ok(())
}

#[test]
fn other_losses_and_layers_train() -> Result<()> {
    // Binary classification of "digit is 0" with a sigmoid output.
    let data = digits(300, 11);
    let is_zero = data.labels.eq_scalar(0.0)?.to_dtype(DType::F32)?;
    let mut bce = Network::with_input_size(784)?
        .add_layer(LayerBuilder::dense(16).activation(Tanh))
        .add_layer(LayerBuilder::dense(1).activation(Sigmoid))
        .loss(LossFunction::BinaryCrossEntropy)
        .build()?;
    let h = bce.train(&data.inputs, &is_zero, &quiet(3))?;
    assert!(h.train_loss[2] < h.train_loss[0] && h.last_train_metric("accuracy").unwrap() > 0.85, "{h:?}");

    // Regression of a sequence's mean with an LSTM, and with a GRU under Huber loss.
    let seqs = Tensor::rand(-1.0, 1.0, (64, 6, 3), DType::F32, Device::Cpu)?;
    let target = seqs.mean(2)?.mean(1)?;
    for (layer, loss) in [
        (LayerBuilder::lstm(8).num_layers(2), LossFunction::MeanSquaredError),
        (LayerBuilder::gru(8), LossFunction::Huber(1.0)),
        (LayerBuilder::rnn(8).return_sequences(true), LossFunction::MeanSquaredError),
    ] {
        let seq_out = layer.return_sequences;
        let mut b = Network::with_input_shape(&[6, 3])?.add_layer(layer);
        if seq_out {
            b = b.add_layer(LayerBuilder::flatten());
        }
        let mut net = b.add_layer(LayerBuilder::dense(1)).loss(loss).build()?;
        let h = net.train(&seqs, &target, &TrainingConfig { learning_rate: 0.01, ..quiet(5) })?;
        assert!(h.train_loss[4] < h.train_loss[0], "{loss:?}: {:?}", h.train_loss);
        assert!(h.train_metrics.is_empty(), "no accuracy for regression");
    }
    Ok(())
}
