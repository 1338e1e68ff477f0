//! Registration: which domains get the op, read from the session config once per `RegisterCustomOps` call.
#![deny(unsafe_code)]

use crate::OP_PREFIX;
use crate::matmul_nbits::OpConfig;
use crate::status::{Error, Result};

/// Session config key: "0" keeps ORT's own `com.microsoft::MatMulNBits`; "1" (default) replaces it.
pub const KEY_OVERRIDE: &str = "nibble.override_com_microsoft";
/// Session config key: what accuracy_level 0 (unset) means: "4" (default, int8 path) or "1" (fp32 path).
pub const KEY_ACCURACY_DEFAULT: &str = "nibble.accuracy_level_default";

/// The same setting as C++ `Ort::CustomOpConfigs().AddConfig("MatMulNBits", key, value)` stores it:
/// `custom_op.MatMulNBits.<key without "nibble.">` (read when `nibble.<key>` is not set).
pub fn custom_op_config_key(key: &str) -> String {
    format!("custom_op.MatMulNBits.{}", key.trim_start_matches("nibble."))
}

/// The domains we register, in order.
pub const OUR_DOMAIN: &str = "nibble";
pub const MS_DOMAIN: &str = "com.microsoft";

/// What one `RegisterCustomOps` call sets up.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Registration {
    pub domains: Vec<&'static str>,
    pub config: OpConfig,
}

/// Decides the registration from `lookup(key)` of [`KEY_OVERRIDE`] and [`KEY_ACCURACY_DEFAULT`]: each frontend's
/// lookup tries its own spellings of the key (None = not set).
pub fn plan_from(mut lookup: impl FnMut(&str) -> Result<Option<String>>) -> Result<Registration> {
    let (ov, acc) = (lookup(KEY_OVERRIDE)?, lookup(KEY_ACCURACY_DEFAULT)?);
    plan(ov.as_deref(), acc.as_deref())
}

/// Decides the registration from the session config entries (None = not set).
pub fn plan(override_ms: Option<&str>, accuracy_default: Option<&str>) -> Result<Registration> {
    let override_ms = match override_ms.map(str::trim) {
        None | Some("1") | Some("true") => true,
        Some("0") | Some("false") => false,
        Some(v) => {
            return Err(Error::invalid(format!(
                "{OP_PREFIX} session config {KEY_OVERRIDE}={v:?} is invalid: use \"0\" or \"1\""
            )));
        }
    };
    let default_accuracy = match accuracy_default.map(str::trim) {
        None => 4,
        Some(v) => match v.parse::<i64>() {
            Ok(l @ 1..=4) => l,
            _ => {
                return Err(Error::invalid(format!(
                    "{OP_PREFIX} session config {KEY_ACCURACY_DEFAULT}={v:?} is invalid: use 1, 2, 3 (fp32 path) \
                     or 4 (int8 path)"
                )));
            }
        },
    };
    let mut domains = vec![OUR_DOMAIN];
    if override_ms {
        domains.push(MS_DOMAIN);
    }
    Ok(Registration { domains, config: OpConfig { default_accuracy } })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_override_and_int8() {
        let r = plan(None, None).unwrap();
        assert_eq!(r.domains, vec!["nibble", "com.microsoft"]);
        assert_eq!(r.config.default_accuracy, 4);
        let r = plan(Some("0"), Some("1")).unwrap();
        assert_eq!(r.domains, vec!["nibble"]);
        assert_eq!(r.config.default_accuracy, 1);
    }

    #[test]
    fn custom_op_config_keys() {
        assert_eq!(custom_op_config_key(KEY_OVERRIDE), "custom_op.MatMulNBits.override_com_microsoft");
        assert_eq!(custom_op_config_key(KEY_ACCURACY_DEFAULT), "custom_op.MatMulNBits.accuracy_level_default");
    }

    #[test]
    fn bad_values_are_named() {
        let e = plan(Some("maybe"), None).unwrap_err();
        assert!(e.message.contains(KEY_OVERRIDE) && e.message.contains("maybe"));
        let e = plan(None, Some("7")).unwrap_err();
        assert!(e.message.contains(KEY_ACCURACY_DEFAULT) && e.message.contains('7'));
    }
}
