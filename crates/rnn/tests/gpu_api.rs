//! The seed GPU API: GpuTensor transfers, GpuProfiler, and user kernels through
//! KernelManager. The wgpu checks run on any wgpu adapter (Mesa's lavapipe in CI, selected
//! through `RNN_GPU_DEVICE`, which only `wgpu_tensors_kernels_and_profiler` sets); the CUDA
//! checks run a kernel where a CUDA device exists and check the errors elsewhere.

use ndarray::{Array1, Array2, ArrayD};
use rnn::gpu::{
    CudaKernels, GpuContext, GpuKernel, GpuManager, GpuProfiler, GpuTensor, KernelArg, KernelBackend, KernelManager,
    LaunchConfig, MemoryLayout,
};
use rnn::{DType, Device, Error, Tensor};

const WGSL_ADD: &str = r#"
@group(0) @binding(0) var<storage, read> a: array<f32>;
@group(0) @binding(1) var<storage, read> b: array<f32>;
@group(0) @binding(2) var<storage, read_write> out: array<f32>;
struct Params { n: u32, scale: f32, offset: i32 }
@group(0) @binding(3) var<uniform> params: Params;

@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) id: vec3<u32>) {
    let i = id.x;
    if (i < params.n) {
        out[i] = (a[i] + b[i]) * params.scale + f32(params.offset);
    }
}
"#;

const WGSL_COPY: &str = r#"
@group(0) @binding(0) var<storage, read> x: array<f32>;
@group(0) @binding(1) var<storage, read_write> y: array<f32>;

@compute @workgroup_size(64)
fn copy_all(@builtin(global_invocation_id) id: vec3<u32>) {
    if (id.x < arrayLength(&x)) { y[id.x] = x[id.x]; }
}
"#;

const CUDA_ADD: &str = r#"
extern "C" __global__ void vector_add(const float* a, const float* b, float* out, unsigned int n, float scale) {
    unsigned int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = (a[i] + b[i]) * scale;
}
"#;

fn close(a: &ArrayD<f32>, b: &ArrayD<f32>) -> bool {
    a.shape() == b.shape() && a.iter().zip(b.iter()).all(|(x, y)| (x - y).abs() <= 1e-5 * (1.0 + y.abs()))
}

#[test]
fn wgpu_tensors_kernels_and_profiler() -> rnn::Result<()> {
    let adapters = rnn::wgpu_adapters();
    if GpuManager::new().devices().iter().all(|g| !matches!(g.device, Device::Wgpu(_))) {
        let Some(first) = adapters.first() else {
            assert!(!Device::Wgpu(0).is_required_by_env(), "RNN_REQUIRE_GPU asks for wgpu: no wgpu adapter found");
            eprintln!("SKIPPED: no wgpu adapter on this machine");
            return Ok(());
        };
        // A software adapter is listed only when asked for.
        std::env::set_var("RNN_GPU_DEVICE", format!("wgpu:{}", first.ordinal));
    }
    let manager = GpuManager::new();
    let gpu = manager.devices().iter().find(|g| matches!(g.device, Device::Wgpu(_))).expect("a wgpu device").clone();
    let context = manager.create_context(gpu.id)?;
    let device = context.device();

    // GpuTensor: arrays in any memory order; the context by value or by reference.
    let a = Array2::from_shape_fn((3, 5), |(i, j)| (i * 5 + j) as f32 * 0.5 - 2.0);
    let ga = GpuTensor::from_cpu(&a, gpu.id, context)?;
    assert_eq!((ga.shape(), ga.dtype(), ga.device()), (&[3usize, 5][..], DType::F32, device));
    assert!(close(&ga.to_cpu(context)?, &a.clone().into_dyn()));
    let at = a.t().to_owned();
    let gt = GpuTensor::from_cpu(&a.t(), gpu.id, &context)?;
    assert!(close(&gt.to_cpu(context)?, &at.clone().into_dyn()), "a transposed view keeps its logical order");
    let doubled = GpuTensor::from_tensor(ga.tensor().mul_scalar(2.0)?)?;
    assert!(close(&doubled.to_cpu(context)?, &a.mapv(|x| 2.0 * x).into_dyn()));
    let err = GpuTensor::from_cpu(&a, gpu.id + 1, context);
    assert!(matches!(err, Err(Error::InvalidArgument { .. })), "a device id that is not the context's: {err:?}");
    let on_cpu = rnn::GpuOptimizer::new(Device::Cpu).build()?.create_tensor(&[3])?;
    assert!(matches!(on_cpu.to_cpu(context), Err(Error::DeviceMismatch { .. })));
    assert!(GpuTensor::from_tensor(Tensor::zeros(3, DType::F32, Device::Cpu)?).is_err());

    // A WGSL kernel adding two vectors, compared with the CPU; n is not a multiple of the
    // workgroup size.
    let n = 1000;
    let x = Array1::from_shape_fn(n, |i| (i as f32 * 0.37).sin());
    let y = Array1::from_shape_fn(n, |i| (i as f32 * 0.11).cos() * 3.0);
    let (gx, gy) = (GpuTensor::from_cpu(&x, gpu.id, context)?, GpuTensor::from_cpu(&y, gpu.id, context)?);
    let out = GpuTensor::zeros(&[n], &context)?;
    let mut kernels = KernelManager::for_context(&context);
    let add = kernels.compile_kernel("vector_add", WGSL_ADD, "wgsl")?;
    assert_eq!((add.backend(), add.entry_point(), add.device()), (KernelBackend::Wgsl, "main", device));
    let launch = LaunchConfig::linear(n, 64);
    assert_eq!(launch.grid, (16, 1, 1));
    let args = [
        KernelArg::input(&gx),
        KernelArg::input(&gy),
        KernelArg::output(&out),
        KernelArg::U32(n as u32),
        KernelArg::F32(0.5),
        KernelArg::I32(-3),
    ];
    let mut profiler = GpuProfiler::for_context(&context);
    profiler.start("vector_add")?;
    kernels.execute(&add, &args, launch)?;
    profiler.end("vector_add", 3 * 4000, gpu.id)?;
    let expected = ((&x + &y) * 0.5 - 3.0).into_dyn();
    assert!(close(&out.to_cpu(context)?, &expected));
    assert_eq!(kernels.kernel("vector_add").map(|k| k.name()), Some("vector_add"));

    // A named entry point; a strided input is passed as a contiguous copy.
    let copy = kernels.compile_kernel_with_entry("copy", WGSL_COPY, "wgsl", "copy_all")?;
    let m = Tensor::from_vec((0..12).map(|v| v as f32).collect::<Vec<_>>(), (3, 4), device)?;
    let mt = m.t()?;
    assert!(!mt.is_contiguous());
    let copied = Tensor::zeros((4, 3), DType::F32, device)?;
    kernels.execute(&copy, &[KernelArg::Input(&mt), KernelArg::Output(&copied)], LaunchConfig::linear(12, 64))?;
    assert_eq!(copied.to_vec::<f32>()?, mt.to_vec::<f32>()?);

    // Outputs must be whole tensors created for them; tensors must be on the kernel's device.
    let view = Tensor::zeros((2, 12), DType::F32, device)?.narrow(0, 1, 1)?;
    let err = kernels.execute(&copy, &[KernelArg::Input(&m), KernelArg::Output(&view)], LaunchConfig::linear(12, 64));
    assert!(matches!(err, Err(Error::InvalidArgument { .. })), "{err:?}");
    let w = Tensor::ones(12, DType::F32, device)?.requires_grad();
    let tracked = w.add_scalar(1.0)?;
    let err =
        kernels.execute(&copy, &[KernelArg::Input(&m), KernelArg::Output(&tracked)], LaunchConfig::linear(12, 64));
    assert!(matches!(err, Err(Error::InvalidArgument { .. })), "{err:?}");
    let cpu_out = Tensor::zeros(12, DType::F32, Device::Cpu)?;
    let err =
        kernels.execute(&copy, &[KernelArg::Input(&m), KernelArg::Output(&cpu_out)], LaunchConfig::linear(12, 64));
    assert!(matches!(err, Err(Error::DeviceMismatch { .. })), "{err:?}");

    // Wrong arguments and bad sources are errors, and the device keeps working.
    let err = kernels.execute(&add, &[KernelArg::input(&gx)], launch);
    assert!(err.is_err(), "too few arguments must not launch");
    let err = kernels.compile_kernel("broken", "@compute @workgroup_size(1) fn main() { let x: f32 = ; }", "wgsl");
    assert!(err.is_err(), "a WGSL syntax error must be reported");
    let err = kernels.compile_kernel("vector_add", CUDA_ADD, "cuda");
    assert!(matches!(err, Err(Error::InvalidArgument { .. })), "a CUDA kernel on a wgpu context: {err:?}");
    kernels.execute(&add, &args, launch)?;
    assert!(close(&out.to_cpu(context)?, &expected));

    // KernelManager::new() finds the wgpu device RNN_GPU_DEVICE names (or the real GPU).
    let mut default_kernels = KernelManager::new();
    let k = default_kernels.compile_kernel("vector_add", WGSL_ADD, "wgsl")?;
    assert!(matches!(k.device(), Device::Wgpu(_)));

    // The profiler saw the kernel; memory statistics see the tensors.
    profiler.start("matmul")?;
    let _p = gx.tensor().reshape((40, 25))?.matmul(&gy.tensor().reshape((25, 40))?)?;
    profiler.end("matmul", 4 * 1600, gpu.id)?;
    let summary = profiler.summary();
    assert_eq!(
        summary.iter().map(|s| (s.name.as_str(), s.count)).collect::<Vec<_>>(),
        [("vector_add", 1), ("matmul", 1)]
    );
    assert!(!profiler.uses_device_events());
    assert_eq!(summary[0].max_memory_used, 3 * 4000);
    let stats = context.memory_stats();
    assert!(stats.allocated >= 3 * 4000, "{stats:?}");
    assert_eq!(stats, context.try_memory_stats()?);
    context.synchronize()?;
    builtin_kernels_match_the_cpu(context)?;
    execute_kernel_runs_user_sources(context)?;
    memory_layouts(context)?;
    std::env::remove_var("RNN_GPU_DEVICE");
    Ok(())
}

/// `n` values from a normal distribution, drawn on the CPU.
fn random(n: usize) -> rnn::Result<Vec<f32>> {
    Tensor::randn(0.0, 1.0, n, DType::F32, Device::Cpu)?.to_vec::<f32>()
}

fn builtin(name: &str) -> GpuKernel {
    CudaKernels::kernel(name).expect("a built-in")
}

/// `CudaKernels`' built-ins through `execute_kernel`, against the CPU on random inputs.
fn builtin_kernels_match_the_cpu(context: GpuContext) -> rnn::Result<()> {
    let device = context.device();
    let upload = |v: &[f32]| Tensor::from_vec(v.to_vec(), v.len(), device);
    // C (M x N) = A (M x K, rows lda apart) B (K x N, rows ldb apart); C has 5 extra elements
    // that must be kept.
    let (m, n, k, lda, ldb) = (13, 17, 19, 23, 20);
    let (a, b) = (random((m - 1) * lda + k)?, random(k * ldb)?);
    let (ga, gb) = (upload(&a)?, upload(&b)?);
    let gc = Tensor::full(7.0, m * n + 5, DType::F32, device)?;
    let mut args = vec![KernelArg::Input(&ga), KernelArg::Input(&gb), KernelArg::Output(&gc)];
    args.extend([m, n, k, lda, ldb, n].map(|d| KernelArg::I32(d as i32)));
    context.execute_kernel(&builtin("matmul"), &args)?;
    let got = gc.to_vec::<f32>()?;
    for (idx, &value) in got[..m * n].iter().enumerate() {
        let (i, j) = (idx / n, idx % n);
        let want: f64 = (0..k).map(|p| a[i * lda + p] as f64 * b[p * ldb + j] as f64).sum();
        assert!((value as f64 - want).abs() <= 1e-4 * (1.0 + want.abs()), "C[{i},{j}] = {value}, want {want}");
    }
    assert_eq!(got[m * n..], [7.0; 5], "elements past M x N are kept");

    // Element-wise built-ins on the first n of 1003 elements; NaN and infinities included.
    let len = 1003;
    let mut x = random(len)?;
    x[..3].copy_from_slice(&[f32::NAN, f32::INFINITY, f32::NEG_INFINITY]);
    let y = random(len)?;
    let (gx, gy) = (upload(&x)?, upload(&y)?);
    let count = 1000;
    type Reference = fn(f32, f32) -> f32;
    let cases: [(&str, Reference); 5] = [
        ("add", |a, b| a + b),
        ("multiply", |a, b| a * b),
        ("relu", |a, _| if a < 0.0 { 0.0 } else { a }),
        ("sigmoid", |a, _| 1.0 / (1.0 + (-a).exp())),
        ("tanh", |a, _| a.tanh()),
    ];
    for (name, reference) in cases {
        let out = Tensor::full(-5.0, len, DType::F32, device)?;
        let binary = matches!(name, "add" | "multiply");
        let args: Vec<KernelArg> = if binary {
            vec![KernelArg::Input(&gx), KernelArg::Input(&gy), KernelArg::Output(&out), KernelArg::U32(count as u32)]
        } else {
            vec![KernelArg::Input(&gx), KernelArg::Output(&out), KernelArg::I32(count as i32)]
        };
        context.execute_kernel(&builtin(name), &args)?;
        let got = out.to_vec::<f32>()?;
        for i in 0..count {
            if name == "relu" && x[i].is_nan() {
                continue; // relu's NaN semantics belong to the core op, checked by its golden tests
            }
            let want = reference(x[i], y[i]);
            let ok = (want.is_nan() && got[i].is_nan()) || got[i] == want || (got[i] - want).abs() <= 1e-5;
            assert!(ok, "{name}({}, {}) = {}, want {want}", x[i], y[i], got[i]);
        }
        assert_eq!(got[count..], [-5.0; 3], "{name}: elements past n are kept");
    }
    builtin_kernel_errors(context, &gx, &gy)
}

/// Wrong arguments to a built-in are errors naming what is wrong.
fn builtin_kernel_errors(context: GpuContext, gx: &Tensor, gy: &Tensor) -> rnn::Result<()> {
    let device = context.device();
    let out = Tensor::zeros(4, DType::F32, device)?;
    let relu = builtin("relu");
    let invalid = |r: rnn::Result<()>| matches!(r, Err(Error::InvalidArgument { .. }));
    assert!(invalid(context.execute_kernel(&relu, &[KernelArg::Input(gx), KernelArg::Output(&out)])), "arity");
    let n4 = KernelArg::U32(4);
    assert!(invalid(context.execute_kernel(&relu, &[KernelArg::Output(&out), KernelArg::Input(gx), n4])), "order");
    assert!(invalid(
        context.execute_kernel(&relu, &[KernelArg::Input(gx), KernelArg::Output(&out), KernelArg::I32(-1)])
    ));
    let big = KernelArg::U32(2000);
    assert!(invalid(context.execute_kernel(&relu, &[KernelArg::Input(gx), KernelArg::Output(&out), big])), "n > len");
    let ids = Tensor::zeros(4, DType::U32, device)?;
    let err = context.execute_kernel(&relu, &[KernelArg::Input(&ids), KernelArg::Output(&out), n4]);
    assert!(matches!(err, Err(Error::DTypeMismatch { .. })), "{err:?}");
    let on_cpu = Tensor::zeros(4, DType::F32, Device::Cpu)?;
    let err = context.execute_kernel(&relu, &[KernelArg::Input(&on_cpu), KernelArg::Output(&out), n4]);
    assert!(matches!(err, Err(Error::DeviceMismatch { .. })), "{err:?}");
    let renamed = GpuKernel { entry_point: "relu".into(), ..relu.clone() };
    assert!(invalid(context.execute_kernel(&renamed, &[KernelArg::Input(gx), KernelArg::Output(&out), n4])));
    let c = Tensor::zeros(16, DType::F32, device)?;
    let mut args = vec![KernelArg::Input(gx), KernelArg::Input(gy), KernelArg::Output(&c)];
    args.extend([4, 4, 4, 4, 4, 5].map(KernelArg::I32)); // ldc != N
    assert!(invalid(context.execute_kernel(&builtin("matmul"), &args)), "ldc");
    assert_eq!(CudaKernels::names().len(), 6);
    assert!(CudaKernels::kernel("conv").is_none());
    assert!(CudaKernels::matmul().contains("void matmul_kernel("));
    Ok(())
}

const WGSL_SQUARE: &str = r#"
@group(0) @binding(0) var<storage, read> x: array<f32>;
@group(0) @binding(1) var<storage, read_write> y: array<f32>;

@compute @workgroup_size(64)
fn square(@builtin(global_invocation_id) id: vec3<u32>) {
    if (id.x < arrayLength(&y)) { y[id.x] = x[id.x] * x[id.x] + 1.0; }
}
"#;

/// A user WGSL source through `execute_kernel`: compiled from its text, or the
/// `KernelManager`'s compiled kernel; one thread per output element.
fn execute_kernel_runs_user_sources(context: GpuContext) -> rnn::Result<()> {
    let device = context.device();
    let x = random(1000)?;
    let gx = Tensor::from_vec(x.clone(), 1000, device)?;
    let check = |out: &Tensor| -> rnn::Result<()> {
        let got = out.to_vec::<f32>()?;
        assert!(got.iter().zip(&x).all(|(g, v)| (g - (v * v + 1.0)).abs() <= 1e-5 * (1.0 + v * v)));
        Ok(())
    };
    let kernel = GpuKernel {
        name: "square".into(),
        source: WGSL_SQUARE.into(),
        entry_point: "square".into(),
        work_group_size: (64, 1, 1),
        ..GpuKernel::default()
    };
    let out = Tensor::zeros(1000, DType::F32, device)?;
    context.execute_kernel(&kernel, &[KernelArg::Input(&gx), KernelArg::Output(&out)])?;
    check(&out)?;
    let compiled =
        KernelManager::for_context(&context).compile_kernel_with_entry("sq", WGSL_SQUARE, "wgsl", "square")?;
    let precompiled = GpuKernel { compiled_binary: Some(compiled), entry_point: String::new(), ..kernel.clone() };
    let out = Tensor::zeros(1000, DType::F32, device)?;
    context.execute_kernel(&precompiled, &[KernelArg::Input(&gx), KernelArg::Output(&out)])?;
    check(&out)?;
    let err = context.execute_kernel(&kernel, &[KernelArg::Input(&gx)]);
    assert!(matches!(err, Err(Error::InvalidArgument { .. })), "no output: {err:?}");
    let cuda = GpuKernel { backend_handle: Some(KernelBackend::Cuda), ..kernel };
    assert!(context.execute_kernel(&cuda, &[KernelArg::Input(&gx), KernelArg::Output(&out)]).is_err());
    Ok(())
}

/// `from_cpu_with_layout`: every layout keeps the values; column-major has Fortran strides.
fn memory_layouts(context: GpuContext) -> rnn::Result<()> {
    let a = Array2::from_shape_fn((3, 4), |(i, j)| (i * 4 + j) as f32 - 5.5);
    for layout in [MemoryLayout::RowMajor, MemoryLayout::ColumnMajor, MemoryLayout::GpuOptimized] {
        let t = GpuTensor::from_cpu_with_layout(&a, context.id(), context, layout)?;
        assert_eq!(t.to_cpu(context)?, a.clone().into_dyn(), "{layout:?}");
        let want = if layout == MemoryLayout::ColumnMajor { layout } else { MemoryLayout::RowMajor };
        assert_eq!(t.memory_layout(), Some(want));
        let product = t.tensor().matmul(&Tensor::ones((4, 2), DType::F32, context.device())?)?;
        let sums: Vec<f32> = a.rows().into_iter().flat_map(|r| [r.sum(); 2]).collect();
        assert_eq!(product.to_vec::<f32>()?, sums, "{layout:?}");
    }
    let column = GpuTensor::from_cpu_with_layout(&a, context.id(), context, MemoryLayout::ColumnMajor)?;
    assert_eq!(column.tensor().layout().strides(), &[1, 3]);
    Ok(())
}

#[test]
fn profiler_statistics_errors_and_chrome_trace() -> rnn::Result<()> {
    let mut profiler = GpuProfiler::new(Device::Cpu);
    assert!(matches!(profiler.end("never", 0, 0), Err(Error::InvalidArgument { .. })));
    for i in 0..3 {
        profiler.start("step")?;
        std::thread::sleep(std::time::Duration::from_millis(2 * (i + 1)));
        profiler.end("step", 1 << (20 + i), 0)?;
    }
    profiler.start("quoted \"name\"\n")?;
    assert!(profiler.start("quoted \"name\"\n").is_err(), "a region started twice");
    profiler.end("quoted \"name\"\n", 0, 1)?;
    let summary = profiler.summary();
    assert_eq!(summary.len(), 2);
    let step = &summary[0];
    assert_eq!((step.name.as_str(), step.count, step.max_memory_used), ("step", 3, 4 << 20));
    assert!(step.min >= std::time::Duration::from_millis(2) && step.max >= std::time::Duration::from_millis(6));
    assert!(step.min <= step.mean && step.mean <= step.max);
    assert_eq!(step.total, profiler.events().iter().filter(|e| e.name == "step").map(|e| e.duration).sum());
    assert!(profiler.report().contains("step"));

    let path = std::env::temp_dir().join(format!("rnn_gpu_api_trace_{}.json", std::process::id()));
    profiler.export_chrome_trace(&path)?;
    let text = std::fs::read_to_string(&path).map_err(|e| Error::io(&path, e))?;
    let _ = std::fs::remove_file(&path);
    let json: serde_json::Value = serde_json::from_str(&text).expect("valid JSON");
    let events = json["traceEvents"].as_array().expect("traceEvents");
    assert_eq!(events.len(), 4);
    for e in events {
        assert_eq!(e["ph"], "X");
        for key in ["ts", "dur", "pid", "tid"] {
            assert!(e[key].is_number(), "{key} in {e}");
        }
    }
    assert_eq!(events[3]["name"], "quoted \"name\"\n");
    assert_eq!((events[3]["tid"].as_u64(), events[2]["args"]["memory_used"].as_u64()), (Some(1), Some(4 << 20)));
    assert!(events[1]["ts"].as_f64() > events[0]["ts"].as_f64());
    assert!(profiler.export_chrome_trace("/nonexistent-dir/trace.json").is_err());
    Ok(())
}

#[test]
fn kernel_manager_rejects_bad_requests() {
    assert!(KernelBackend::parse("opencl").is_err());
    assert_eq!(KernelBackend::parse("WGSL").ok(), Some(KernelBackend::Wgsl));
    let mut cpu = KernelManager::for_device(Device::Cpu);
    assert!(matches!(cpu.compile_kernel("k", WGSL_ADD, "wgsl"), Err(Error::InvalidArgument { .. })));
    assert!(matches!(cpu.compile_kernel("k", WGSL_ADD, "metal"), Err(Error::InvalidArgument { .. })));
}

/// Runs the CUDA vector add where there is a CUDA device; elsewhere every entry point reports
/// why there is none, without panicking.
#[test]
fn cuda_user_kernels() -> rnn::Result<()> {
    let mut kernels = KernelManager::for_device(Device::Cuda(0));
    let compiled = kernels.compile_kernel("vector_add", CUDA_ADD, "cuda");
    if !Device::Cuda(0).is_available() {
        assert!(!Device::Cuda(0).is_required_by_env(), "RNN_REQUIRE_GPU asks for cuda: {compiled:?}");
        #[cfg(feature = "cuda")]
        {
            assert!(matches!(compiled, Err(Error::DeviceNotAvailable(_))), "{compiled:?}");
            let t = Tensor::zeros(4, DType::F32, Device::Cpu)?;
            let args = [rnn::KernelArg::Output(&t), rnn::KernelArg::U32(4)];
            let launched = rnn::cuda::launch_user_kernel(0, CUDA_ADD, "vector_add", &args, (1, 1, 1), (32, 1, 1), 0);
            assert!(matches!(launched, Err(Error::DeviceNotAvailable(_))), "{launched:?}");
            assert!(matches!(rnn::cuda::record_timing_event(0), Err(Error::DeviceNotAvailable(_))));
            assert!(GpuProfiler::new(Device::Cuda(0)).start("x").is_err());
            // The source is still checked where NVRTC is installed.
            let nvrtc_required = std::env::var("RNN_REQUIRE_NVRTC").is_ok_and(|v| v == "1");
            if nvrtc_required || rnn::cuda::nvrtc_version().is_ok() {
                rnn::cuda::compile_cubin_uncached(CUDA_ADD, "sm_80")?;
                assert!(rnn::cuda::compile_cubin_uncached("extern \"C\" __global__ void broken( { }", "sm_80").is_err());
            }
        }
        #[cfg(not(feature = "cuda"))]
        assert!(matches!(compiled, Err(Error::NotCompiledWith("cuda"))), "{compiled:?}");
        eprintln!("SKIPPED running a CUDA kernel: no CUDA device");
        return Ok(());
    }
    let kernel = compiled?;
    let device = kernel.device();
    let n = 3001;
    let x: Vec<f32> = (0..n).map(|i| (i as f32 * 0.37).sin()).collect();
    let y: Vec<f32> = (0..n).map(|i| (i as f32 * 0.11).cos()).collect();
    let (gx, gy) = (Tensor::from_vec(x.clone(), n, device)?, Tensor::from_vec(y.clone(), n, device)?);
    let out = Tensor::zeros(n, DType::F32, device)?;
    let args = [
        KernelArg::Input(&gx),
        KernelArg::Input(&gy),
        KernelArg::Output(&out),
        KernelArg::U32(n as u32),
        KernelArg::F32(2.0),
    ];
    let mut profiler = GpuProfiler::new(device);
    profiler.start("vector_add")?;
    kernels.execute(&kernel, &args, LaunchConfig::linear(n, 128))?;
    let t = profiler.end("vector_add", 3 * 4 * n as u64, 0)?;
    assert!(t > std::time::Duration::ZERO);
    assert!(profiler.uses_device_events());
    let got = out.to_vec::<f32>()?;
    for i in 0..n {
        assert!((got[i] - (x[i] + y[i]) * 2.0).abs() < 1e-5, "element {i}");
    }
    let err = kernels.compile_kernel("broken", "extern \"C\" __global__ void broken( { }", "cuda");
    assert!(err.is_err());
    Ok(())
}
