//! The simple GPU demo: lists the GPUs this build can use, moves two matrices to the
//! preferred one, multiplies them there, runs a custom kernel, checks every result against
//! the CPU and prints the profile and the allocator's memory. Without a GPU it says so and
//! runs the tensor part on the CPU.
//!
//!     cargo run --release --example simple_gpu_demo [--features cuda]
//!     RNN_GPU_DEVICE=wgpu:0 cargo run --example simple_gpu_demo    # a software wgpu adapter

use rnn::gpu::{GpuContext, GpuManager, GpuProfiler, GpuTensor, KernelArg, KernelManager, LaunchConfig};
use rnn::ndarray::{Array1, Array2};
use rnn::{Device, Result, Tensor};

const CUDA_KERNEL: &str = r#"
extern "C" __global__ void custom_activation(const float* input, float* output, unsigned int n) {
    unsigned int idx = blockIdx.x * blockDim.x + threadIdx.x;
    if (idx < n) {
        output[idx] = input[idx] * input[idx] + 1.0f;  // x^2 + 1
    }
}
"#;

const WGSL_KERNEL: &str = r#"
@group(0) @binding(0) var<storage, read> input: array<f32>;
@group(0) @binding(1) var<storage, read_write> output: array<f32>;
struct Params { n: u32 }
@group(0) @binding(2) var<uniform> params: Params;

@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) id: vec3<u32>) {
    if (id.x < params.n) {
        output[id.x] = input[id.x] * input[id.x] + 1.0;  // x^2 + 1
    }
}
"#;

fn main() -> Result<()> {
    // GPU device detection
    let manager = GpuManager::new();
    println!("GPU devices found: {}", manager.devices().len());
    for gpu in manager.devices() {
        let memory = if gpu.total_memory > 0 { format!(", {} MiB", gpu.total_memory >> 20) } else { String::new() };
        let cc = gpu.compute_capability.map_or(String::new(), |(major, minor)| format!(", compute {major}.{minor}"));
        println!("  [{}] {} ({:?} / {}{memory}{cc}) as {}", gpu.id, gpu.name, gpu.device_type, gpu.backend, gpu.device);
    }
    let context = match manager.default_device() {
        Some(gpu) => {
            println!("Using GPU: {} ({})", gpu.name, gpu.device);
            Some(manager.create_context(gpu.id)?)
        }
        None => {
            println!("No GPU is available to this build on this machine, so this demo runs on the CPU.");
            println!("  (build with `--features cuda` for NVIDIA GPUs; wgpu finds Vulkan / Metal / DX12 GPUs;");
            println!("   `RNN_GPU_DEVICE=wgpu:0` selects a software adapter such as lavapipe)");
            None
        }
    };
    let device = context.as_ref().map_or(Device::Cpu, GpuContext::device);
    let mut profiler = GpuProfiler::new(device);
    let gpu_id = context.as_ref().map_or(0, GpuContext::id);

    // GPU memory allocation and transfers
    let a = Array2::<f32>::from_shape_fn((256, 512), |(i, j)| ((i * 7 + j * 3) % 17) as f32 / 17.0 - 0.5);
    let b = Array2::<f32>::from_shape_fn((512, 128), |(i, j)| ((i * 5 + j * 11) % 13) as f32 / 13.0 - 0.4);
    profiler.start("upload")?;
    let (ta, tb) = match &context {
        Some(ctx) => (
            GpuTensor::from_cpu(&a, ctx.id(), ctx)?.into_tensor(),
            GpuTensor::from_cpu(&b, ctx.id(), ctx)?.into_tensor(),
        ),
        None => (Tensor::from_ndarray(&a, Device::Cpu)?, Tensor::from_ndarray(&b, Device::Cpu)?),
    };
    profiler.end("upload", 4 * (a.len() + b.len()) as u64, gpu_id)?;

    // Tensor ops on the device
    profiler.start("matmul_relu")?;
    let c = ta.matmul(&tb)?.relu()?;
    profiler.end("matmul_relu", 4 * 256 * 128, gpu_id)?;
    profiler.start("download")?;
    let got = c.to_ndarray::<f32>()?;
    profiler.end("download", 4 * 256 * 128, gpu_id)?;
    let expected = a.dot(&b).mapv(|x| x.max(0.0)).into_dyn();
    let err = max_abs_diff(got.iter(), expected.iter());
    println!("matmul + relu on {device}: 256x512 * 512x128, max |difference| from the CPU {err:.2e}");

    // GPU kernel execution: a custom kernel
    if let Some(ctx) = &context {
        let (source, backend) = match device {
            Device::Cuda(_) => (CUDA_KERNEL, "cuda"),
            _ => (WGSL_KERNEL, "wgsl"),
        };
        let mut kernels = KernelManager::for_context(ctx);
        let kernel = kernels.compile_kernel("custom_activation", source, backend)?;
        println!("Compiled {backend} kernel '{}' for {}", kernel.name(), kernel.device());
        let n = 10_000;
        let x = Array1::<f32>::linspace(-2.0, 2.0, n);
        let input = GpuTensor::from_cpu(&x, ctx.id(), ctx)?;
        let output = GpuTensor::zeros(&[n], ctx)?;
        let args = [KernelArg::input(&input), KernelArg::output(&output), KernelArg::U32(n as u32)];
        profiler.start("custom_activation")?;
        kernels.execute(&kernel, &args, LaunchConfig::linear(n, 256))?;
        profiler.end("custom_activation", 8 * n as u64, gpu_id)?;
        let y = output.to_cpu(ctx)?;
        let err = max_abs_diff(y.iter(), x.mapv(|v| v * v + 1.0).iter());
        println!("custom kernel x^2 + 1 on {n} elements: max |difference| from the CPU {err:.2e}");
        let stats = ctx.try_memory_stats()?;
        println!(
            "GPU memory: {:.1} KiB allocated, {:.1} KiB reserved, peak {:.1} KiB, {} buffers created, {} cache hits",
            stats.allocated as f64 / 1024.0,
            stats.reserved as f64 / 1024.0,
            stats.peak as f64 / 1024.0,
            stats.allocations,
            stats.cache_hits
        );
    } else {
        println!("custom kernel: skipped (custom kernels run on a GPU)");
    }

    profiler.print_summary();
    Ok(())
}

fn max_abs_diff<'a>(a: impl Iterator<Item = &'a f32>, b: impl Iterator<Item = &'a f32>) -> f32 {
    a.zip(b).map(|(x, y)| (x - y).abs()).fold(0.0, f32::max)
}
