//! The Llama driver's core, shared by the command-line driver (`nibble-llama`, src/main.rs) and the chat server:
//! the model directory and its session (`model`), how nibble is loaded (`frontend`), chat templates (`chat`), the
//! step-wise generation loop (`generate`), sampling, streaming detokenization and the metrics.

pub mod chat;
pub mod cli;
pub mod frontend;
pub mod generate;
pub mod icount;
pub mod metrics;
pub mod model;
pub mod paths;
pub mod prompt;
pub mod sampling;
pub mod stream;
