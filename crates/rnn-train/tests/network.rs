//! The Network API end to end: building (and its errors), training, evaluation, prediction,
//! early stopping, schedules, determinism, and save / load.

use rnn_core::{DType, Device, Error, Result, Tensor};
use rnn_nn::optim::{LrSchedule, OptimizerConfig};
use rnn_train::data::{synthetic_digits, Dataset};
use rnn_train::{
    ActivationFunction::{ReLU, Sigmoid, Softmax, Tanh},
    EarlyStopping, LayerBuilder, LossFunction, MixedPrecision, Monitor, Network, NonFinitePolicy, TrainingConfig,
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

/// Every parameter and buffer, flattened, in the network's order.
fn weights(net: &Network) -> Result<Vec<Vec<f32>>> {
    net.state().iter().map(|(_, t)| t.to_vec::<f32>()).collect()
}

/// A network whose every op propagates NaN (tanh, dense layers without a fused ReLU).
fn tanh_mlp() -> Result<Network> {
    Network::with_input_size(784)?
        .add_layer(LayerBuilder::dense(16).activation(Tanh))
        .add_layer(LayerBuilder::dense(10).activation(Softmax))
        .build()
}

/// `data`'s inputs with one NaN, in sample `sample`.
fn with_nan(data: &Dataset, sample: usize) -> Result<Tensor> {
    let mut values = data.inputs.to_vec::<f32>()?;
    values[sample * 784 + 100] = f32::NAN;
    Tensor::from_vec(values, data.inputs.dims(), Device::Cpu)
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

#[test]
fn divergence_is_an_error_that_puts_the_weights_back() -> Result<()> {
    let data = digits(200, 12);
    let mut net = mlp(16)?;
    net.train(&data.inputs, &data.labels, &quiet(1))?;
    let before = weights(&net)?;
    // Adam moves every weight by about the learning rate: the second step's logits overflow.
    let err = net.train(&data.inputs, &data.labels, &TrainingConfig { learning_rate: 1e30, ..quiet(3) }).unwrap_err();
    let msg = err.to_string();
    assert!(msg.contains("Network::train: the loss is") && msg.contains("at epoch 1, step "), "{msg}");
    assert!(msg.contains("diverged") && msg.contains("as they were when train was called"), "{msg}");
    assert!(weights(&net)? == before, "the weights of before the call were not put back");
    // The network still trains and saves.
    net.train(&data.inputs, &data.labels, &quiet(1))?;
    assert_eq!(net.first_non_finite()?, None);
    Ok(())
}

#[test]
fn nan_in_the_data_stops_at_its_step_or_skips_it() -> Result<()> {
    let data = digits(200, 13);
    let x = with_nan(&data, 40)?;
    // Batches of 32 without shuffling put sample 40 in step 2 of 7.
    let config = TrainingConfig { shuffle: false, ..quiet(2) };
    let mut net = tanh_mlp()?;
    let before = weights(&net)?;
    let msg = net.train(&x, &data.labels, &config).unwrap_err().to_string();
    assert!(msg.contains("the loss is NaN at epoch 1, step 2 of 7"), "{msg}");
    assert!(weights(&net)? == before);

    let skip = TrainingConfig { on_non_finite: NonFinitePolicy::SkipStep, ..config };
    let history = net.train(&x, &data.labels, &skip)?;
    assert!(history.train_loss.iter().all(|l| l.is_finite()), "{:?}", history.train_loss);
    assert_eq!(net.first_non_finite()?, None);
    assert!(weights(&net)? != before, "the other steps trained");
    // Skipping the step is training without its batch (the loss is checked before the update).
    let mut without = tanh_mlp()?;
    let (head, tail) = (data.split_at(32)?.0, data.split_at(64)?.1);
    let rest_x = Tensor::cat(&[head.inputs.clone(), tail.inputs.clone()], 0)?;
    let rest_y = Tensor::cat(&[head.labels.clone(), tail.labels.clone()], 0)?;
    without.train(&rest_x, &rest_y, &TrainingConfig { shuffle: false, ..quiet(2) })?;
    let first = |net: &Network| net.state()[0].1.to_vec::<f32>();
    assert!(first(&without)? == first(&net)?, "a skipped step changed the weights");
    Ok(())
}

#[test]
fn nan_data_never_gives_ok_with_nan_weights() -> Result<()> {
    // With ReLU layers (whose NaN handling is the core's), whatever the path: an error
    // that leaves the weights as they were, or finite weights.
    let data = digits(100, 14);
    let x = with_nan(&data, 3)?;
    for policy in [NonFinitePolicy::Stop, NonFinitePolicy::SkipStep] {
        let mut net = mlp(16)?;
        let before = weights(&net)?;
        match net.train(&x, &data.labels, &TrainingConfig { on_non_finite: policy, ..quiet(2) }) {
            Ok(h) => {
                assert_eq!(policy, NonFinitePolicy::SkipStep, "Stop returned Ok: {h:?}");
                assert_eq!(net.first_non_finite()?, None);
            }
            Err(e) => {
                assert!(e.to_string().contains("NaN"), "{e}");
                assert!(weights(&net)? == before);
            }
        }
    }
    Ok(())
}

#[test]
fn save_refuses_non_finite_weights_and_keeps_the_old_file() -> Result<()> {
    let net = mlp(8)?;
    let path = temp_path("finite.safetensors");
    net.save(&path)?;
    let saved = std::fs::read(&path).map_err(|e| Error::io(&path, e))?;
    let (name, w) = net.named_parameters()[2].clone();
    rnn_core::no_grad(|| w.assign(&w.mul_scalar(f64::INFINITY)?))?;
    assert_eq!(net.first_non_finite()?.as_deref(), Some(name.as_str()));
    let msg = net.save(&path).unwrap_err().to_string();
    assert!(msg.contains("Network::save") && msg.contains(&name) && msg.contains("not written"), "{msg}");
    assert!(std::fs::read(&path).map_err(|e| Error::io(&path, e))? == saved, "the old checkpoint changed");
    std::fs::remove_file(&path).ok();
    Ok(())
}

#[test]
fn a_second_train_call_continues_the_first() -> Result<()> {
    let data = digits(192, 15);
    // No dropout here: its masks come from the process-wide generator, which the other
    // tests of this file draw from concurrently.
    let net = || mlp(16);
    let two = TrainingConfig { lr_schedule: Some(LrSchedule::Step { step_size: 1, gamma: 0.5 }), ..quiet(2) };
    let one = TrainingConfig { max_epochs: 1, ..two.clone() };
    let (x, y) = (&data.inputs, &data.labels);
    let mut once = net()?;
    once.train(x, y, &two)?;
    let mut twice = net()?;
    twice.train(x, y, &one)?;
    let second = twice.train(x, y, &one)?;
    assert!(weights(&twice)? == weights(&once)?, "1 + 1 epochs differ from 2 epochs");
    assert_eq!(second.learning_rates, vec![0.5e-3], "the schedule went on");

    // reset_optimizer starts afresh, and so does a call with another learning rate.
    let mut reset = net()?;
    reset.train(x, y, &one)?;
    reset.reset_optimizer();
    let other_lr = TrainingConfig { learning_rate: 2e-3, ..one.clone() };
    reset.train(x, y, &other_lr)?;
    assert!(weights(&reset)? != weights(&once)?);
    let mut changed = net()?;
    changed.train(x, y, &one)?;
    changed.train(x, y, &other_lr)?;
    assert!(weights(&changed)? == weights(&reset)?, "a new learning rate kept the old optimizer");
    Ok(())
}

#[test]
fn each_api_names_itself_in_errors() -> Result<()> {
    let net = mlp(8)?;
    let data = digits(10, 16);
    let wrong_width = Tensor::zeros((10, 783), DType::F32, Device::Cpu)?;
    let bad_labels = Tensor::full(12.0, 10, DType::F32, Device::Cpu)?;
    let short_labels = data.labels.narrow(0, 0, 9)?;
    let errors = [
        (net.evaluate(&wrong_width, &data.labels).unwrap_err(), "Network::evaluate"),
        (net.evaluate(&data.inputs, &bad_labels).unwrap_err(), "Network::evaluate"),
        (net.evaluate(&data.inputs, &short_labels).unwrap_err(), "Network::evaluate"),
        (net.predict(&wrong_width).unwrap_err(), "Network::predict"),
        (net.predict_classes(&wrong_width).unwrap_err(), "Network::predict"),
    ];
    for (err, name) in errors {
        assert!(err.to_string().starts_with(&format!("{name}: ")), "{err}");
    }
    let empty = Tensor::zeros((0, 784), DType::F32, Device::Cpu)?;
    assert!(matches!(net.evaluate(&empty, &data.labels), Err(Error::EmptyTensor { op: "Network::evaluate", .. })));
    Ok(())
}

/// On every device: a divergence is an error naming its epoch and step (on a GPU, the steps
/// since the loss was last read back) that puts the weights back; `SkipStep` skips a NaN batch.
fn non_finite_values_on(device: Device) -> Result<()> {
    let data = digits(96, 17);
    let config = TrainingConfig { device: Some(device), shuffle: false, ..quiet(1) };
    let mut net = mlp(16)?;
    let before = weights(&net)?;
    let diverging = TrainingConfig { learning_rate: 1e30, ..config.clone() };
    let msg = net.train(&data.inputs, &data.labels, &diverging).unwrap_err().to_string();
    assert!(msg.contains("at epoch 1, step"), "{msg}");
    assert_eq!(msg.contains("read back only at progress updates"), !device.is_cpu(), "{msg}");
    assert!(weights(&net)? == before, "the weights were not put back");
    let skip = TrainingConfig { on_non_finite: NonFinitePolicy::SkipStep, ..config };
    let mut net = tanh_mlp()?;
    let history = net.train(&with_nan(&data, 40)?, &data.labels, &skip)?;
    assert!(history.train_loss[0].is_finite() && net.first_non_finite()?.is_none(), "{history:?}");
    Ok(())
}
rnn_testutil::test_device!(non_finite_values, non_finite_values_on);

/// `mixed_precision`: bf16, and f16 with loss scaling and gradient clipping (which the
/// scaler must precede), train the MLP: the loss falls, the weights stay f32 and finite,
/// and a second call goes on from the first.
#[test]
fn mixed_precision_trains_with_f32_master_weights() -> Result<()> {
    let data = digits(512, 3);
    for precision in [MixedPrecision::Bf16, MixedPrecision::F16] {
        let mut net = mlp(32)?;
        let config = TrainingConfig { mixed_precision: Some(precision), clip_grad_norm: Some(5.0), ..quiet(3) };
        let history = net.train(&data.inputs, &data.labels, &config)?;
        let losses = &history.train_loss;
        assert!(losses[2] < 0.8 * losses[0], "{precision:?}: losses {losses:?}");
        for (name, t) in net.state() {
            assert_eq!(t.dtype(), DType::F32, "{precision:?}: {name}");
            assert!(t.to_vec::<f32>()?.iter().all(|v| v.is_finite()), "{precision:?}: {name}");
        }
        let again = net.train(&data.inputs, &data.labels, &TrainingConfig { max_epochs: 1, ..config })?;
        assert!(again.train_loss[0] < losses[0], "{precision:?}: the second call starts afresh");
    }
    Ok(())
}

#[test]
fn precision_names_parse() -> Result<()> {
    assert_eq!(MixedPrecision::parse("f32")?, None);
    assert_eq!(MixedPrecision::parse("bf16")?, Some(MixedPrecision::Bf16));
    assert_eq!(MixedPrecision::parse("F16")?, Some(MixedPrecision::F16));
    assert!(matches!(MixedPrecision::parse("fp8"), Err(Error::InvalidArgument { .. })));
    assert_eq!(MixedPrecision::F16.dtype(), DType::F16);
    assert!(MixedPrecision::F16.needs_loss_scaling() && !MixedPrecision::Bf16.needs_loss_scaling());
    assert_eq!(TrainingConfig::default().mixed_precision, None);
    Ok(())
}
