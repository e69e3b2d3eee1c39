//! Datasets (in progress).
