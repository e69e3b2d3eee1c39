//! unfold2d / fold2d (to be written).
use super::storage::CudaStorage;
use crate::window::Window2d;
use crate::{Error, Layout, Result};

pub(crate) fn unfold2d(_x: &CudaStorage, _l: &Layout, _w: &Window2d, _pad: f64) -> Result<CudaStorage> {
    Err(Error::Msg("cuda: unfold2d is not implemented yet".into()))
}

pub(crate) fn fold2d(_x: &CudaStorage, _l: &Layout, _hw: (usize, usize), _w: &Window2d) -> Result<CudaStorage> {
    Err(Error::Msg("cuda: fold2d is not implemented yet".into()))
}

/// Every kernel source this module can launch, named, for compile checks.
pub(crate) fn variants() -> Vec<(String, String)> {
    Vec::new()
}
