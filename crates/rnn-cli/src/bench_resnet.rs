//! The ResNet-8 workload of `rnn bench train`: a small residual convnet on CIFAR-shaped
//! random data (3x32x32, 10 classes), built from rnn-nn modules (the `Network` builder has no
//! residual blocks) and trained with a plain loop: shuffled batches, forward, cross entropy,
//! backward, Adam. `bench/train_bench.py` has its PyTorch twin (same model, init family,
//! batches and optimizer).
//!
//! The model: a 3x3 conv-BN-ReLU stem of 16 channels, three stages of one basic residual
//! block each (16, 32, 64 channels; stride 2 entering the second and third, where a 1x1
//! conv-BN projection shortcut matches the shapes), global average pooling, linear 10.
//! Convolutions have no bias (each feeds a BatchNorm), as in torchvision's ResNets.

use std::time::Instant;

use rnn::nn::optim::{Adam, AdamConfig, Optimizer};
use rnn::nn::{cross_entropy, BatchNorm2d, Conv2d, Conv2dConfig, Linear, Module, VarBuilder};
use rnn::{DType, Device, Result, Tensor};

/// A convolution without bias and its BatchNorm; `same` padding for odd kernels.
struct ConvBn {
    conv: Conv2d,
    bn: BatchNorm2d,
}

impl ConvBn {
    fn new(cin: usize, cout: usize, kernel: usize, stride: usize, vb: &mut VarBuilder) -> Result<Self> {
        let p = kernel / 2;
        let cfg = Conv2dConfig { stride: (stride, stride), padding: (p, p), bias: false, ..Default::default() };
        Ok(ConvBn { conv: Conv2d::new(cin, cout, (kernel, kernel), cfg, vb)?, bn: BatchNorm2d::new(cout, vb)? })
    }

    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        self.bn.forward(&self.conv.forward(x)?)
    }

    /// `relu(bn(conv(x)))`, the ReLU fused into the BatchNorm.
    fn forward_relu(&self, x: &Tensor) -> Result<Tensor> {
        self.bn.forward_relu(&self.conv.forward(x)?)
    }

    fn parameters(&self) -> Vec<Tensor> {
        [self.conv.parameters(), self.bn.parameters()].concat()
    }
}

/// `relu(bn(conv(relu(bn(conv(x))))) + shortcut(x))`.
struct BasicBlock {
    first: ConvBn,
    second: ConvBn,
    projection: Option<ConvBn>,
}

impl BasicBlock {
    fn new(cin: usize, cout: usize, stride: usize, vb: &mut VarBuilder) -> Result<Self> {
        let projection = (stride != 1 || cin != cout).then(|| ConvBn::new(cin, cout, 1, stride, vb)).transpose()?;
        Ok(BasicBlock {
            first: ConvBn::new(cin, cout, 3, stride, vb)?,
            second: ConvBn::new(cout, cout, 3, 1, vb)?,
            projection,
        })
    }

    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        let h = self.first.forward_relu(x)?;
        let shortcut = match &self.projection {
            Some(p) => p.forward(x)?,
            None => x.clone(),
        };
        // relu(bn(conv(h)) + shortcut): the add and the ReLU fused into the BatchNorm.
        self.second.bn.forward_add_relu(&self.second.conv.forward(&h)?, &shortcut)
    }

    fn parameters(&self) -> Vec<Tensor> {
        let own = [self.first.parameters(), self.second.parameters()].concat();
        own.into_iter().chain(self.projection.iter().flat_map(|p| p.parameters())).collect()
    }
}

pub struct ResNet8 {
    stem: ConvBn,
    blocks: Vec<BasicBlock>,
    head: Linear,
}

impl ResNet8 {
    pub fn new(vb: &mut VarBuilder) -> Result<Self> {
        let stem = ConvBn::new(3, 16, 3, 1, vb)?;
        let stages = [(16, 16, 1), (16, 32, 2), (32, 64, 2)];
        let blocks = stages.iter().map(|&(cin, cout, s)| BasicBlock::new(cin, cout, s, vb)).collect::<Result<_>>()?;
        Ok(ResNet8 { stem, blocks, head: Linear::new(64, 10, vb)? })
    }

    /// `[N, 3, H, W]` images to `[N, 10]` logits.
    pub fn forward(&self, x: &Tensor) -> Result<Tensor> {
        let mut h = self.stem.forward_relu(x)?;
        for block in &self.blocks {
            h = block.forward(&h)?;
        }
        self.head.forward(&h.mean(vec![2, 3])?)
    }

    pub fn parameters(&self) -> Vec<Tensor> {
        let body = self.blocks.iter().flat_map(|b| b.parameters());
        self.stem.parameters().into_iter().chain(body).chain(self.head.parameters()).collect()
    }
}

/// A permutation of `0..n` from a small xorshift generator (the shuffle's cost, not its
/// quality, matters here).
fn shuffled(n: usize, state: &mut u64) -> Vec<u32> {
    let mut ids: Vec<u32> = (0..n as u32).collect();
    for i in (1..n).rev() {
        *state ^= *state << 13;
        *state ^= *state >> 7;
        *state ^= *state << 17;
        ids.swap(i, (*state % (i as u64 + 1)) as usize);
    }
    ids
}

/// Trains a ResNet-8 on `n` random CIFAR-shaped samples in batches of `batch` with Adam(1e-3)
/// for `epochs` epochs; returns the fastest epoch in seconds. The summed loss stays on the
/// device until the end of each epoch, as in the `Network` loop and the twin.
pub fn best_epoch_seconds(n: usize, batch: usize, epochs: usize, device: Device) -> Result<f64> {
    rnn::manual_seed(7);
    let x = Tensor::rand(0.0, 1.0, (n, 3, 32, 32), DType::F32, device)?;
    let labels = Tensor::rand(0.0, 10.0, n, DType::F32, device)?.to_dtype(DType::U32)?;
    let mut vb = VarBuilder::new(device, DType::F32, 7);
    let net = ResNet8::new(&mut vb)?;
    let mut opt = Adam::new(net.parameters(), AdamConfig { lr: 1e-3, ..Default::default() })?;
    let (mut best, mut rng) = (f64::INFINITY, 0x9E37_79B9_7F4A_7C15u64);
    for _ in 0..epochs {
        let start = Instant::now();
        let order = shuffled(n, &mut rng);
        let mut loss_sum = Tensor::zeros((), DType::F32, device)?;
        for ids in order.chunks(batch) {
            let ids = Tensor::from_vec(ids.to_vec(), ids.len(), Device::Cpu)?.to_device(device)?;
            let mut step = || -> Result<Tensor> {
                let (xb, yb) = (x.index_select(&ids, 0)?, labels.index_select(&ids, 0)?);
                let loss = cross_entropy(&net.forward(&xb)?, &yb)?;
                opt.step(&loss.backward()?)?;
                Ok(loss)
            };
            // On the CPU, on a worker of the thread pool, as `Network::train` runs its steps.
            let loss = if device.is_cpu() { rnn::on_cpu_workers(step)? } else { step()? };
            loss_sum = loss_sum.add(&loss.detach().mul_scalar(ids.elem_count() as f64)?)?;
        }
        let total = loss_sum.to_scalar::<f32>()?;
        if !total.is_finite() {
            return Err(rnn::Error::Msg(format!("the ResNet-8 loss diverged: {total}")));
        }
        best = best.min(start.elapsed().as_secs_f64());
    }
    Ok(best)
}
