//! `nibble-info`: the report a person reads and the JSON tools read, with NIBBLE_ISA applied as in a session, and
//! bad arguments refused.

use std::process::Command;

fn run(args: &[&str], isa: Option<&str>) -> std::process::Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_nibble-info"));
    cmd.args(args).env_remove("NIBBLE_FAMILIES");
    match isa {
        Some(v) => cmd.env("NIBBLE_ISA", v),
        None => cmd.env_remove("NIBBLE_ISA"),
    };
    cmd.output().expect("run nibble-info")
}

fn json(isa: Option<&str>) -> serde_json::Value {
    let out = run(&["--json"], isa);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).expect("nibble-info --json prints one JSON object")
}

#[test]
fn json_names_version_runtimes_ladder_and_a_family_per_shape() {
    let v = json(None);
    assert_eq!(v["version"], env!("CARGO_PKG_VERSION"));
    assert_eq!(v["arch"], std::env::consts::ARCH);
    assert_eq!(v["ort"]["custom_op_min"], "1.17");
    assert_eq!(v["ort"]["ep_min"], "1.24");
    let act = v["settings"].as_array().unwrap().iter().find(|s| s["key"] == "nibble.activation_quant").unwrap();
    assert_eq!((act["values"].clone(), act["default"].clone()), (serde_json::json!(["block", "row"]), "block".into()));
    let ladder: Vec<&str> = v["ladder"].as_array().unwrap().iter().map(|f| f["family"].as_str().unwrap()).collect();
    assert!(
        ladder.iter().any(|f| f.starts_with("portable_")),
        "the portable fallback is always on the ladder: {ladder:?}"
    );
    let selection = v["selection"].as_array().unwrap();
    assert_eq!(selection.len(), 30);
    for row in selection {
        let family = row["family"].as_str().unwrap_or_else(|| panic!("no family: {row}"));
        assert!(ladder.contains(&family), "{family} is not on the ladder {ladder:?}");
        assert!(family.contains(&format!("_{}_", row["path"].as_str().unwrap())), "{row}");
    }
    let rungs = v["rungs"].as_array().unwrap();
    assert_eq!(rungs[0], "portable");
}

#[test]
fn nibble_isa_caps_the_ladder_as_in_a_session() {
    let v = json(Some("portable"));
    assert_eq!(v["nibble_isa"], "portable");
    for f in v["ladder"].as_array().unwrap() {
        assert!(f["family"].as_str().unwrap().starts_with("portable_"), "{f}");
    }
    let text = String::from_utf8(run(&[], Some("portable")).stdout).unwrap();
    assert!(text.contains("NIBBLE_ISA=portable") && text.contains("-> portable_int8_"), "{text}");
    assert!(text.contains("custom-op library from 1.17, execution provider from 1.24"), "{text}");
    assert!(text.contains("nibble.activation_quant = block | row (default block)"), "{text}");
}

#[test]
fn unknown_arguments_are_refused() {
    let out = run(&["--jsn"], None);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--jsn"));
}
