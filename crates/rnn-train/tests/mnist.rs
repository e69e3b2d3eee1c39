//! Real data: the MLP 784-512-256-10 with Adam, trained on the first 8,000 images of the
//! MNIST test set, must reach 95% on the last 2,000. The IDX files are looked up in
//! `$RNN_MNIST_DIR`, `data/mnist` and `../shared/data/mnist` (relative to the workspace);
//! without them the test prints why it skipped, or fails when `RNN_REQUIRE_MNIST=1` (CI).
//! The mixed-precision tests train the MLP and the CNN in bf16 / f16 and in f32 alike.

use rnn_core::Result;
use rnn_train::data::{load_mnist, Dataset, MnistSplit};
use rnn_train::{ActivationFunction::ReLU, ActivationFunction::Softmax, LayerBuilder, LossFunction, Network};
use rnn_train::{MixedPrecision, TrainingConfig};

/// The MNIST test set split 8,000 / 2,000, or `None` (with the reason printed) when the files
/// are absent; absent files fail the test under `RNN_REQUIRE_MNIST=1`.
fn mnist_8k_2k() -> Result<Option<(Dataset, Dataset)>> {
    let Some(dir) = rnn_testutil::mnist_dir() else {
        let why = "no MNIST folder (set RNN_MNIST_DIR to a folder with t10k-*-idx*-ubyte[.gz])";
        assert!(std::env::var("RNN_REQUIRE_MNIST").as_deref() != Ok("1"), "RNN_REQUIRE_MNIST=1: {why}");
        eprintln!("SKIPPED: {why}");
        return Ok(None);
    };
    let all = load_mnist(&dir, MnistSplit::Test)?;
    assert_eq!(all.len(), 10_000);
    all.split_at(8_000).map(Some)
}

#[test]
fn mlp_reaches_95_percent_on_real_mnist() -> Result<()> {
    let Some((train, test)) = mnist_8k_2k()? else { return Ok(()) };
    let mut net = Network::with_input_size(784)?
        .add_layer(LayerBuilder::dense(512).activation(ReLU))
        .add_layer(LayerBuilder::dense(256).activation(ReLU))
        .add_layer(LayerBuilder::dense(10).activation(Softmax))
        .loss(LossFunction::CategoricalCrossEntropy)
        .build()?;
    let config = TrainingConfig { max_epochs: 8, batch_size: 64, verbose: false, use_gpu: false, ..Default::default() };
    let history = net.train(&train.inputs, &train.labels, &config)?;
    let eval = net.evaluate(&test.inputs, &test.labels)?;
    let accuracy = eval.accuracy.unwrap_or(0.0);
    eprintln!(
        "MNIST (8k train / 2k test): accuracy {:.2}%, loss {:.4}, train losses {:?}",
        accuracy * 100.0,
        eval.loss,
        history.train_loss
    );
    assert!(accuracy >= 0.95, "accuracy {accuracy} below 0.95");
    Ok(())
}

/// Test accuracy of `net` after training on `train` in `precision` (same seed, so the same
/// initial weights and batch order as the other precisions).
fn accuracy_after(
    mut net: Network,
    (train, test): &(Dataset, Dataset),
    precision: Option<MixedPrecision>,
    config: &TrainingConfig,
) -> Result<f64> {
    let config = TrainingConfig { mixed_precision: precision, ..config.clone() };
    net.train(&train.inputs, &train.labels, &config)?;
    Ok(net.evaluate(&test.inputs, &test.labels)?.accuracy.unwrap_or(0.0) * 100.0)
}

/// Mixed precision costs no accuracy: the 784-512-256-10 MLP trained on 8,000 real MNIST
/// images in bf16 and in f16 (with loss scaling) ends within 0.3 points (6 of the 2,000
/// test images) of the same run in f32. The f32 run reaches about 95%, so the comparison
/// is between trained models, where rounding noise of a bad training would show.
#[test]
fn mlp_in_bf16_and_f16_within_0_3_points_of_f32_on_real_mnist() -> Result<()> {
    let Some(data) = mnist_8k_2k()? else { return Ok(()) };
    let build = || {
        Network::with_input_size(784)?
            .add_layer(LayerBuilder::dense(512).activation(ReLU))
            .add_layer(LayerBuilder::dense(256).activation(ReLU))
            .add_layer(LayerBuilder::dense(10).activation(Softmax))
            .loss(LossFunction::CategoricalCrossEntropy)
            .build()
    };
    let config = TrainingConfig { max_epochs: 3, batch_size: 64, verbose: false, use_gpu: false, ..Default::default() };
    let f32_accuracy = accuracy_after(build()?, &data, None, &config)?;
    for precision in [MixedPrecision::Bf16, MixedPrecision::F16] {
        let accuracy = accuracy_after(build()?, &data, Some(precision), &config)?;
        eprintln!("MNIST MLP: f32 {f32_accuracy:.2}%, {} {accuracy:.2}%", precision.name());
        let gap = (accuracy - f32_accuracy).abs();
        assert!(gap <= 0.3, "{}: {accuracy:.2}% against f32 {f32_accuracy:.2}% ({gap:.2} points)", precision.name());
    }
    Ok(())
}

/// The same for the CNN of `rnn train --model cnn` (two 3x3 convolutions with max pooling)
/// in bf16, on the same 8,000 / 2,000 split for one epoch (about 90% in f32).
#[test]
fn cnn_in_bf16_within_0_3_points_of_f32_on_real_mnist() -> Result<()> {
    let Some((train, test)) = mnist_8k_2k()? else { return Ok(()) };
    let images = |d: &Dataset| -> Result<Dataset> {
        Ok(Dataset { inputs: d.inputs.reshape((d.len(), 1, 28, 28))?, ..d.clone() })
    };
    let data = (images(&train)?, images(&test)?);
    let build = || {
        Network::with_input_shape(&[1, 28, 28])?
            .add_layer(LayerBuilder::conv2d(16, 3).padding(1).activation(ReLU))
            .add_layer(LayerBuilder::max_pool2d(2))
            .add_layer(LayerBuilder::conv2d(32, 3).padding(1).activation(ReLU))
            .add_layer(LayerBuilder::max_pool2d(2))
            .add_layer(LayerBuilder::flatten())
            .add_layer(LayerBuilder::dense(10).activation(Softmax))
            .loss(LossFunction::CategoricalCrossEntropy)
            .build()
    };
    let config = TrainingConfig { max_epochs: 1, batch_size: 64, verbose: false, use_gpu: false, ..Default::default() };
    let f32_accuracy = accuracy_after(build()?, &data, None, &config)?;
    let accuracy = accuracy_after(build()?, &data, Some(MixedPrecision::Bf16), &config)?;
    eprintln!("MNIST CNN: f32 {f32_accuracy:.2}%, bf16 {accuracy:.2}%");
    let gap = (accuracy - f32_accuracy).abs();
    assert!(gap <= 0.3, "bf16: {accuracy:.2}% against f32 {f32_accuracy:.2}% ({gap:.2} points)");
    Ok(())
}
