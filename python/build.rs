//! Linker flags for a Python extension module (on macOS, Python's symbols are looked up when
//! the module is imported; elsewhere this adds nothing).

fn main() {
    pyo3_build_config::add_extension_module_link_args();
}
