//! Real data: the MLP 784-512-256-10 with Adam, trained on the first 8,000 images of the
//! MNIST test set, must reach 95% on the last 2,000. The IDX files are looked up in
//! `$RNN_MNIST_DIR`, `data/mnist` and `../shared/data/mnist` (relative to the workspace);
//! without them the test prints why it skipped, or fails when `RNN_REQUIRE_MNIST=1` (CI).

use rnn_core::Result;
use rnn_train::data::{load_mnist, MnistSplit};
use rnn_train::TrainingConfig;
use rnn_train::{ActivationFunction::ReLU, ActivationFunction::Softmax, LayerBuilder, LossFunction, Network};

#[test]
fn mlp_reaches_95_percent_on_real_mnist() -> Result<()> {
    let Some(dir) = rnn_testutil::mnist_dir() else {
        let why = "no MNIST folder (set RNN_MNIST_DIR to a folder with t10k-*-idx*-ubyte[.gz])";
        assert!(std::env::var("RNN_REQUIRE_MNIST").as_deref() != Ok("1"), "RNN_REQUIRE_MNIST=1: {why}");
        eprintln!("SKIPPED: {why}");
        return Ok(());
    };
    let all = load_mnist(&dir, MnistSplit::Test)?;
    assert_eq!(all.len(), 10_000);
    let (train, test) = all.split_at(8_000)?;
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
