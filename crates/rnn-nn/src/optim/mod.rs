//! Optimizers (in progress)
