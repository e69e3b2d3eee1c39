//! Writes `python/tests/fixtures/rust_reference.json`: inputs and what the Rust API computes
//! from them, so the Python tests can check that `rnn`'s Python API gives the same results
//! (the Network's training history and predictions, optimizer steps, micrograd values and
//! gradients, the neural_arch backend ops). Regenerate after changing the library:
//!
//! ```sh
//! cargo run -p rnn-python --example rust_reference > python/tests/fixtures/rust_reference.json
//! ```

use rnn_core::{scaled_dot_product_attention, AttentionMask, DType, Device, Epilogue, GradStore, Result, Tensor};
use rnn_nn::optim::{Adam, AdamConfig, Optimizer, Sgd, SgdConfig};
use rnn_train::{ActivationFunction, LayerBuilder, LossFunction, Network, TrainingConfig};

/// Deterministic inputs: `sin` of a linear index, scaled (the values are written to the
/// fixture, so Python reads them rather than recomputing them).
fn data(shape: &[usize], phase: f64) -> Result<Tensor> {
    let n: usize = shape.iter().product();
    let values: Vec<f32> = (0..n).map(|i| ((i as f64 * 0.37 + phase).sin() * 1.5) as f32).collect();
    Tensor::from_vec(values, shape, Device::Cpu)
}

/// `"name": {"shape": [..], "data": [..]}` of a tensor (values as f64).
fn entry(name: &str, t: &Tensor) -> Result<String> {
    let values: Vec<String> =
        t.to_dtype(DType::F64)?.flatten_all()?.to_vec::<f64>()?.iter().map(|v| format!("{v:?}")).collect();
    Ok(format!("\"{name}\": {{\"shape\": {:?}, \"data\": [{}]}}", t.dims(), values.join(", ")))
}

fn list(name: &str, values: &[f64]) -> String {
    let items: Vec<String> = values.iter().map(|v| format!("{v:?}")).collect();
    format!("\"{name}\": [{}]", items.join(", "))
}

/// A 6-16-3 classifier trained 3 epochs on 40 samples (Adam, batches of 8, shuffled).
fn network() -> Result<Vec<String>> {
    let x = data(&[40, 6], 0.0)?;
    let labels: Vec<u32> = (0..40u32).map(|i| (i * 7 + 3) % 3).collect();
    let y = Tensor::from_vec(labels, 40, Device::Cpu)?;
    let mut net = Network::with_input_size(6)?
        .add_layer(LayerBuilder::dense(16).activation(ActivationFunction::ReLU))
        .add_layer(LayerBuilder::dense(3).activation(ActivationFunction::Softmax))
        .loss(LossFunction::CategoricalCrossEntropy)
        .seed(5)
        .build()?;
    let config = TrainingConfig {
        max_epochs: 3,
        batch_size: 8,
        learning_rate: 0.01,
        validation_split: 0.25,
        seed: 9,
        verbose: false,
        use_gpu: false,
        ..Default::default()
    };
    let history = net.train(&x, &y, &config)?;
    let eval = net.evaluate(&x, &y)?;
    Ok(vec![
        entry("network_x", &x)?,
        entry("network_y", &y)?,
        list("network_train_loss", &history.train_loss),
        list("network_val_loss", &history.val_loss),
        list("network_eval", &[eval.loss, eval.accuracy.unwrap_or(f64::NAN)]),
        entry("network_predict", &net.predict(&x)?)?,
    ])
}

/// Builds an optimizer over one parameter.
type MakeOptimizer = Box<dyn Fn(Tensor) -> Result<Box<dyn Optimizer>>>;

/// Three steps of SGD with momentum and of Adam on `p` with the gradient `g * step`.
fn optimizers() -> Result<Vec<String>> {
    let start = data(&[2, 3], 1.0)?;
    let grad = data(&[2, 3], 2.0)?;
    let mut out = vec![entry("optim_start", &start)?, entry("optim_grad", &grad)?];
    let sgd = SgdConfig { lr: 0.1, momentum: 0.9, ..Default::default() };
    let adam = AdamConfig { lr: 0.05, ..Default::default() };
    let builds: [(&str, MakeOptimizer); 2] = [
        ("optim_sgd", Box::new(move |p| Ok(Box::new(Sgd::new(vec![p], sgd.clone())?)))),
        ("optim_adam", Box::new(move |p| Ok(Box::new(Adam::new(vec![p], adam.clone())?)))),
    ];
    for (name, build) in builds {
        let p = start.add_scalar(0.0)?.requires_grad(); // a fresh copy
        let mut opt = build(p.clone())?;
        for step in 1..=3 {
            let mut grads = GradStore::new();
            grads.insert(&p, grad.mul_scalar(step as f64)?);
            opt.step(&grads)?;
        }
        out.push(entry(name, &p)?);
    }
    Ok(out)
}

/// micrograd's expression `a*b + a**2 - 1/a + tanh(b/a) + exp(a) - relu(a*b) + relu(-b)` in
/// f64 scalar tensor ops, with the gradients of a and b.
fn micrograd() -> Result<Vec<String>> {
    let a = Tensor::full(2.0, (), DType::F64, Device::Cpu)?.requires_grad();
    let b = Tensor::full(-3.0, (), DType::F64, Device::Cpu)?.requires_grad();
    let ab = a.mul(&b)?;
    let c = ab
        .add(&a.pow_scalar(2.0)?)?
        .sub(&a.recip()?.mul_scalar(1.0)?)?
        .add(&b.div(&a)?.tanh()?)?
        .add(&a.exp()?)?
        .sub(&ab.relu()?)?
        .add(&b.neg()?.relu()?)?;
    let grads = c.backward()?;
    let grad = |t: &Tensor| grads.get(t).map_or(Ok(0.0), |g| g.to_f64_scalar());
    Ok(vec![list("micrograd_value_grads", &[c.to_f64_scalar()?, grad(&a)?, grad(&b)?])])
}

/// The neural_arch backend ops on the CPU.
fn backends() -> Result<Vec<String>> {
    let x = data(&[4, 8], 3.0)?;
    let w = data(&[5, 8], 4.0)?;
    let b = data(&[5], 5.0)?;
    let gamma = data(&[8], 6.0)?;
    let beta = data(&[8], 7.0)?;
    let q = data(&[1, 2, 6, 4], 8.0)?;
    let k = data(&[1, 2, 6, 4], 9.0)?;
    let v = data(&[1, 2, 6, 4], 10.0)?;
    let attention = scaled_dot_product_attention(&q, &k, &v, &AttentionMask::none(), Some(0.5))?;
    Ok(vec![
        entry("backend_x", &x)?,
        entry("backend_w", &w)?,
        entry("backend_b", &b)?,
        entry("backend_gamma", &gamma)?,
        entry("backend_beta", &beta)?,
        entry("backend_q", &q)?,
        entry("backend_k", &k)?,
        entry("backend_v", &v)?,
        entry("backend_gelu", &x.gelu()?)?,
        entry("backend_linear_gelu", &x.linear(&w, Some(&b), Epilogue::Gelu)?)?,
        entry("backend_layernorm", &x.layer_norm(Some(&gamma), Some(&beta), 1e-5)?)?,
        entry("backend_attention", &attention)?,
    ])
}

fn main() -> Result<()> {
    let mut entries = network()?;
    entries.extend(optimizers()?);
    entries.extend(micrograd()?);
    entries.extend(backends()?);
    println!("{{\n  {}\n}}", entries.join(",\n  "));
    Ok(())
}
