//! Gradients as Python sees them: `tensor.grad` after `loss.backward()`, and `rnn.no_grad()`.
//!
//! The core's `backward` returns a `GradStore` keyed by tensor id; PyTorch users expect the
//! gradient to land on the leaf tensor instead (`x.grad`), accumulating over calls. Each
//! Python wrapper of a variable holds a shared *grad slot*; a registry maps variable ids to
//! weak references of those slots, so `backward` can fill the slots of every variable that
//! still has a Python wrapper, and a slot is freed with the last wrapper of its variable.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};

use pyo3::prelude::*;
use rnn_core::{GradStore, NoGradGuard, Tensor, TensorId};

/// The gradient of one variable, shared by all Python wrappers of it.
pub type GradSlot = Arc<Mutex<Option<Tensor>>>;

struct Registry {
    slots: HashMap<TensorId, Weak<Mutex<Option<Tensor>>>>,
    /// Size after the last sweep of dead entries: the next sweep waits until it doubles, so
    /// registration stays O(1) amortized.
    swept_len: usize,
}

static REGISTRY: Mutex<Option<Registry>> = Mutex::new(None);

fn with_registry<R>(f: impl FnOnce(&mut Registry) -> R) -> R {
    let mut guard = REGISTRY.lock().unwrap_or_else(|e| e.into_inner());
    f(guard.get_or_insert_with(|| Registry { slots: HashMap::new(), swept_len: 0 }))
}

/// The grad slot of `variable`, shared with its other wrappers (created if it has none).
pub fn slot_for(variable: &Tensor) -> GradSlot {
    with_registry(|reg| {
        if let Some(slot) = reg.slots.get(&variable.id()).and_then(Weak::upgrade) {
            return slot;
        }
        if reg.slots.len() >= 2 * reg.swept_len.max(64) {
            reg.slots.retain(|_, weak| weak.strong_count() > 0);
            reg.swept_len = reg.slots.len();
        }
        let slot: GradSlot = Arc::new(Mutex::new(None));
        reg.slots.insert(variable.id(), Arc::downgrade(&slot));
        slot
    })
}

/// Adds the gradients of `store` into the slots of the variables that have a Python wrapper.
pub fn accumulate_into_slots(store: &GradStore) -> rnn_core::Result<()> {
    let live: Vec<(TensorId, GradSlot)> =
        with_registry(|reg| reg.slots.iter().filter_map(|(id, w)| Some((*id, w.upgrade()?))).collect());
    let _no_grad = NoGradGuard::new();
    for (id, slot) in live {
        let Some(grad) = store.get_id(id) else { continue };
        let mut current = slot.lock().unwrap_or_else(|e| e.into_inner());
        let sum = match current.take() {
            Some(previous) => previous.add(grad)?,
            None => grad.clone(),
        };
        *current = Some(sum);
    }
    Ok(())
}

/// ``with rnn.no_grad():`` records no operations for autograd inside the block (inference,
/// manual weight updates). Applies to the current thread.
#[pyclass(name = "no_grad", module = "rnn")]
pub struct PyNoGrad {
    guard: Option<NoGradGuard>,
}

#[pymethods]
impl PyNoGrad {
    #[new]
    fn new() -> Self {
        PyNoGrad { guard: None }
    }

    fn __enter__(mut slf: PyRefMut<'_, Self>) -> PyRefMut<'_, Self> {
        slf.guard = Some(NoGradGuard::new());
        slf
    }

    #[pyo3(signature = (*_args))]
    fn __exit__(&mut self, _args: &Bound<'_, pyo3::types::PyTuple>) -> bool {
        self.guard = None;
        false
    }
}

/// Whether operations are being recorded for autograd on this thread (False inside
/// ``rnn.no_grad()``).
#[pyfunction]
fn is_grad_enabled() -> bool {
    rnn_core::grad_enabled()
}

pub fn register(_py: Python<'_>, m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PyNoGrad>()?;
    m.add_function(wrap_pyfunction!(is_grad_enabled, m)?)
}
