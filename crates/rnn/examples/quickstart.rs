//! The README's quick-start example: one gradient step of a linear classifier.
//! Run with `cargo run --release -p rnn --example quickstart`.

use rnn::{DType, Device, Tensor};

fn main() -> rnn::Result<()> {
    let device = Device::best()?; // CUDA, then a real wgpu GPU, then the CPU
    let x = Tensor::randn(0.0, 1.0, (64, 784), DType::F32, device)?;
    let w = Tensor::randn(0.0, 0.05, (784, 10), DType::F32, device)?.requires_grad();
    let targets = Tensor::from_vec(vec![3u32; 64], 64, device)?;

    let loss = rnn::nn::cross_entropy(&x.matmul(&w)?, &targets)?;
    let grads = loss.backward()?;
    let dw = grads.get(&w).expect("w is a variable of the loss");
    println!("device {device}, loss {:.4}, dw {:?}", loss.to_scalar::<f32>()?, dw.dims());

    // One SGD step, in place and outside the graph.
    rnn::no_grad(|| w.assign(&w.sub(&dw.mul_scalar(0.1)?)?))?;
    let after = rnn::nn::cross_entropy(&x.matmul(&w)?, &targets)?.to_scalar::<f32>()?;
    println!("loss after one step {after:.4}");
    Ok(())
}
