//! Errors of the provider. `api::to_status` and `api::make_status` turn them into `OrtStatus` values for ORT.

use std::fmt;

/// An error on its way to ONNX Runtime. The message is complete: it names the op, the node where known (see
/// [`Error::in_node`]; shape inference does not know it) and the offending value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Error {
    pub code: ErrorCode,
    pub message: String,
}

/// The ORT error codes we use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorCode {
    /// The model is malformed (attributes, shapes, types, values).
    InvalidArgument,
    /// Anything else: ORT API failures, panics.
    Fail,
}

pub type Result<T> = std::result::Result<T, Error>;

impl Error {
    pub fn invalid(message: impl Into<String>) -> Self {
        Error { code: ErrorCode::InvalidArgument, message: message.into() }
    }

    pub fn fail(message: impl Into<String>) -> Self {
        Error { code: ErrorCode::Fail, message: message.into() }
    }

    /// A panic caught at the FFI boundary, turned into an error instead of unwinding into C++.
    pub fn panic(context: &str, payload: Box<dyn std::any::Any + Send>) -> Self {
        let what = payload
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| payload.downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "unknown panic payload".to_string());
        Error::fail(format!("{context}: internal error (panic): {what}"))
    }

    /// Prefixes the message with the op and node, unless it already names them.
    pub fn in_node(self, node: &str) -> Self {
        if self.message.starts_with(crate::OP_PREFIX) {
            return self;
        }
        Error { code: self.code, message: format!("{} node '{node}': {}", crate::OP_PREFIX, self.message) }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for Error {}

impl From<nibble_kernels::FormatError> for Error {
    fn from(e: nibble_kernels::FormatError) -> Self {
        Error::invalid(e.0)
    }
}

impl From<nibble_kernels::SelectError> for Error {
    fn from(e: nibble_kernels::SelectError) -> Self {
        Error::fail(e.0)
    }
}
