//! Registration: which domains get the op, read from the session config once per `RegisterCustomOps` call.
#![deny(unsafe_code)]

use crate::OP_PREFIX;
use crate::matmul_nbits::OpConfig;
use crate::status::{Error, Result};
use nibble_kernels::{ActQuant, Cpu, registry, versus_ort};

/// Session config key: "0" keeps ORT's own `com.microsoft::MatMulNBits`; "1" replaces it on every node; unset
/// (default) replaces it where nibble is measured faster on this CPU ([`Override::Auto`]).
pub const KEY_OVERRIDE: &str = "nibble.override_com_microsoft";
/// Session config key: what accuracy_level 0 (unset) means: "4" (default, int8 path) or "1" (fp32 path).
pub const KEY_ACCURACY_DEFAULT: &str = "nibble.accuracy_level_default";
/// Session config key: the int8 path's activation numerics, "block" (default: per block of the weights' block
/// size) or "row" (per row, asymmetric: ORT-arm64's numerics).
pub const KEY_ACT_QUANT: &str = "nibble.activation_quant";

/// Every setting, for lookups and messages.
pub const KEYS: [&str; 3] = [KEY_OVERRIDE, KEY_ACCURACY_DEFAULT, KEY_ACT_QUANT];

/// The same setting as C++ `Ort::CustomOpConfigs().AddConfig("MatMulNBits", key, value)` stores it:
/// `custom_op.MatMulNBits.<key without "nibble.">` (read when `nibble.<key>` is not set).
pub fn custom_op_config_key(key: &str) -> String {
    format!("custom_op.MatMulNBits.{}", key.trim_start_matches("nibble."))
}

/// The custom-op frontend's spellings of setting `key`, in the order they are looked up: `nibble.<key>`, then C++
/// CustomOpConfigs' `custom_op.MatMulNBits.<key>`.
pub fn custom_op_spellings(key: &str) -> [String; 2] {
    [key.to_string(), custom_op_config_key(key)]
}

/// Session config key the custom-op frontend sets on the options it registered into (value "1"), so a second
/// registration on the same options is refused by name instead of failing in ORT ("Domain already set").
pub const KEY_REGISTERED: &str = "nibble.registered";

/// The first config key that looks like one of ours but is not (`nibble.*`, or C++'s
/// `custom_op.MatMulNBits.*` spelling): a typo would otherwise be ignored silently.
pub fn unknown_key<'a>(keys: impl IntoIterator<Item = &'a str>) -> Option<&'a str> {
    let known = KEYS;
    keys.into_iter().find(|k| {
        (k.starts_with("nibble.") && !known.contains(k) && *k != KEY_REGISTERED)
            || (k.starts_with("custom_op.MatMulNBits.") && !known.iter().any(|n| custom_op_config_key(n) == *k))
    })
}

/// The error for [`unknown_key`].
pub fn unknown_key_error(key: &str) -> Error {
    Error::invalid(format!(
        "{OP_PREFIX} session config {key} is not a nibble setting: the settings are {KEY_OVERRIDE} (0 or 1), \
         {KEY_ACCURACY_DEFAULT} (1-4) and {KEY_ACT_QUANT} (block or row), also spelled {}, {} and {}",
        custom_op_config_key(KEY_OVERRIDE),
        custom_op_config_key(KEY_ACCURACY_DEFAULT),
        custom_op_config_key(KEY_ACT_QUANT)
    ))
}

/// Compares the settings a session was created with (`now`) with those read when the library was registered on
/// its options (`registered`): a setting added after registration has no effect, which is an error naming it.
pub fn check_unchanged(registered: &Registration, now: &Registration) -> Result<()> {
    let late = if registered.override_ms != now.override_ms {
        Some((KEY_OVERRIDE, now.override_ms.value().to_string()))
    } else if registered.config.default_accuracy != now.config.default_accuracy {
        Some((KEY_ACCURACY_DEFAULT, now.config.default_accuracy.to_string()))
    } else if registered.config.activation_quant != now.config.activation_quant {
        Some((KEY_ACT_QUANT, now.config.activation_quant.name().to_string()))
    } else {
        None
    };
    match late {
        None => Ok(()),
        Some((key, value)) => Err(Error::invalid(format!(
            "{OP_PREFIX} session config {key}={value} was set after libnibble_ort.so was registered on these \
             session options, so it would have no effect: set nibble.* keys before registering the library"
        ))),
    }
}

/// The domains we register, in order.
pub const OUR_DOMAIN: &str = "nibble";
pub const MS_DOMAIN: &str = "com.microsoft";

/// Which `com.microsoft::MatMulNBits` nodes nibble replaces ([`KEY_OVERRIDE`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Override {
    /// Unset: those where nibble has a family measured faster than ORT's own kernel on this CPU
    /// (`nibble_kernels::versus_ort`): the EP declines the others node by node; the custom-op frontend, whose
    /// domain replaces the op for every node, leaves `com.microsoft` to ORT on a CPU where ORT is faster for any.
    Auto,
    /// "1": every node, even where ORT's own kernel is faster.
    All,
    /// "0": none.
    Off,
}

impl Override {
    /// The setting's value as a user writes it ("unset" for [`Override::Auto`]).
    pub fn value(self) -> &'static str {
        match self {
            Override::Auto => "unset",
            Override::All => "1",
            Override::Off => "0",
        }
    }
}

/// What one `RegisterCustomOps` call sets up.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Registration {
    /// `nibble`, and `com.microsoft` unless the override is off.
    pub domains: Vec<&'static str>,
    pub override_ms: Override,
    pub config: OpConfig,
}

/// Why ORT's own kernel should run the `com.microsoft` node with `traits` on this machine (the EP declines it),
/// or None where nibble runs it: only under [`Override::Auto`] and without `NIBBLE_FAMILIES`, from the decision
/// table in `nibble_kernels::versus_ort` for this CPU and the loaded runtime.
pub fn ort_runs_node(override_ms: Override, traits: &versus_ort::NodeTraits) -> Option<String> {
    if override_ms != Override::Auto || registry::ladder().is_ok_and(|l| l.families_named()) {
        return None;
    }
    versus_ort::ort_faster_with(Cpu::get(), &kernels_cpu(), traits, crate::api::runtime_minor())
}

/// The CPU nibble's kernels may use: this one as `NIBBLE_ISA` caps it (the ladder's).
fn kernels_cpu() -> Cpu {
    registry::ladder().map_or(*Cpu::get(), |l| *l.cpu())
}

/// Why the custom-op frontend leaves `com.microsoft` to ORT on this machine (its domain would replace the op on
/// every node, so it steps aside where ORT is faster for any), or None.
pub fn ort_keeps_ms_domain(override_ms: Override) -> Option<String> {
    if override_ms != Override::Auto || registry::ladder().is_ok_and(|l| l.families_named()) {
        return None;
    }
    versus_ort::ort_faster_somewhere_with(Cpu::get(), &kernels_cpu(), crate::api::runtime_minor())
}

/// Decides the registration from `lookup(key)` of every key in [`KEYS`]: each frontend's lookup tries its own
/// spellings of the key (None = not set).
pub fn plan_from(mut lookup: impl FnMut(&str) -> Result<Option<String>>) -> Result<Registration> {
    let (ov, acc, act) = (lookup(KEY_OVERRIDE)?, lookup(KEY_ACCURACY_DEFAULT)?, lookup(KEY_ACT_QUANT)?);
    plan(ov.as_deref(), acc.as_deref(), act.as_deref())
}

/// Decides the registration from the session config entries (None = not set).
pub fn plan(
    override_ms: Option<&str>,
    accuracy_default: Option<&str>,
    activation_quant: Option<&str>,
) -> Result<Registration> {
    let override_ms = match override_ms.map(str::trim) {
        None => Override::Auto,
        Some("1") | Some("true") => Override::All,
        Some("0") | Some("false") => Override::Off,
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
    let activation_quant = match activation_quant {
        None => ActQuant::Block,
        Some(v) => ActQuant::parse(v).ok_or_else(|| {
            Error::invalid(format!(
                "{OP_PREFIX} session config {KEY_ACT_QUANT}={v:?} is invalid: use \"block\" (activations quantized \
                 per block, the default) or \"row\" (per row, ORT-arm64's numerics)"
            ))
        })?,
    };
    let mut domains = vec![OUR_DOMAIN];
    if override_ms != Override::Off {
        domains.push(MS_DOMAIN);
    }
    Ok(Registration { domains, override_ms, config: OpConfig { default_accuracy, activation_quant } })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unknown_keys_are_found_and_named() {
        let ok = ["nibble.override_com_microsoft", "custom_op.MatMulNBits.accuracy_level_default", "nibble.registered"];
        assert_eq!(unknown_key(ok.iter().copied().chain(["session.x", "ep.other.y"])), None);
        assert_eq!(unknown_key(["session.x", "nibble.accuracy_level"]), Some("nibble.accuracy_level"));
        assert_eq!(unknown_key(["custom_op.MatMulNBits.override"]), Some("custom_op.MatMulNBits.override"));
        let e = unknown_key_error("nibble.accuracy_level").message;
        assert!(e.contains("nibble.accuracy_level is not") && e.contains(KEY_ACCURACY_DEFAULT), "{e}");
    }

    #[test]
    fn late_settings_are_named() {
        let reg = plan(None, None, None).unwrap();
        assert!(check_unchanged(&reg, &plan(None, Some("4"), Some("block")).unwrap()).is_ok());
        let e = check_unchanged(&reg, &plan(Some("0"), None, None).unwrap()).unwrap_err().message;
        assert!(e.contains("nibble.override_com_microsoft=0 was set after"), "{e}");
        // "1" is not the default: it replaces ORT's op even where ORT's kernel is faster.
        let e = check_unchanged(&reg, &plan(Some("1"), None, None).unwrap()).unwrap_err().message;
        assert!(e.contains("nibble.override_com_microsoft=1 was set after"), "{e}");
        let forced = plan(Some("true"), None, None).unwrap();
        assert!(check_unchanged(&forced, &plan(Some("1"), None, None).unwrap()).is_ok());
        let e = check_unchanged(&reg, &plan(None, Some("1"), None).unwrap()).unwrap_err().message;
        assert!(e.contains("nibble.accuracy_level_default=1 was set after"), "{e}");
        let e = check_unchanged(&reg, &plan(None, None, Some("row")).unwrap()).unwrap_err().message;
        assert!(e.contains("nibble.activation_quant=row was set after"), "{e}");
    }

    #[test]
    fn defaults_override_and_int8() {
        let r = plan(None, None, None).unwrap();
        assert_eq!((r.domains, r.override_ms), (vec!["nibble", "com.microsoft"], Override::Auto));
        assert_eq!(r.config.default_accuracy, 4);
        let r = plan(Some("1"), None, None).unwrap();
        assert_eq!((r.domains, r.override_ms), (vec!["nibble", "com.microsoft"], Override::All));
        let r = plan(Some("0"), Some("1"), Some(" row ")).unwrap();
        assert_eq!((r.domains, r.override_ms), (vec!["nibble"], Override::Off));
        assert_eq!(r.config.default_accuracy, 1);
        assert_eq!(r.config.activation_quant, ActQuant::Row);
        assert_eq!(plan(None, None, None).unwrap().config.activation_quant, ActQuant::Block);
    }

    #[test]
    fn custom_op_config_keys() {
        assert_eq!(custom_op_config_key(KEY_OVERRIDE), "custom_op.MatMulNBits.override_com_microsoft");
        assert_eq!(custom_op_config_key(KEY_ACCURACY_DEFAULT), "custom_op.MatMulNBits.accuracy_level_default");
        assert_eq!(custom_op_config_key(KEY_ACT_QUANT), "custom_op.MatMulNBits.activation_quant");
        assert_eq!(unknown_key(["nibble.activation_quant", "custom_op.MatMulNBits.activation_quant"]), None);
    }

    #[test]
    fn bad_values_are_named() {
        let e = plan(Some("maybe"), None, None).unwrap_err();
        assert!(e.message.contains(KEY_OVERRIDE) && e.message.contains("maybe"));
        let e = plan(None, Some("7"), None).unwrap_err();
        assert!(e.message.contains(KEY_ACCURACY_DEFAULT) && e.message.contains('7'));
        let e = plan(None, None, Some("per_row")).unwrap_err();
        assert!(e.message.contains(KEY_ACT_QUANT) && e.message.contains("per_row"), "{}", e.message);
    }
}
