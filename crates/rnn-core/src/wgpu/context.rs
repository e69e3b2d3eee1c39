//! One opened wgpu device: its queue, limits, pipeline cache, buffer pool, the batch of
//! commands being recorded (`batch.rs`) and the errors the device reported. Devices are
//! opened on first use and live for the rest of the process.

use std::cell::RefCell;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use super::adapters::registry;
use super::batch::{Batch, BindGroups, Counters};
use super::kernel_timing::KernelTimer;
use super::pool::BufferPool;
use crate::{Error, Result};

pub(crate) struct WgpuContext {
    pub ordinal: usize,
    pub name: String,
    pub device: ::wgpu::Device,
    pub queue: ::wgpu::Queue,
    pub limits: ::wgpu::Limits,
    pub shader_f16: bool,
    /// What plans for this device are built for.
    pub target: crate::gpu::target::Target,
    pub pool: BufferPool,
    pipelines: Mutex<HashMap<String, Arc<Kernel>>>,
    /// The commands recorded since the last submit.
    pub batch: Mutex<Batch>,
    pub bind_groups: Mutex<BindGroups>,
    pub counters: Counters,
    /// Whether the device has timestamp queries (kernel timing).
    timestamps: bool,
    /// Nanoseconds of timed kernels since timing was turned on (NaN after a failed read).
    kernel_nanos: Mutex<f64>,
    /// The first error the device reported outside an error scope, not yet returned.
    error: Arc<Mutex<Option<String>>>,
    /// Why the device was lost, once it has been.
    lost: Arc<Mutex<Option<String>>>,
    /// Set with `error` or `lost`: `check` reads it before taking their locks.
    faulted: Arc<AtomicBool>,
    debug: bool,
}

/// A compiled kernel of the backend, with its explicit bind group layout when it has one
/// (`layout.rs`: `Info` bound at a dynamic offset of the ring).
pub(crate) struct Kernel {
    pub pipeline: ::wgpu::ComputePipeline,
    pub layout: Option<::wgpu::BindGroupLayout>,
}

impl std::fmt::Debug for WgpuContext {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "wgpu:{} ({})", self.ordinal, self.name)
    }
}

/// The context of `Device::Wgpu(ordinal)`, opened on first use. Every op asks for it: each
/// thread keeps the contexts it has seen, so that only the first call takes the lock.
pub(crate) fn context(ordinal: usize) -> Result<Arc<WgpuContext>> {
    thread_local!(static SEEN: RefCell<Vec<Option<Arc<WgpuContext>>>> = const { RefCell::new(Vec::new()) });
    if let Some(ctx) = SEEN.with(|seen| seen.borrow().get(ordinal).cloned().flatten()) {
        return Ok(ctx);
    }
    let ctx = open_context(ordinal)?;
    SEEN.with(|seen| {
        let mut seen = seen.borrow_mut();
        if seen.len() <= ordinal {
            seen.resize(ordinal + 1, None);
        }
        seen[ordinal] = Some(ctx.clone());
    });
    Ok(ctx)
}

fn open_context(ordinal: usize) -> Result<Arc<WgpuContext>> {
    static CONTEXTS: OnceLock<Mutex<HashMap<usize, Arc<WgpuContext>>>> = OnceLock::new();
    let contexts = CONTEXTS.get_or_init(Default::default);
    let mut open = contexts.lock().map_err(|_| Error::Msg("wgpu: device registry poisoned".into()))?;
    if let Some(ctx) = open.get(&ordinal) {
        return Ok(ctx.clone());
    }
    let ctx = Arc::new(WgpuContext::open(ordinal)?);
    open.insert(ordinal, ctx.clone());
    Ok(ctx)
}

impl WgpuContext {
    fn open(ordinal: usize) -> Result<WgpuContext> {
        let adapters = &registry().adapters;
        let adapter = adapters.get(ordinal).ok_or_else(|| {
            let hint = "install a Vulkan / Metal / DX12 driver, or set WGPU_BACKEND";
            Error::DeviceNotAvailable(format!("wgpu:{ordinal}: {} wgpu adapter(s) found ({hint})", adapters.len()))
        })?;
        let info = adapter.get_info();
        let shader_f16 = adapter.features().contains(::wgpu::Features::SHADER_F16);
        let timestamps = adapter.features().contains(::wgpu::Features::TIMESTAMP_QUERY);
        // Half floats where offered; timestamp queries for kernel timing where offered.
        let wanted = ::wgpu::Features::SHADER_F16 | ::wgpu::Features::TIMESTAMP_QUERY;
        let desc = ::wgpu::DeviceDescriptor {
            label: Some("rnn"),
            required_features: adapter.features() & wanted,
            // Everything the adapter offers, so that tensors may be as large as it allows.
            required_limits: adapter.limits(),
            ..Default::default()
        };
        let (device, queue) = pollster::block_on(adapter.request_device(&desc))
            .map_err(|e| Error::DeviceNotAvailable(format!("wgpu:{ordinal} ({}): {e}", info.name)))?;
        let faulted = Arc::new(AtomicBool::new(false));
        let error = Arc::new(Mutex::new(None));
        let (sink, flag) = (error.clone(), faulted.clone());
        device.on_uncaptured_error(Arc::new(move |e: ::wgpu::Error| {
            let mut slot = sink.lock().unwrap_or_else(|p| p.into_inner());
            slot.get_or_insert_with(|| e.to_string());
            flag.store(true, Ordering::SeqCst);
        }));
        let lost = Arc::new(Mutex::new(None));
        let (lost_sink, flag) = (lost.clone(), faulted.clone());
        device.set_device_lost_callback(move |reason, msg| {
            *lost_sink.lock().unwrap_or_else(|p| p.into_inner()) = Some(format!("{reason:?}: {msg}"));
            flag.store(true, Ordering::SeqCst);
        });
        let debug = std::env::var("RNN_GPU_DEBUG").is_ok_and(|v| v != "0");
        tracing::debug!(ordinal, name = %info.name, backend = ?info.backend, "wgpu device opened");
        let limits = device.limits();
        let target = crate::gpu::target::Target::wgsl(limits.max_compute_workgroups_per_dimension as usize, shader_f16)
            .on_cpu(info.device_type == ::wgpu::DeviceType::Cpu);
        let pooled = crate::gpu_pool::pool_enabled();
        Ok(WgpuContext {
            batch: Mutex::new(Batch::new(&device, limits.min_storage_buffer_offset_alignment)),
            bind_groups: Mutex::new(BindGroups::new(pooled)),
            counters: Counters::default(),
            timestamps,
            kernel_nanos: Mutex::new(0.0),
            ordinal,
            name: info.name,
            target,
            limits,
            device,
            queue,
            shader_f16,
            pool: BufferPool::new(pooled),
            pipelines: Mutex::new(HashMap::new()),
            error,
            lost,
            faulted,
            debug,
        })
    }

    /// `Err` when the device was lost or reported an error since the last check.
    pub fn check(&self) -> Result<()> {
        if !self.faulted.load(Ordering::SeqCst) {
            return Ok(());
        }
        if let Some(why) = self.lost.lock().unwrap_or_else(|p| p.into_inner()).clone() {
            return Err(Error::DeviceNotAvailable(format!("wgpu:{} ({}) was lost: {why}", self.ordinal, self.name)));
        }
        // Not lost: the error is returned once, and the device counts as healthy again.
        self.faulted.store(false, Ordering::SeqCst);
        match self.error.lock().unwrap_or_else(|p| p.into_inner()).take() {
            Some(e) => Err(Error::Msg(format!("wgpu:{} ({}): {e}", self.ordinal, self.name))),
            None => Ok(()),
        }
    }

    /// The batch being recorded (a poisoned lock is taken over: a batch is valid between
    /// calls).
    pub fn batch(&self) -> std::sync::MutexGuard<'_, Batch> {
        self.batch.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Submits the batch `batch` holds, if any (the caller holds its lock).
    pub fn submit_batch(&self, batch: &mut Batch) {
        if let Some((commands, stamped)) = batch.finish(&self.queue) {
            self.queue.submit([commands]);
            Counters::bump(&self.counters.submits);
            if let (Some(timer), true) = (&batch.timer, stamped > 0) {
                let period = self.queue.get_timestamp_period();
                // A failed read makes the total NaN, which `kernel_time` reports as an error.
                let nanos = timer.read(&self.device, stamped, period).unwrap_or(f64::NAN);
                *self.kernel_nanos.lock().unwrap_or_else(|p| p.into_inner()) += nanos;
            }
        }
    }

    /// Turns kernel timing on (resetting the total) or off; `Err` where the adapter has no
    /// timestamp queries.
    pub fn set_kernel_timing(&self, on: bool) -> Result<()> {
        if on && !self.timestamps {
            let msg = format!("wgpu:{} ({}) has no timestamp queries", self.ordinal, self.name);
            return Err(Error::invalid("kernel timing", msg));
        }
        let mut batch = self.batch();
        self.submit_batch(&mut batch);
        batch.timer = on.then(|| KernelTimer::new(&self.device));
        *self.kernel_nanos.lock().unwrap_or_else(|p| p.into_inner()) = 0.0;
        self.check()
    }

    /// Nanoseconds of the timed kernels submitted since timing was turned on.
    pub fn kernel_nanos(&self) -> Result<f64> {
        let nanos = *self.kernel_nanos.lock().unwrap_or_else(|p| p.into_inner());
        match nanos.is_nan() {
            true => Err(Error::Msg(format!("wgpu:{}: reading the kernel timestamps failed", self.ordinal))),
            false => Ok(nanos),
        }
    }

    /// Submits the recorded commands without waiting for them.
    pub fn flush(&self) -> Result<()> {
        self.submit_batch(&mut self.batch());
        self.check()
    }

    /// Submits the recorded commands and blocks until the queue is idle.
    pub fn synchronize(&self) -> Result<()> {
        self.flush()?;
        self.wait()
    }

    /// Frees the buffers the pool keeps, and the bind groups that keep buffers alive.
    pub fn empty_cache(&self) {
        self.bind_groups.lock().unwrap_or_else(|p| p.into_inner()).clear();
        self.pool.empty_cache();
    }

    /// Blocks until the queue is idle (submitted work only: see `synchronize`). Counted as a
    /// host sync.
    pub fn wait(&self) -> Result<()> {
        Counters::bump(&self.counters.syncs);
        self.device
            .poll(::wgpu::PollType::wait_indefinitely())
            .map_err(|e| Error::DeviceNotAvailable(format!("wgpu:{} ({}): {e}", self.ordinal, self.name)))?;
        self.check()
    }

    /// The compiled pipeline (entry point `main`) of the kernel `key` stands for (`text`
    /// builds its source), compiled the first time `key` is seen.
    pub fn pipeline(&self, key: &str, text: impl FnOnce() -> String) -> Result<Arc<Kernel>> {
        let mut cache = self.pipelines.lock().map_err(|_| Error::Msg("wgpu: pipeline cache poisoned".into()))?;
        if let Some(p) = cache.get(key) {
            return Ok(p.clone());
        }
        let source = text();
        if self.debug {
            tracing::info!(ordinal = self.ordinal, "compiling WGSL kernel:\n{source}");
        }
        let scope = self.device.push_error_scope(::wgpu::ErrorFilter::Validation);
        let module = self.device.create_shader_module(::wgpu::ShaderModuleDescriptor {
            label: None,
            source: ::wgpu::ShaderSource::Wgsl(source.as_str().into()),
        });
        let layout =
            super::layout::storage_bindings(&source).map(|b| super::layout::bind_group_layout(&self.device, &b));
        let pipeline_layout = layout.as_ref().map(|l| {
            self.device.create_pipeline_layout(&::wgpu::PipelineLayoutDescriptor {
                label: None,
                bind_group_layouts: &[Some(l)],
                immediate_size: 0,
            })
        });
        let pipeline = self.device.create_compute_pipeline(&::wgpu::ComputePipelineDescriptor {
            label: None,
            layout: pipeline_layout.as_ref(),
            module: &module,
            entry_point: Some("main"),
            compilation_options: Default::default(),
            cache: None,
        });
        if let Some(e) = pollster::block_on(scope.pop()) {
            return Err(Error::Msg(format!("wgpu: kernel failed to compile: {e}\n{source}")));
        }
        let kernel = Arc::new(Kernel { pipeline, layout });
        cache.insert(key.to_string(), kernel.clone());
        Ok(kernel)
    }

    pub fn debug(&self) -> bool {
        self.debug
    }
}
