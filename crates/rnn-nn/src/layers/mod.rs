//! The layers. Each file holds one family, its forward pass written in tensor ops, so
//! autograd and every device come for free.

mod attention;
mod conv;
mod dropout;
mod embedding;
mod flatten;
mod gpt;
mod linear;
mod norm;
mod pool;
mod recurrent;
mod transformer;

pub use attention::*;
pub use conv::*;
pub use dropout::*;
pub use embedding::*;
pub use flatten::*;
pub use gpt::*;
pub use linear::*;
pub use norm::*;
pub use pool::*;
pub use recurrent::*;
pub use transformer::*;
