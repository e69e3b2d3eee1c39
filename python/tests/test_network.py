"""rnn.Network: the builder with the Rust names, train / evaluate / predict on numpy arrays,
progress output, save / load; results equal the Rust API's (fixtures/rust_reference.json)."""

import numpy as np
import pytest

import rnn
from reference import array, values

A = rnn.ActivationFunction
L = rnn.LayerBuilder


def reference_network():
    return (
        rnn.Network.with_input_size(6)
        .add_layer(L.dense(16).activation(A.ReLU))
        .add_layer(L.dense(3).activation(A.Softmax))
        .loss(rnn.LossFunction.CategoricalCrossEntropy)
        .seed(5)
        .build()
    )


REFERENCE_CONFIG = dict(max_epochs=3, batch_size=8, learning_rate=0.01, validation_split=0.25, seed=9,
                        verbose=False, use_gpu=False)


def test_training_equals_the_rust_api_on_the_same_inputs():
    net = reference_network()
    x, y = array("network_x"), array("network_y", np.int64)
    history = net.train(x, y, rnn.TrainingConfig(**REFERENCE_CONFIG))
    np.testing.assert_allclose(history.train_loss, values("network_train_loss"), rtol=1e-5)
    np.testing.assert_allclose(history.val_loss, values("network_val_loss"), rtol=1e-5)
    ev = net.evaluate(x, y)
    np.testing.assert_allclose([ev.loss, ev.accuracy], values("network_eval"), rtol=1e-5)
    np.testing.assert_allclose(net.predict(x), array("network_predict"), rtol=1e-5, atol=1e-6)
    assert history.epochs() == 3 and len(history.val_metrics["accuracy"]) == 3


def test_keyword_overrides_equal_a_config():
    x, y = array("network_x"), array("network_y", np.int64)
    a, b = reference_network(), reference_network()
    ha = a.train(x, y, rnn.TrainingConfig(**REFERENCE_CONFIG))
    hb = b.train(x, y, **REFERENCE_CONFIG)
    assert ha.train_loss == hb.train_loss


def test_classifier_learns_and_predicts_classes():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((256, 4)).astype(np.float32)
    y = (x[:, 0] + x[:, 1] > 0).astype(np.int64)
    net = rnn.Network.with_input_size(4).add_layer(L.dense(16).activation("relu")) \
        .add_layer(L.dense(2).activation("softmax")).build()
    history = net.train(x, y, max_epochs=15, learning_rate=0.01, verbose=False, use_gpu=False)
    assert history.train_loss[-1] < history.train_loss[0]
    classes = net.predict_classes(x)
    assert classes.dtype == np.uint32 and classes.shape == (256,)
    assert (classes == y).mean() > 0.9
    probs = net.predict(x)
    np.testing.assert_allclose(probs.sum(axis=1), 1.0, rtol=1e-5)
    np.testing.assert_array_equal(np.argmax(probs, axis=1), classes)


def test_progress_goes_to_stderr(capfd):
    x, y = array("network_x"), array("network_y", np.int64)
    reference_network().train(x, y, max_epochs=2, batch_size=8, use_gpu=False, verbose=True)
    err = capfd.readouterr().err
    assert "training on cpu" in err
    assert "epoch 1/2" in err and "epoch 2/2" in err and "loss" in err


def test_regression_with_mse():
    x = np.linspace(-1, 1, 64, dtype=np.float32).reshape(64, 1)
    net = rnn.Network.with_input_size(1).add_layer(L.dense(1)).loss(rnn.LossFunction.MeanSquaredError).build()
    net.train(x, 3 * x + 1, max_epochs=60, batch_size=16, learning_rate=0.05, verbose=False, use_gpu=False)
    state = net.state_dict()
    assert sorted(state) == ["layers.0.bias", "layers.0.weight"]
    np.testing.assert_allclose(state["layers.0.weight"].numpy(), [[3.0]], atol=0.1)
    assert net.evaluate(x, 3 * x + 1).accuracy is None


def test_save_load_and_load_weights(tmp_path):
    x, y = array("network_x"), array("network_y", np.int64)
    net = reference_network()
    net.train(x, y, **REFERENCE_CONFIG)
    path = tmp_path / "model.safetensors"
    net.save(path)
    loaded = rnn.Network.load(path)
    np.testing.assert_array_equal(loaded.predict(x), net.predict(x))
    fresh = reference_network()
    fresh.load_weights(str(path))
    np.testing.assert_array_equal(fresh.predict(x), net.predict(x))
    assert "dense(16, ReLU)" in net.summary() and net.num_parameters() == 6 * 16 + 16 + 16 * 3 + 3
    assert net.input_shape == [6] and net.output_shape == [3]


def test_conv_network_on_images():
    x = np.random.default_rng(1).standard_normal((8, 1, 8, 8)).astype(np.float32)
    net = rnn.Network.with_input_shape([1, 8, 8]).add_layer(L.conv2d(4, 3).activation(A.ReLU)) \
        .add_layer(L.max_pool2d(2)).add_layer(L.flatten()).add_layer(L.dense(2).activation(A.Softmax)).build()
    net.train(x, np.arange(8) % 2, max_epochs=1, verbose=False, use_gpu=False)
    assert net.predict(x).shape == (8, 2)


def test_bad_inputs_are_clear_errors():
    net = reference_network()
    with pytest.raises(ValueError, match=r"expected \[n, 6\]"):
        net.predict(np.zeros((4, 5), np.float32))
    with pytest.raises(ValueError, match="learning_rate"):
        net.train(np.zeros((4, 6), np.float32), np.zeros(4, np.int64), learning_rate=-1.0, verbose=False)
    with pytest.raises(TypeError, match="unknown training option 'epochs'"):
        net.train(np.zeros((4, 6), np.float32), np.zeros(4, np.int64), epochs=3)
    with pytest.raises(ValueError, match="unknown optimizer"):
        net.train(np.zeros((4, 6), np.float32), np.zeros(4, np.int64), optimizer="lbfgs", verbose=False)
    with pytest.raises(ValueError, match="no layers"):
        rnn.Network.with_input_size(3).build()
    with pytest.raises(OSError):
        rnn.Network.load("/nonexistent/model.safetensors")
    with pytest.raises(ValueError, match="unknown activation"):
        L.dense(3).activation("swishy")


def test_config_fields_and_schedules():
    config = rnn.TrainingConfig(max_epochs=4, optimizer="sgd", momentum=0.9,
                                lr_schedule=rnn.LrSchedule.step(1, 0.5),
                                early_stopping=rnn.EarlyStopping(patience=2))
    assert config.max_epochs == 4 and config.batch_size == 32 and config.optimizer == "sgd"
    x, y = array("network_x"), array("network_y", np.int64)
    history = reference_network().train(x, y, config, learning_rate=0.1, verbose=False, use_gpu=False,
                                        validation_split=0.25)
    np.testing.assert_allclose(history.learning_rates[:3], [0.1, 0.05, 0.025])


def test_training_releases_the_gil():
    """Another Python thread runs while Network.train works in Rust."""
    import threading
    import time

    x = np.random.default_rng(2).standard_normal((4096, 64)).astype(np.float32)
    y = np.arange(4096) % 10
    net = rnn.Network.with_input_size(64).add_layer(L.dense(256).activation("relu")) \
        .add_layer(L.dense(10).activation("softmax")).build()
    worker = threading.Thread(target=lambda: net.train(x, y, max_epochs=10, verbose=False, use_gpu=False))
    ticks, start = 0, time.perf_counter()
    worker.start()
    while worker.is_alive():
        ticks += 1
        time.sleep(0.001)
    elapsed = time.perf_counter() - start
    # With the GIL held for the whole call the loop could not run until training ended:
    # one tick. Each tick sleeps 1 ms, so more than 10 also means training took that long
    # (3 epochs took 45 ms on a 2-core AVX-512 EPYC, too close to a fixed time bound).
    assert ticks > 10, (elapsed, ticks)
