// Records the resolved burn version (from Cargo.lock) for the report line.
fn main() {
    let lock = std::fs::read_to_string("Cargo.lock").unwrap_or_default();
    let version = lock
        .split("[[package]]")
        .find(|p| p.contains("\nname = \"burn\"\n"))
        .and_then(|p| p.lines().find_map(|l| l.strip_prefix("version = \"")))
        .map(|v| v.trim_end_matches('"').to_string())
        .unwrap_or_else(|| "?".into());
    println!("cargo:rustc-env=BURN_VERSION={version}");
    println!("cargo:rerun-if-changed=Cargo.lock");
}
