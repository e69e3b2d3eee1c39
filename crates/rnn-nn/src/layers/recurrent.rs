//! Recurrent layers: [`Rnn`] (tanh or relu), [`Lstm`] and [`Gru`], stacked `num_layers`
//! deep, with PyTorch's parameter names, shapes, gate orders and initialization, so weights
//! copied from `torch.nn.RNN/LSTM/GRU` give the same results.
//!
//! Input is `[batch, time, features]` when `batch_first` (our default, see
//! [`RecurrentConfig`]) and `[time, batch, features]` otherwise (PyTorch's default). States
//! are `[num_layers, batch, hidden]` either way. Per layer, the input projection of every
//! time step is one matmul; only the hidden-to-hidden product runs step by step.
//! Bidirectional layers and dropout between layers are not supported.

use rnn_core::{DType, Error, Result, Tensor};

use crate::{Init, Module, VarBuilder};

/// Options shared by [`Rnn`], [`Lstm`] and [`Gru`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RecurrentConfig {
    /// Stacked layers; layer `l > 0` reads the hidden states of layer `l - 1`.
    pub num_layers: usize,
    /// Whether the layers have `bias_ih_l*` / `bias_hh_l*`.
    pub bias: bool,
    /// `true`: input and output are `[batch, time, features]`. PyTorch's default is
    /// `false` (`[time, batch, features]`); ours is `true`, the layout most data comes in.
    pub batch_first: bool,
}

impl Default for RecurrentConfig {
    fn default() -> Self {
        RecurrentConfig { num_layers: 1, bias: true, batch_first: true }
    }
}

/// The nonlinearity of a plain [`Rnn`]: `h' = act(W_ih x + b_ih + W_hh h + b_hh)`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum RnnNonlinearity {
    #[default]
    Tanh,
    Relu,
}

/// The parameters of one layer, in PyTorch's layout: `weight_ih` `[gates * hidden, input]`,
/// `weight_hh` `[gates * hidden, hidden]`, biases `[gates * hidden]`, where gates is 1 for
/// Rnn, 4 for Lstm (i, f, g, o) and 3 for Gru (r, z, n).
#[derive(Clone, Debug)]
pub struct RecurrentWeights {
    pub weight_ih: Tensor,
    pub weight_hh: Tensor,
    pub bias_ih: Option<Tensor>,
    pub bias_hh: Option<Tensor>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Cell {
    Rnn(RnnNonlinearity),
    Lstm,
    Gru,
}

impl Cell {
    fn gates(self) -> usize {
        match self {
            Cell::Rnn(_) => 1,
            Cell::Lstm => 4,
            Cell::Gru => 3,
        }
    }

    fn name(self) -> &'static str {
        match self {
            Cell::Rnn(_) => "Rnn",
            Cell::Lstm => "Lstm",
            Cell::Gru => "Gru",
        }
    }
}

/// The hidden state (and LSTM cell state) of one layer, `[batch, hidden]`.
struct State {
    h: Tensor,
    c: Option<Tensor>,
}

/// What the three layer types share: the weights and the time loop.
struct Stack {
    cell: Cell,
    layers: Vec<RecurrentWeights>,
    input_size: usize,
    hidden_size: usize,
    batch_first: bool,
}

impl Stack {
    /// PyTorch's initialization: every weight and bias U(±1/sqrt(hidden)).
    fn new(cell: Cell, input: usize, hidden: usize, config: RecurrentConfig, vb: &mut VarBuilder) -> Result<Stack> {
        if input == 0 || hidden == 0 || config.num_layers == 0 {
            let msg = format!(
                "input_size {input}, hidden_size {hidden} and num_layers {} must all be > 0",
                config.num_layers
            );
            return Err(crate::init::bad_config(cell.name(), msg));
        }
        let bound = 1.0 / (hidden as f64).sqrt();
        let init = Init::Uniform { lo: -bound, hi: bound };
        let rows = cell.gates() * hidden;
        let mut layers = Vec::with_capacity(config.num_layers);
        for l in 0..config.num_layers {
            let layer_input = if l == 0 { input } else { hidden };
            let weight_ih = vb.var(&[rows, layer_input], init)?;
            let weight_hh = vb.var(&[rows, hidden], init)?;
            let (bias_ih, bias_hh) = match config.bias {
                true => (Some(vb.var(&[rows], init)?), Some(vb.var(&[rows], init)?)),
                false => (None, None),
            };
            layers.push(RecurrentWeights { weight_ih, weight_hh, bias_ih, bias_hh });
        }
        Ok(Stack { cell, layers, input_size: input, hidden_size: hidden, batch_first: config.batch_first })
    }

    /// A stack from existing weights, checked for consistent shapes, dtypes and devices.
    fn from_weights(cell: Cell, layers: Vec<RecurrentWeights>, batch_first: bool) -> Result<Stack> {
        let name = cell.name();
        let first = layers.first().ok_or_else(|| Error::invalid(name, "needs at least one layer"))?;
        let (rows, input_size) = match first.weight_ih.dims() {
            &[rows, input] => (rows, input),
            other => return Err(Error::invalid(name, format!("weight_ih_l0 must be 2-D, got {other:?}"))),
        };
        if rows == 0 || rows % cell.gates() != 0 || input_size == 0 {
            let msg =
                format!("weight_ih_l0 {:?} must be [{} * hidden, input], non-empty", [rows, input_size], cell.gates());
            return Err(Error::invalid(name, msg));
        }
        let hidden_size = rows / cell.gates();
        let (dtype, device) = (first.weight_ih.dtype(), first.weight_ih.device());
        if !dtype.is_float() {
            return Err(Error::UnsupportedDType { op: name, dtype, hint: ": weights must be float" });
        }
        for (l, w) in layers.iter().enumerate() {
            let layer_input = if l == 0 { input_size } else { hidden_size };
            let expected: [(&str, Option<&Tensor>, Vec<usize>); 4] = [
                ("weight_ih", Some(&w.weight_ih), vec![rows, layer_input]),
                ("weight_hh", Some(&w.weight_hh), vec![rows, hidden_size]),
                ("bias_ih", w.bias_ih.as_ref(), vec![rows]),
                ("bias_hh", w.bias_hh.as_ref(), vec![rows]),
            ];
            for (what, tensor, dims) in expected {
                let Some(t) = tensor else { continue };
                if t.dims() != dims.as_slice() || t.dtype() != dtype || t.device() != device {
                    let msg = format!(
                        "{what}_l{l} is {:?} {:?} on {:?}, expected {dims:?} {dtype:?} on {device:?}",
                        t.dims(),
                        t.dtype(),
                        t.device()
                    );
                    return Err(Error::invalid(name, msg));
                }
            }
        }
        Ok(Stack { cell, layers, input_size, hidden_size, batch_first })
    }

    fn named_parameters(&self) -> Vec<(String, Tensor)> {
        let mut named = Vec::new();
        for (l, w) in self.layers.iter().enumerate() {
            named.push((format!("weight_ih_l{l}"), w.weight_ih.clone()));
            named.push((format!("weight_hh_l{l}"), w.weight_hh.clone()));
            named.extend(w.bias_ih.iter().map(|b| (format!("bias_ih_l{l}"), b.clone())));
            named.extend(w.bias_hh.iter().map(|b| (format!("bias_hh_l{l}"), b.clone())));
        }
        named
    }

    fn dtype(&self) -> DType {
        self.layers[0].weight_ih.dtype()
    }

    /// Runs every layer over the whole sequence: (output, h_n, c_n for an LSTM).
    fn run(&self, x: &Tensor, h0: Option<&Tensor>, c0: Option<&Tensor>) -> Result<(Tensor, Tensor, Option<Tensor>)> {
        let (batch, steps) = self.check_input(x)?;
        let h0 = self.initial_state(h0, "h0", x, batch)?;
        let c0 = match self.cell {
            Cell::Lstm => Some(self.initial_state(c0, "c0", x, batch)?),
            _ => None,
        };
        let time_dim = if self.batch_first { 1 } else { 0 };
        let mut input = x.clone();
        let (mut h_n, mut c_n) = (Vec::with_capacity(self.layers.len()), Vec::new());
        for (l, weights) in self.layers.iter().enumerate() {
            let layer_state = |s: &Tensor| s.narrow(0, l, 1)?.squeeze(0);
            let c = c0.as_ref().map(layer_state).transpose()?;
            let state = State { h: layer_state(&h0)?, c };
            let (output, last) = self.run_layer(weights, &input, state, time_dim, steps)?;
            input = output;
            h_n.push(last.h);
            c_n.extend(last.c);
        }
        let c_n = match c0 {
            Some(_) => Some(Tensor::stack(&c_n, 0)?),
            None => None,
        };
        Ok((input, Tensor::stack(&h_n, 0)?, c_n))
    }

    /// Checks `x` and returns (batch, steps).
    fn check_input(&self, x: &Tensor) -> Result<(usize, usize)> {
        let name = self.cell.name();
        let &[a, b, features] = x.dims() else {
            let layout = if self.batch_first { "[batch, time, features]" } else { "[time, batch, features]" };
            let msg = format!("input must be {layout}, got shape {:?}", x.dims());
            return Err(Error::invalid(name, msg));
        };
        let (batch, steps) = if self.batch_first { (a, b) } else { (b, a) };
        if features != self.input_size {
            let msg =
                format!("input has {features} features (shape {:?}), the layer expects {}", x.dims(), self.input_size);
            return Err(Error::invalid(name, msg));
        }
        if batch == 0 || steps == 0 {
            return Err(Error::EmptyTensor { op: name, shape: x.shape().clone() });
        }
        if x.dtype() != self.dtype() {
            return Err(Error::DTypeMismatch { op: name, lhs: x.dtype(), rhs: self.dtype() });
        }
        Ok((batch, steps))
    }

    /// The given initial state, checked, or zeros: `[num_layers, batch, hidden]`.
    fn initial_state(&self, given: Option<&Tensor>, what: &str, x: &Tensor, batch: usize) -> Result<Tensor> {
        let dims = [self.layers.len(), batch, self.hidden_size];
        let Some(state) = given else {
            return Tensor::zeros(&dims[..], self.dtype(), x.device());
        };
        if state.dims() != dims || state.dtype() != self.dtype() {
            let msg = format!(
                "{what} is {:?} {:?}, expected [num_layers, batch, hidden] = {dims:?} {:?}",
                state.dims(),
                state.dtype(),
                self.dtype()
            );
            return Err(Error::invalid(self.cell.name(), msg));
        }
        Ok(state.clone())
    }

    /// One layer over all steps: the stacked hidden states and the last state.
    fn run_layer(
        &self,
        w: &RecurrentWeights,
        input: &Tensor,
        mut state: State,
        time_dim: usize,
        steps: usize,
    ) -> Result<(Tensor, State)> {
        let projected = self.input_projection(w, input)?;
        let weight_hh_t = w.weight_hh.t()?;
        let mut outputs = Vec::with_capacity(steps);
        for t in 0..steps {
            let x_t = projected.narrow(time_dim, t, 1)?.squeeze(time_dim)?;
            state = self.step(w, &weight_hh_t, &x_t, state)?;
            outputs.push(state.h.clone());
        }
        Ok((Tensor::stack(&outputs, time_dim)?, state))
    }

    /// `x W_ihᵀ + b_ih` for every step at once, `[.., .., gates * hidden]`. For Rnn and Lstm
    /// `b_hh` is folded in here too; Gru needs it inside `r * (W_hn h + b_hn)`.
    fn input_projection(&self, w: &RecurrentWeights, input: &Tensor) -> Result<Tensor> {
        let dims = input.dims();
        let (a, b) = (dims[0], dims[1]);
        let flat = input.reshape((a * b, dims[2]))?;
        let mut projected = flat.matmul(&w.weight_ih.t()?)?;
        let bias = match (self.cell, &w.bias_ih, &w.bias_hh) {
            (Cell::Gru, ih, _) => ih.clone(),
            (_, Some(ih), Some(hh)) => Some(ih.add(hh)?),
            (_, ih, hh) => ih.clone().or_else(|| hh.clone()),
        };
        if let Some(bias) = bias {
            projected = projected.add(&bias)?;
        }
        projected.reshape((a, b, w.weight_ih.dims()[0]))
    }

    /// One time step; `x_t` is the projected input `[batch, gates * hidden]`.
    fn step(&self, w: &RecurrentWeights, weight_hh_t: &Tensor, x_t: &Tensor, state: State) -> Result<State> {
        let hidden = state.h.matmul(weight_hh_t)?;
        match self.cell {
            Cell::Rnn(act) => {
                let pre = x_t.add(&hidden)?;
                let h = match act {
                    RnnNonlinearity::Tanh => pre.tanh()?,
                    RnnNonlinearity::Relu => pre.relu()?,
                };
                Ok(State { h, c: None })
            }
            Cell::Lstm => self.lstm_step(&x_t.add(&hidden)?, state),
            Cell::Gru => {
                let hidden = match &w.bias_hh {
                    Some(b) => hidden.add(b)?,
                    None => hidden,
                };
                self.gru_step(x_t, &hidden, state)
            }
        }
    }

    /// `c' = f c + i g`, `h' = o tanh(c')`, gates i, f, g, o in that order.
    fn lstm_step(&self, gates: &Tensor, state: State) -> Result<State> {
        let n = self.hidden_size;
        let gate = |k: usize| gates.narrow(1, k * n, n);
        let (i, f, g, o) = (gate(0)?.sigmoid()?, gate(1)?.sigmoid()?, gate(2)?.tanh()?, gate(3)?.sigmoid()?);
        let c_prev = state.c.ok_or_else(|| Error::Msg("Lstm: missing cell state".into()))?;
        let c = f.mul(&c_prev)?.add(&i.mul(&g)?)?;
        let h = o.mul(&c.tanh()?)?;
        Ok(State { h, c: Some(c) })
    }

    /// `r, z = σ(x_r + h_r), σ(x_z + h_z)`, `n = tanh(x_n + r h_n)`, `h' = (1 - z) n + z h`,
    /// where `h_*` already include `b_hh`.
    fn gru_step(&self, x_t: &Tensor, hidden: &Tensor, state: State) -> Result<State> {
        let n = self.hidden_size;
        let part = |t: &Tensor, k: usize| t.narrow(1, k * n, n);
        let r = part(x_t, 0)?.add(&part(hidden, 0)?)?.sigmoid()?;
        let z = part(x_t, 1)?.add(&part(hidden, 1)?)?.sigmoid()?;
        let candidate = part(x_t, 2)?.add(&r.mul(&part(hidden, 2)?)?)?.tanh()?;
        // (1 - z) n + z h = n + z (h - n)
        let h = candidate.add(&z.mul(&state.h.sub(&candidate)?)?)?;
        Ok(State { h, c: None })
    }
}

macro_rules! recurrent_accessors {
    ($ty:ident) => {
        impl $ty {
            pub fn input_size(&self) -> usize {
                self.stack.input_size
            }
            pub fn hidden_size(&self) -> usize {
                self.stack.hidden_size
            }
            pub fn num_layers(&self) -> usize {
                self.stack.layers.len()
            }
            pub fn batch_first(&self) -> bool {
                self.stack.batch_first
            }
            /// The weights of each layer, first layer first.
            pub fn layers(&self) -> &[RecurrentWeights] {
                &self.stack.layers
            }
        }

        impl Module for $ty {
            /// The output sequence (hidden states of the last layer at every step).
            fn forward(&self, xs: &Tensor) -> Result<Tensor> {
                Ok(self.stack.run(xs, None, None)?.0)
            }

            /// `weight_ih_l{k}`, `weight_hh_l{k}`, `bias_ih_l{k}`, `bias_hh_l{k}` per layer.
            fn named_parameters(&self) -> Vec<(String, Tensor)> {
                self.stack.named_parameters()
            }
        }
    };
}

/// Elman RNN: `h_t = act(W_ih x_t + b_ih + W_hh h_{t-1} + b_hh)`, like `torch.nn.RNN`.
pub struct Rnn {
    stack: Stack,
}

impl Rnn {
    pub fn new(
        input_size: usize,
        hidden_size: usize,
        nonlinearity: RnnNonlinearity,
        config: RecurrentConfig,
        vb: &mut VarBuilder,
    ) -> Result<Self> {
        Ok(Rnn { stack: Stack::new(Cell::Rnn(nonlinearity), input_size, hidden_size, config, vb)? })
    }

    /// A layer from existing weights (one entry per layer, gates = 1).
    pub fn from_weights(
        layers: Vec<RecurrentWeights>,
        nonlinearity: RnnNonlinearity,
        batch_first: bool,
    ) -> Result<Self> {
        Ok(Rnn { stack: Stack::from_weights(Cell::Rnn(nonlinearity), layers, batch_first)? })
    }

    /// The output sequence (`[batch, time, hidden]` when batch_first) and the last hidden
    /// state of every layer `[num_layers, batch, hidden]`. `h0` defaults to zeros.
    pub fn forward_with_state(&self, x: &Tensor, h0: Option<&Tensor>) -> Result<(Tensor, Tensor)> {
        let (output, h_n, _) = self.stack.run(x, h0, None)?;
        Ok((output, h_n))
    }
}
recurrent_accessors!(Rnn);

/// Long short-term memory, like `torch.nn.LSTM`: gates i, f, g, o;
/// `c_t = f c_{t-1} + i g`, `h_t = o tanh(c_t)`.
pub struct Lstm {
    stack: Stack,
}

impl Lstm {
    pub fn new(input_size: usize, hidden_size: usize, config: RecurrentConfig, vb: &mut VarBuilder) -> Result<Self> {
        Ok(Lstm { stack: Stack::new(Cell::Lstm, input_size, hidden_size, config, vb)? })
    }

    /// A layer from existing weights (one entry per layer, gates = 4).
    pub fn from_weights(layers: Vec<RecurrentWeights>, batch_first: bool) -> Result<Self> {
        Ok(Lstm { stack: Stack::from_weights(Cell::Lstm, layers, batch_first)? })
    }

    /// The output sequence and the last hidden and cell states `[num_layers, batch, hidden]`:
    /// `(output, h_n, c_n)`. `h0` and `c0` each default to zeros.
    pub fn forward_with_state(
        &self,
        x: &Tensor,
        h0: Option<&Tensor>,
        c0: Option<&Tensor>,
    ) -> Result<(Tensor, Tensor, Tensor)> {
        let (output, h_n, c_n) = self.stack.run(x, h0, c0)?;
        let c_n = c_n.ok_or_else(|| Error::Msg("Lstm: no cell state was computed".into()))?;
        Ok((output, h_n, c_n))
    }
}
recurrent_accessors!(Lstm);

/// Gated recurrent unit, like `torch.nn.GRU`: gates r, z, n;
/// `n = tanh(W_in x + b_in + r (W_hn h + b_hn))`, `h_t = (1 - z) n + z h_{t-1}`.
pub struct Gru {
    stack: Stack,
}

impl Gru {
    pub fn new(input_size: usize, hidden_size: usize, config: RecurrentConfig, vb: &mut VarBuilder) -> Result<Self> {
        Ok(Gru { stack: Stack::new(Cell::Gru, input_size, hidden_size, config, vb)? })
    }

    /// A layer from existing weights (one entry per layer, gates = 3).
    pub fn from_weights(layers: Vec<RecurrentWeights>, batch_first: bool) -> Result<Self> {
        Ok(Gru { stack: Stack::from_weights(Cell::Gru, layers, batch_first)? })
    }

    /// The output sequence and the last hidden state of every layer; `h0` defaults to zeros.
    pub fn forward_with_state(&self, x: &Tensor, h0: Option<&Tensor>) -> Result<(Tensor, Tensor)> {
        let (output, h_n, _) = self.stack.run(x, h0, None)?;
        Ok((output, h_n))
    }
}
recurrent_accessors!(Gru);
