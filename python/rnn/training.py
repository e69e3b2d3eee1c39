"""``rnn.Network`` and its builder vocabulary, mirroring the Rust names (also at ``rnn.*``)::

    net = (rnn.Network.with_input_size(784)
           .add_layer(rnn.LayerBuilder.dense(128).activation(rnn.ActivationFunction.ReLU))
           .add_layer(rnn.LayerBuilder.dense(10).activation(rnn.ActivationFunction.Softmax))
           .loss(rnn.LossFunction.CategoricalCrossEntropy)
           .build())
    history = net.train(x, y, max_epochs=5, validation_split=0.2)   # numpy arrays in
    print(net.evaluate(x_test, y_test).accuracy)
    probs = net.predict(x_test)                                       # numpy array out
"""

from ._rnn import (
    ActivationFunction,
    EarlyStopping,
    Evaluation,
    History,
    LayerBuilder,
    LossFunction,
    LrSchedule,
    Network,
    NetworkBuilder,
    TrainingConfig,
)

__all__ = [
    "ActivationFunction", "EarlyStopping", "Evaluation", "History", "LayerBuilder", "LossFunction",
    "LrSchedule", "Network", "NetworkBuilder", "TrainingConfig",
]
