//! `nibble-info`: what nibble detects and which kernels it picks on this machine (see `nibble_ort::info`).
//!
//!     nibble-info          the report for a person
//!     nibble-info --json   the same as one JSON object
//!
//! `NIBBLE_ISA` and `NIBBLE_FAMILIES` apply as they do in a session. Under qemu-user, run the aarch64 build with
//! `-cpu MODEL` to see that model's ladder (scripts/aarch64/qemu-a64-run.sh).

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let json = match args.iter().map(String::as_str).collect::<Vec<_>>()[..] {
        [] => false,
        ["--json"] => true,
        ["-h" | "--help"] => {
            println!(
                "usage: nibble-info [--json]\nPrints nibble's version, the ONNX Runtime versions it supports, the CPU features it detects, its kernel ladder and which kernel family each compute path, bit width and block size gets. NIBBLE_ISA / NIBBLE_FAMILIES apply."
            );
            return;
        }
        _ => {
            eprintln!("nibble-info: unknown arguments {args:?} (usage: nibble-info [--json])");
            std::process::exit(2);
        }
    };
    let info = nibble_ort::info::Info::gather();
    if json { println!("{}", info.json()) } else { print!("{}", info.text()) }
}
