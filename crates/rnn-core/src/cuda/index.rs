//! Index ops (to be written).
use super::storage::CudaStorage;
use crate::{Error, Layout, Result};

pub(crate) fn index_select(
    _x: &CudaStorage,
    _l: &Layout,
    _ids: &CudaStorage,
    _il: &Layout,
    _dim: usize,
) -> Result<CudaStorage> {
    Err(Error::Msg("cuda: index_select is not implemented yet".into()))
}

pub(crate) fn gather(
    _x: &CudaStorage,
    _l: &Layout,
    _ids: &CudaStorage,
    _il: &Layout,
    _dim: usize,
) -> Result<CudaStorage> {
    Err(Error::Msg("cuda: gather is not implemented yet".into()))
}

pub(crate) fn scatter_add(
    _x: &CudaStorage,
    _l: &Layout,
    _ids: &CudaStorage,
    _il: &Layout,
    _src: &CudaStorage,
    _sl: &Layout,
    _dim: usize,
) -> Result<CudaStorage> {
    Err(Error::Msg("cuda: scatter_add is not implemented yet".into()))
}

/// Every kernel source this module can launch, named, for compile checks.
pub(crate) fn variants() -> Vec<(String, String)> {
    Vec::new()
}
