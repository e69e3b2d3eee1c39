//! Timing device work with CUDA events: the time between two events recorded on a device's
//! stream is the time the GPU spent on the work queued between them.

use std::time::Duration;

use cudarc::driver::sys::CUevent_flags;
use cudarc::driver::CudaEvent;

use super::context::{device, driver_err};
use super::libs;
use crate::Result;

/// A point in the work queue of one CUDA device, with a timestamp once the GPU reaches it.
pub struct CudaTimingEvent {
    event: CudaEvent,
    ordinal: usize,
}

impl std::fmt::Debug for CudaTimingEvent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "CudaTimingEvent(cuda:{})", self.ordinal)
    }
}

/// Records a timing event after the work queued on `cuda:ordinal` so far (does not wait).
pub fn record_timing_event(ordinal: usize) -> Result<CudaTimingEvent> {
    let dev = device(ordinal)?;
    let event = libs::guarded("cuEventRecord", || dev.stream.record_event(Some(CUevent_flags::CU_EVENT_DEFAULT)))?
        .map_err(driver_err(ordinal, "record event"))?;
    Ok(CudaTimingEvent { event, ordinal })
}

impl CudaTimingEvent {
    /// The device time from `start` to this event; waits until the GPU has reached it.
    pub fn elapsed_since(&self, start: &CudaTimingEvent) -> Result<Duration> {
        let ms = libs::guarded("cuEventElapsedTime", || start.event.elapsed_ms(&self.event))?
            .map_err(driver_err(self.ordinal, "event timing"))?;
        Ok(Duration::from_secs_f64(f64::from(ms.max(0.0)) / 1e3))
    }

    pub fn ordinal(&self) -> usize {
        self.ordinal
    }
}
