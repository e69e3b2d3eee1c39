//! The guides' snippets, each in a function; `seed_snippets.rs` runs them. Between
//! `// guide:` and `// end guide` the text is the guide's; what comes before declares the
//! names the snippet leaves undefined.

use rnn::gpu::{GpuContext, GpuDevice, GpuProfiler, GpuTensor, KernelArg, KernelManager};
use rnn::ndarray::{Array2, ArrayD};
use rnn::{DType, GpuDeviceType, History, MemoryLayout, Result, Tensor};

// ---------------------------------------------------------------------------------------
// GPU Acceleration Support

/// "Basic GPU Usage".
#[rustfmt::skip]
pub fn basic_gpu_usage() -> Result<()> {
    use rnn::ndarray::Array2;
    // guide:
    use rnn::{GpuManager, GpuTensor, Network, LayerBuilder, ActivationFunction};

    // Create GPU manager and check available devices
    let mut gpu_manager = GpuManager::new();
    println!("Available GPUs: {}", gpu_manager.devices().len());

    // Get default GPU device
    if let Some(device) = gpu_manager.default_device() {
        println!("Using GPU: {}", device.name);

        // Create GPU context
        let context = gpu_manager.create_context(device.id)?;

        // Transfer data to GPU
        let cpu_data = Array2::zeros((1000, 784));
        let gpu_tensor = GpuTensor::from_cpu(&cpu_data, device.id, context)?;

        // Perform GPU operations
        // ... neural network operations on GPU

        // Transfer results back to CPU
        let result = gpu_tensor.to_cpu(context)?;
        // end guide
        assert_eq!(result, cpu_data.into_dyn());
        assert_eq!(gpu_tensor.device(), device.device);
    }
    Ok(())
}

/// A small network for the snippets that use one without building it.
pub fn small_network() -> Result<rnn::Network> {
    use rnn::{ActivationFunction, LayerBuilder, LossFunction, Network};
    Network::with_input_size(784)?
        .add_layer(LayerBuilder::dense(16).activation(ActivationFunction::ReLU))
        .add_layer(LayerBuilder::dense(10).activation(ActivationFunction::Softmax))
        .loss(LossFunction::CategoricalCrossEntropy)
        .build()
}

/// Digit-like samples and their labels.
fn digits(n: usize) -> Result<(Tensor, Tensor)> {
    let data = rnn::train::data::synthetic_digits(n, 7)?;
    Ok((data.inputs, data.labels))
}

/// "Creating GPU-Accelerated Networks".
#[rustfmt::skip]
pub fn gpu_accelerated_network() -> Result<History> {
    let (train_data, train_labels) = digits(16)?;
    // guide:
    use rnn::{Network, LayerBuilder, ActivationFunction, LossFunction, TrainingConfig};

    // Create network (will automatically use GPU if available)
    let mut network = Network::with_input_size(784)?
        .add_layer(LayerBuilder::dense(512).activation(ActivationFunction::ReLU))
        .add_layer(LayerBuilder::dense(256).activation(ActivationFunction::ReLU))
        .add_layer(LayerBuilder::dense(10).activation(ActivationFunction::Softmax))
        .loss(LossFunction::CategoricalCrossEntropy)
        .build()?;

    // Configure GPU-accelerated training
    let mut config = TrainingConfig::default();
    config.batch_size = 64;  // Larger batches for GPU efficiency
    config.max_epochs = 100;

    // Train with automatic GPU acceleration
    let history = network.train(&train_data, &train_labels, &config)?;
    // end guide
    Ok(history)
}

/// "Memory management example".
#[rustfmt::skip]
pub fn memory_management() -> Result<()> {
    use rnn::GpuManager;
    // guide:
    // Memory management example
    let mut gpu_manager = GpuManager::new();
    let context = gpu_manager.create_context(0)?;

    // Check memory stats
    let stats = context.memory_stats();
    println!("GPU Memory: {}/{} MB used",
             stats.allocated / 1024 / 1024,
             stats.total / 1024 / 1024);
    // end guide

    // "Out of Memory Errors", with the guide's `stats.allocated > stats.total * 0.9` (an
    // integer compared with a float, which Rust refuses) written with conversions.
    // guide (changed):
    // Monitor memory usage
    let stats = context.memory_stats();
    if stats.allocated as f64 > stats.total as f64 * 0.9 {
        println!("Warning: GPU memory usage > 90%");
        // Reduce batch size or model size
    }
    // end guide
    Ok(())
}

/// "Batch Size Optimization", as a function of the device.
#[rustfmt::skip]
pub fn batch_size_for(device: &GpuDevice) -> usize {
    // guide:
    // Optimal batch sizes for different GPU types
    let batch_size = match device.device_type {
        GpuDeviceType::Cuda => {
            if device.total_memory > 8 * 1024 * 1024 * 1024 { // > 8GB
                256
            } else {
                128
            }
        },
        GpuDeviceType::OpenCL => 64,
        GpuDeviceType::Metal => 32,
        _ => 32,
    };
    // end guide
    batch_size
}

/// "Memory Layout Optimization".
#[rustfmt::skip]
pub fn memory_layout(data: Array2<f32>, device_id: usize, context: GpuContext) -> Result<GpuTensor> {
    // guide:
    // Choose optimal memory layout for your use case
    let tensor = GpuTensor::from_cpu_with_layout(
        &data,
        device_id,
        context,
        MemoryLayout::GpuOptimized  // Automatically chooses best layout
    )?;
    // end guide
    Ok(tensor)
}

/// "Multi-GPU Training".
#[rustfmt::skip]
pub fn multi_gpu() -> Result<()> {
    let network = small_network()?;
    let (data, labels) = digits(8)?;
    // guide:
    use rnn::{GpuManager, DistributedTraining};

    let mut gpu_manager = GpuManager::new();
    let gpu_devices: Vec<_> = gpu_manager.devices()
        .iter()
        .filter(|d| d.device_type != GpuDeviceType::Generic)
        .collect();

    if gpu_devices.len() > 1 {
        // Create distributed training setup
        let distributed_trainer = DistributedTraining::new(gpu_devices)?;

        // Train across multiple GPUs
        let history = distributed_trainer.train(&network, &data, &labels)?;
    }
    // end guide
    Ok(())
}

/// "Custom GPU Kernels" (CUDA C: an error without a CUDA device).
#[rustfmt::skip]
pub fn custom_kernel() -> Result<()> {
    // guide:
    use rnn::gpu::{GpuKernel, KernelManager, CudaKernels};

    // Create custom CUDA kernel
    let kernel_source = r#"
        extern "C" __global__ void custom_activation(
            const float* input, float* output, int n
        ) {
            int idx = blockIdx.x * blockDim.x + threadIdx.x;
            if (idx < n) {
                output[idx] = input[idx] * input[idx] + 1.0f;  // x² + 1
            }
        }
    "#;

    let mut kernel_manager = KernelManager::new();
    let compiled = kernel_manager.compile_kernel("custom_activation", kernel_source, "cuda")?;

    // Use custom kernel in operations
    let kernel = GpuKernel {
        name: "custom_activation".to_string(),
        source: kernel_source.to_string(),
        entry_point: "custom_activation".to_string(),
        compiled_binary: Some(compiled),
        work_group_size: (256, 1, 1),
        backend_handle: None,
    };
    // end guide
    Ok(())
}

/// "Profiling and Debugging".
#[rustfmt::skip]
pub fn profiling(memory_used: u64, device_id: usize) -> GpuProfiler {
    // guide:
    use rnn::gpu::GpuProfiler;

    let mut profiler = GpuProfiler::default();

    profiler.start("matrix_multiply");
    // ... GPU operations
    profiler.end("matrix_multiply", memory_used, device_id);

    profiler.start("activation");
    // ... more operations
    profiler.end("activation", memory_used, device_id);

    // Print detailed performance report
    profiler.print_summary();
    // end guide
    profiler
}

/// "GPU Not Detected".
#[rustfmt::skip]
pub fn not_detected() {
    use rnn::GpuManager;
    // guide:
    // Check if GPU is available
    if !GpuManager::is_gpu_available() {
        println!("No GPU detected. Possible issues:");
        println!("- GPU drivers not installed");
        println!("- CUDA/OpenCL runtime not found");
        println!("- Feature flags not enabled");
    }
    // end guide
}

/// "Kernel Compilation Errors".
#[rustfmt::skip]
pub fn compilation_errors() {
    let mut kernel_manager = KernelManager::new();
    let source = "extern \"C\" __global__ void test(float* x) { x[0] = 1.0f; }";
    // guide:
    // Enable debug output for kernel compilation
    std::env::set_var("RNN_GPU_DEBUG", "1");

    // Check kernel compilation status
    match kernel_manager.compile_kernel("test", source, "cuda") {
        Ok(_) => println!("Kernel compiled successfully"),
        Err(e) => println!("Compilation error: {}", e),
    }
    // end guide
}

/// "Complete Training Example".
#[rustfmt::skip]
pub mod complete_training {
    // guide:
    use rnn::{*, gpu::*};

    // end guide
    /// The guide's data loader: digit-like samples, few enough for a test.
    fn load_mnist_data() -> Result<(Tensor, Tensor)> {
        let data = rnn::train::data::synthetic_digits(40, 3)?;
        Ok((data.inputs, data.labels))
    }

    // guide (the `main` it names, public for the test):
    pub fn main() -> Result<()> {
        // Initialize GPU
        let mut gpu_manager = GpuManager::new();
        println!("Available devices: {}", gpu_manager.devices().len());

        // Create training data
        let (train_data, train_labels) = load_mnist_data()?;

        // Build network
        let mut network = Network::with_input_size(784)?
            .add_layer(LayerBuilder::dense(512).activation(ActivationFunction::ReLU))
            .add_layer(LayerBuilder::dense(256).activation(ActivationFunction::ReLU))
            .add_layer(LayerBuilder::dense(10).activation(ActivationFunction::Softmax))
            .loss(LossFunction::CategoricalCrossEntropy)
            .build()?;

        // Configure GPU training
        let mut config = TrainingConfig::default();
        config.max_epochs = 50;
        config.batch_size = 128;
        config.validation_split = 0.2;
        config.verbose = true;

        // Train with GPU acceleration
        let start = std::time::Instant::now();
        let history = network.train(&train_data, &train_labels, &config)?;
        let training_time = start.elapsed();

        println!("Training completed in {:?}", training_time);
        println!("Final accuracy: {:.2}%",
                 history.val_metrics.get("accuracy")
                       .and_then(|acc| acc.last())
                       .unwrap_or(&0.0) * 100.0);

        Ok(())
    }
    // end guide
}

// ---------------------------------------------------------------------------------------
// Real GPU Acceleration Implementation Status

/// "GPU Device Detection": the number of GPUs.
#[rustfmt::skip]
pub fn device_detection() -> usize {
    use rnn::GpuManager;
    // guide:
    let mut gpu_manager = GpuManager::new();
    let devices = gpu_manager.devices(); // Lists all available GPUs
    // end guide
    devices.len()
}

/// "GPU Memory Operations".
#[rustfmt::skip]
pub fn memory_operations(gpu_manager: &rnn::GpuManager, device_id: usize) -> Result<()> {
    let data = Array2::from_shape_fn((4, 3), |(i, j)| (i * 3 + j) as f32);
    // guide:
    let context = gpu_manager.create_context(device_id)?;
    let gpu_tensor = GpuTensor::from_cpu(&data, device_id, context)?;
    // end guide
    assert_eq!(gpu_tensor.to_cpu(context)?, data.into_dyn());
    Ok(())
}

/// "GPU Kernel Infrastructure", the guide's `// ...` standing for the other fields.
#[rustfmt::skip]
pub fn kernel_infrastructure(context: GpuContext, args: &[KernelArg<'_>]) -> Result<()> {
    use rnn::gpu::{CudaKernels, GpuKernel};
    let args = args.to_vec();
    // guide (changed: `// ...` written as `..Default::default()`):
    let kernel = GpuKernel {
        name: "matmul".to_string(),
        source: CudaKernels::matmul(), // Real CUDA kernel source
        entry_point: "matmul_kernel".to_string(),
        ..Default::default()
    };
    context.execute_kernel(&kernel, &args)?; // Executes on GPU
    // end guide
    Ok(())
}

/// The status page's "GPU Training Pipeline" and "GPU Memory Management" are methods of a
/// user's model: this one is linear (`y = x w`), with a mean squared error and SGD.
pub struct GpuModel {
    context: GpuContext,
    w: Tensor,
}

impl GpuModel {
    pub fn new(context: GpuContext, inputs: usize, outputs: usize) -> Result<GpuModel> {
        let w = Tensor::randn(0.0, 0.1, (inputs, outputs), DType::F32, context.device())?.requires_grad();
        Ok(GpuModel { context, w })
    }

    /// The loss on host arrays.
    pub fn loss(&self, data: &Array2<f32>, targets: &Array2<f32>) -> Result<f32> {
        let (id, context) = (self.context.id(), self.context);
        let (x, y) = (GpuTensor::from_cpu(data, id, context)?, GpuTensor::from_cpu(targets, id, context)?);
        let loss = rnn::no_grad(|| self.compute_loss_gpu(&self.forward_gpu(&x, context)?, &y, context))?;
        Ok(loss.to_cpu(context)?.sum())
    }

    fn forward_gpu(&self, batch: &GpuTensor, _context: GpuContext) -> Result<GpuTensor> {
        GpuTensor::from_tensor(batch.tensor().matmul(&self.w)?)
    }

    fn compute_loss_gpu(
        &self,
        predictions: &GpuTensor,
        targets: &GpuTensor,
        _context: GpuContext,
    ) -> Result<GpuTensor> {
        GpuTensor::from_tensor(rnn::nn::mse(predictions.tensor(), targets.tensor())?)
    }

    /// One SGD step (learning rate 0.5) from the loss of `predictions`.
    fn backward_gpu(&mut self, predictions: &GpuTensor, targets: &GpuTensor, _context: GpuContext) -> Result<()> {
        let loss = rnn::nn::mse(predictions.tensor(), targets.tensor())?;
        let grads = loss.backward()?;
        let dw = grads.get(&self.w).ok_or_else(|| rnn::Error::Msg("no gradient for w".into()))?;
        rnn::no_grad(|| self.w.assign(&self.w.sub(&dw.mul_scalar(0.5)?)?))
    }

    /// One step on the whole data set; the loss before it.
    fn train_epoch_gpu(&mut self, data: &GpuTensor, targets: &GpuTensor) -> Result<f32> {
        let predictions = self.forward_gpu(data, self.context)?;
        let loss = self.compute_loss_gpu(&predictions, targets, self.context)?.to_cpu(self.context)?.sum();
        self.backward_gpu(&predictions, targets, self.context)?;
        Ok(loss)
    }

    /// "GPU Training Pipeline" (changed: the guide's function has no `Ok(())` at its end).
    #[rustfmt::skip]
    pub fn train_on_gpu(&mut self, gpu_data: &GpuTensor, gpu_targets: &GpuTensor) -> Result<()> {
        let (epochs, context) = (20, self.context);
        let batches = [gpu_data];
        let targets = gpu_targets.clone();
        // guide:
        for epoch in 0..epochs {
            for batch in batches {
                // Forward pass with GPU kernels
                let predictions = self.forward_gpu(&batch, context)?;

                // Loss computation on GPU
                let loss = self.compute_loss_gpu(&predictions, &targets, context)?;

                // Backward pass with GPU kernels
                self.backward_gpu(&predictions, &targets, context)?;

                // GPU synchronization ensures kernel completion
                context.synchronize()?;
            }
        }
        // end guide
        Ok(())
    }

    /// "GPU Memory Management".
    #[rustfmt::skip]
    pub fn train_with_data_on_gpu(
        &mut self,
        train_data: Array2<f32>,
        train_targets: Array2<f32>,
        device_id: usize,
        context: GpuContext,
    ) -> Result<()> {
        let epochs = 5;
        // guide:
        // Efficient GPU memory usage
        let gpu_train_data = GpuTensor::from_cpu(&train_data, device_id, context)?;
        let gpu_targets = GpuTensor::from_cpu(&train_targets, device_id, context)?;

        // Data stays on GPU during training - no unnecessary transfers
        for epoch in 0..epochs {
            // All operations happen on GPU
            let results = self.train_epoch_gpu(&gpu_train_data, &gpu_targets)?;
        }
        // end guide
        Ok(())
    }
}

/// "GPU vs CPU Performance Comparison".
#[rustfmt::skip]
pub fn gpu_versus_cpu() -> Result<(History, History)> {
    let mut network = small_network()?;
    let (data, labels) = digits(32)?;
    // guide:
    use rnn::{Network, TrainingConfig, GpuManager};

    // GPU training
    let mut gpu_config = TrainingConfig::default();
    gpu_config.use_gpu = true;
    gpu_config.prefer_gpu = true;

    let gpu_history = network.train(&data, &labels, &gpu_config)?;
    // ↑ This will execute CUDA kernels and show GPU utilization

    // CPU training
    let mut cpu_config = TrainingConfig::default();
    cpu_config.use_gpu = false;

    let cpu_history = network.train(&data, &labels, &cpu_config)?;
    // ↑ This uses multi-threaded CPU computation
    // end guide
    Ok((gpu_history, cpu_history))
}
