"""rnn.nn: layers against numpy computations of the same formulas on their own weights,
PyTorch's parameter names, state dicts and safetensors files, losses, gradients."""

import numpy as np
import pytest

import rnn
from rnn import nn
from rnn.nn import functional as F

RNG = np.random.default_rng(7)


def randn(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


def test_linear_is_x_wt_plus_b():
    layer = nn.Linear(5, 3)
    assert [n for n, _ in layer.named_parameters()] == ["weight", "bias"]
    w, b = layer.weight.numpy(), layer.bias.numpy()
    assert w.shape == (3, 5) and np.all(np.abs(w) <= 1 / np.sqrt(5))
    x = randn(4, 5)
    np.testing.assert_allclose(layer(x).numpy(), x @ w.T + b, rtol=1e-5, atol=1e-6)


def test_sequential_names_and_forward():
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))
    assert list(model.state_dict()) == ["0.weight", "0.bias", "2.weight", "2.bias"]
    s = {k: v.numpy() for k, v in model.state_dict().items()}
    x = randn(3, 4)
    h = np.maximum(x @ s["0.weight"].T + s["0.bias"], 0)
    np.testing.assert_allclose(model(x).numpy(), h @ s["2.weight"].T + s["2.bias"], rtol=1e-5, atol=1e-6)
    assert model.num_parameters() == 4 * 8 + 8 + 8 * 2 + 2


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(10, 4)
        self.norm = nn.LayerNorm(4)
        self.head = nn.Linear(4, 3)

    def forward(self, ids):
        return self.head(self.norm(self.embed(ids)))


def test_custom_module_registers_children():
    net = Net()
    names = [n for n, _ in net.named_parameters()]
    assert names == ["embed.weight", "norm.weight", "norm.bias", "head.weight", "head.bias"]
    ids = np.array([[1, 2, 9]], dtype=np.int64)
    s = {k: v.numpy().astype(np.float64) for k, v in net.state_dict().items()}
    e = s["embed.weight"][ids[0]]
    n = (e - e.mean(-1, keepdims=True)) / np.sqrt(e.var(-1, keepdims=True) + 1e-5) * s["norm.weight"] + s["norm.bias"]
    np.testing.assert_allclose(net(ids).numpy()[0], n @ s["head.weight"].T + s["head.bias"], rtol=1e-4, atol=1e-5)
    with pytest.raises(ValueError):
        net(np.array([[10]], dtype=np.int64))


def test_conv_pool_flatten():
    conv = nn.Conv2d(2, 3, 3, padding=1)
    x = randn(1, 2, 5, 5)
    w, b = conv.weight.numpy(), conv.bias.numpy()
    xp = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))
    ref = np.zeros((1, 3, 5, 5), np.float64)
    for i in range(5):
        for j in range(5):
            ref[0, :, i, j] = np.tensordot(w, xp[0, :, i:i + 3, j:j + 3], axes=3) + b
    y = conv(x)
    np.testing.assert_allclose(y.numpy(), ref, rtol=1e-4, atol=1e-5)
    pooled = nn.MaxPool2d(2)(y).numpy()
    np.testing.assert_allclose(pooled, ref[:, :, :4, :4].reshape(1, 3, 2, 2, 2, 2).max(axis=(3, 5)), rtol=1e-4, atol=1e-5)
    assert nn.Flatten()(y).shape == (1, 75)
    assert nn.AvgPool2d(5)(y).shape == (1, 3, 1, 1)


def test_dropout_train_and_eval():
    rnn.manual_seed(1) if hasattr(rnn, "manual_seed") else None
    drop = nn.Dropout(0.5)
    x = np.ones((100, 100), np.float32)
    y = drop(x).numpy()
    assert set(np.unique(y)) <= {0.0, 2.0} and 0.4 < (y == 0).mean() < 0.6
    drop.eval()
    np.testing.assert_array_equal(drop(x).numpy(), x)
    assert not drop.training and drop.train().training


def test_batch_norm_uses_running_statistics_in_eval():
    bn = nn.BatchNorm1d(3)
    x = randn(16, 3) * 2 + 1
    y = bn(x).numpy()
    np.testing.assert_allclose(y.mean(0), 0, atol=1e-5)
    state = bn.state_dict()
    assert list(state) == ["weight", "bias", "running_mean", "running_var"]
    np.testing.assert_allclose(state["running_mean"].numpy(), 0.1 * x.mean(0), rtol=1e-4, atol=1e-6)
    bn.eval()
    mean, var = state["running_mean"].numpy(), state["running_var"].numpy()
    np.testing.assert_allclose(bn(x).numpy(), (x - mean) / np.sqrt(var + 1e-5), rtol=1e-4, atol=1e-5)


def test_multihead_attention_matches_its_formula():
    mha = nn.MultiheadAttention(8, 2)
    x = randn(2, 5, 8)
    s = {k: v.numpy().astype(np.float64) for k, v in mha.state_dict().items()}
    assert list(s) == ["in_proj_weight", "in_proj_bias", "out_proj.weight", "out_proj.bias"]
    qkv = x @ s["in_proj_weight"].T + s["in_proj_bias"]
    heads = [qkv[..., i * 8:(i + 1) * 8].reshape(2, 5, 2, 4).transpose(0, 2, 1, 3) for i in range(3)]
    scores = heads[0] @ heads[1].transpose(0, 1, 3, 2) / 2.0
    p = np.exp(scores - scores.max(-1, keepdims=True))
    o = ((p / p.sum(-1, keepdims=True)) @ heads[2]).transpose(0, 2, 1, 3).reshape(2, 5, 8)
    expected = o @ s["out_proj.weight"].T + s["out_proj.bias"]
    np.testing.assert_allclose(mha(x).numpy(), expected, rtol=1e-4, atol=1e-5)
    assert mha(x, is_causal=True).shape == (2, 5, 8)


def test_recurrent_layers_shapes_and_names():
    lstm = nn.LSTM(3, 5, num_layers=2)
    assert lstm(randn(2, 4, 3)).shape == (2, 4, 5)
    assert [n for n, _ in lstm.named_parameters()][:2] == ["weight_ih_l0", "weight_hh_l0"]
    assert nn.GRU(3, 5)(randn(1, 2, 3)).shape == (1, 2, 5)
    assert nn.RNN(3, 5, nonlinearity="relu")(randn(1, 2, 3)).shape == (1, 2, 5)


def test_activations():
    x = np.array([-2.0, -0.5, 0.0, 0.5, np.nan], np.float32)
    np.testing.assert_array_equal(nn.ReLU()(x).numpy(), [0, 0, 0, 0.5, np.nan])
    np.testing.assert_allclose(nn.LeakyReLU(0.1)(x).numpy()[:4], [-0.2, -0.05, 0, 0.5], rtol=1e-6)
    np.testing.assert_allclose(nn.Sigmoid()(x).numpy()[:4], 1 / (1 + np.exp(-x[:4])), rtol=1e-6)
    np.testing.assert_allclose(nn.Tanh()(x).numpy()[:4], np.tanh(x[:4]), rtol=1e-6)
    np.testing.assert_allclose(nn.SiLU()(x).numpy()[:4], x[:4] / (1 + np.exp(-x[:4])), rtol=1e-6)
    erf = np.vectorize(__import__("math").erf)
    np.testing.assert_allclose(nn.GELU()(x).numpy()[:4], 0.5 * x[:4] * (1 + erf(x[:4] / np.sqrt(2))), rtol=1e-5, atol=1e-7)
    soft = nn.Softmax()(randn(3, 4)).numpy()
    np.testing.assert_allclose(soft.sum(-1), 1, rtol=1e-6)


def test_losses_equal_their_formulas():
    logits, targets = randn(6, 4), np.array([0, 3, 1, 2, 2, 0], np.int64)
    z = logits - logits.max(1, keepdims=True)
    logp = z - np.log(np.exp(z).sum(1, keepdims=True))
    assert F.cross_entropy(logits, targets).item() == pytest.approx(-logp[np.arange(6), targets].mean(), rel=1e-5)
    smooth = -(0.9 * logp[np.arange(6), targets] + 0.1 * logp.mean(1)).mean()
    assert nn.CrossEntropyLoss(label_smoothing=0.1)(logits, targets).item() == pytest.approx(smooth, rel=1e-5)
    assert F.nll_loss(logp, targets, reduction="sum").item() == pytest.approx(-logp[np.arange(6), targets].sum(), rel=1e-5)
    a, b = randn(5, 3), randn(5, 3)
    assert nn.MSELoss()(a, b).item() == pytest.approx(((a - b) ** 2).mean(), rel=1e-5)
    assert nn.L1Loss(reduction="sum")(a, b).item() == pytest.approx(np.abs(a - b).sum(), rel=1e-5)
    d = np.abs(a - b)
    assert nn.HuberLoss(delta=0.5)(a, b).item() == pytest.approx(np.where(d < 0.5, 0.5 * d**2, 0.5 * (d - 0.25)).mean(), rel=1e-5)
    y = (b > 0).astype(np.float32)
    bce = np.mean(np.log1p(np.exp(a)) - a * y)
    assert nn.BCEWithLogitsLoss()(a, y).item() == pytest.approx(bce, rel=1e-5)
    p = 1 / (1 + np.exp(-a))
    assert F.binary_cross_entropy(p, y).item() == pytest.approx(bce, rel=1e-4)
    with pytest.raises(ValueError, match="reduction"):
        F.mse_loss(a, b, reduction="avg")
    with pytest.raises(ValueError):
        F.mse_loss(a, b[:, :2])


def test_state_dict_save_load(tmp_path):
    model = nn.Sequential(nn.Linear(3, 4), nn.BatchNorm1d(4))
    path = tmp_path / "m.safetensors"
    model.save(path, metadata={"epoch": "3"})
    assert nn.load_metadata(path) == {"epoch": "3"}
    other = nn.Sequential(nn.Linear(3, 4), nn.BatchNorm1d(4))
    other.load_weights(path)
    for (k, a), (k2, b) in zip(model.state_dict().items(), other.state_dict().items()):
        assert k == k2
        np.testing.assert_array_equal(a.numpy(), b.numpy())
    loaded = nn.load_file(path)
    assert list(loaded) == sorted(model.state_dict())


def test_load_state_dict_checks_everything_first():
    model = nn.Linear(3, 2)
    before = model.weight.numpy().copy()
    bad = {"weight": np.zeros((2, 3), np.float64), "bias": np.zeros(5, np.float32)}
    with pytest.raises(ValueError, match="bias"):
        model.load_state_dict(bad)
    np.testing.assert_array_equal(model.weight.numpy(), before)
    with pytest.raises(ValueError, match="missing|extra|unexpected"):
        model.load_state_dict({"weight": np.zeros((2, 3), np.float32)})
    result = model.load_state_dict({"weight": np.ones((2, 3))}, strict=False)
    assert result.missing_keys == ["bias"] and result.unexpected_keys == []
    np.testing.assert_array_equal(model.weight.numpy(), np.ones((2, 3)))


def test_to_dtype_keeps_values():
    layer = nn.Linear(3, 2)
    w = layer.weight.numpy()
    layer.to(dtype="f64")
    assert layer.weight.dtype == "f64"
    np.testing.assert_array_equal(layer.weight.numpy(), w.astype(np.float64))
    assert layer(np.ones((1, 3))).dtype == "f64"
    layer.to(rnn.float32)  # a dtype in the first place, as torch's module.to(torch.float32)
    assert layer.weight.dtype == "f32"
    np.testing.assert_array_equal(layer.weight.numpy(), w)


def test_bad_layer_configs_are_value_errors():
    with pytest.raises(ValueError):
        nn.Linear(0, 3)
    with pytest.raises(ValueError):
        nn.Dropout(1.5)
    with pytest.raises(ValueError):
        nn.Conv2d(3, 4, 3, groups=2)
    with pytest.raises(ValueError):
        nn.GELU("fast")


def test_gradients_reach_the_parameters():
    layer = nn.Linear(4, 2)
    x, y = randn(8, 4), randn(8, 2)
    loss = F.mse_loss(layer(x), y)
    loss.backward()
    w, b = layer.weight.numpy().astype(np.float64), layer.bias.numpy().astype(np.float64)
    r = 2 * (x @ w.T + b - y) / y.size
    np.testing.assert_allclose(layer.weight.grad.numpy(), r.T @ x, rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(layer.bias.grad.numpy(), r.sum(0), rtol=1e-4, atol=1e-6)
    layer.zero_grad()
    assert layer.weight.grad is None


def test_layers_move_to_a_gpu_and_agree_with_the_cpu():
    """On wgpu:0 (Mesa's lavapipe in CI) when there is one; skipped elsewhere."""
    if not rnn.Device("wgpu:0").is_available():
        pytest.skip("no wgpu adapter")
    model = nn.Sequential(nn.Linear(6, 5), nn.GELU(), nn.LayerNorm(5))
    x = randn(4, 6)
    expected = model(x).numpy()
    model.to("wgpu:0")
    assert str(model[0].weight.device) == "wgpu:0"
    np.testing.assert_allclose(model(rnn.Tensor(x, device="wgpu:0")).numpy(), expected, rtol=1e-4, atol=1e-5)
