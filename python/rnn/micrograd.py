"""micrograd_rs's API: scalar values with autograd, on the CPU or a GPU.

``from rnn.micrograd import Value, Device, MLP``::

    device = Device.gpu() if Device.is_gpu_available() else Device.cpu()
    model = MLP(3, [4, 4, 1], device=device)
    loss = (model([2.0, 3.0, -1.0]) - 1.0) ** 2
    loss.backward()
    for p in model.parameters():
        p.data -= 0.05 * p.grad

Each ``Value`` is a rank-0 ``rnn`` tensor: its arithmetic and gradients are the library's
ops and autograd (f64 where the device has it, f32 on wgpu). ``Neuron``, ``Layer`` and
``MLP`` are micrograd's: weights uniform in [-1, 1) from rnn's generator (seeded by
``rnn.manual_seed``), biases 0, ReLU on every layer but the last.
"""

from ._rnn import MicrogradDevice as Device
from ._rnn import Value, _uniform

__all__ = ["Value", "Device", "Module", "Neuron", "Layer", "MLP"]


class Module:
    def zero_grad(self):
        """Sets every parameter's ``grad`` to 0 (gradients accumulate over ``backward`` calls)."""
        for p in self.parameters():
            p.grad = 0.0

    def parameters(self):
        return []


class Neuron(Module):
    """``act(sum(w_i * x_i) + b)`` with ``act`` ReLU when ``nonlin``, else the identity."""

    def __init__(self, nin, nonlin=True, device=None):
        device = Device.cpu() if device is None else device
        self.w = [Value(x, device=device) for x in _uniform(nin, -1.0, 1.0)]
        self.b = Value(0.0, device=device)
        self.nonlin = nonlin

    def __call__(self, x):
        act = sum((wi * xi for wi, xi in zip(self.w, x)), self.b)
        return act.relu() if self.nonlin else act

    def parameters(self):
        return self.w + [self.b]

    def __repr__(self):
        return f"{'ReLU' if self.nonlin else 'Linear'}Neuron({len(self.w)})"


class Layer(Module):
    def __init__(self, nin, nout, nonlin=True, device=None):
        self.neurons = [Neuron(nin, nonlin, device) for _ in range(nout)]

    def __call__(self, x):
        out = [n(x) for n in self.neurons]
        return out[0] if len(out) == 1 else out

    def parameters(self):
        return [p for n in self.neurons for p in n.parameters()]

    def __repr__(self):
        return f"Layer of [{', '.join(str(n) for n in self.neurons)}]"


class MLP(Module):
    """``MLP(nin, layer_sizes, device=...)``: layers of ``layer_sizes[i]`` neurons; calling it
    on ``nin`` inputs (numbers or Values) returns a Value, or a list for several outputs."""

    def __init__(self, nin, nouts, device=None):
        sizes = [nin] + list(nouts)
        self.device = Device.cpu() if device is None else device
        self.layers = [
            Layer(sizes[i], sizes[i + 1], nonlin=i != len(nouts) - 1, device=self.device)
            for i in range(len(nouts))
        ]

    def __call__(self, x):
        for layer in self.layers:
            x = layer(x)
            x = x if isinstance(x, list) else [x]
        return x[0] if len(x) == 1 else x

    def parameters(self):
        return [p for layer in self.layers for p in layer.parameters()]

    def __repr__(self):
        return f"MLP of [{', '.join(str(layer) for layer in self.layers)}]"
