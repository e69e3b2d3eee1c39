//! Matmul through cuBLASLt (to be written).
use super::storage::CudaStorage;
use crate::{Error, Layout, Result};

pub(crate) fn matmul(_a: &CudaStorage, _l: &Layout, _b: &CudaStorage, _rl: &Layout) -> Result<CudaStorage> {
    Err(Error::Msg("cuda: matmul is not implemented yet".into()))
}
