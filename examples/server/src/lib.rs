//! nibble-serve's library part: the request parsing and validation (`api`), shared by the server binary
//! (`main.rs`) and the fuzz target `serve_request` (`fuzz/fuzz_targets/serve_request.rs`).

pub mod api;
