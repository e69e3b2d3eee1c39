//! The Keras-like training API (Network, TrainingConfig, datasets). It starts empty and is
//! filled in by the training work; the crate exists so the workspace has its final shape.
