//! With the `mpi` feature: compiles `src/mpi_in_place.c`, which gives Rust the MPI library's
//! `MPI_IN_PLACE`. That is a macro whose value differs between MPI families (OpenMPI, MPICH),
//! and the `mpi` crate does not export it; an in-place all_reduce saves a copy of the buffer.

fn main() {
    #[cfg(feature = "mpi")]
    compile_in_place_shim();
}

#[cfg(feature = "mpi")]
fn compile_in_place_shim() {
    println!("cargo:rerun-if-changed=src/mpi_in_place.c");
    // The `mpi` crate's own build fails with the full explanation when MPI is missing.
    let Ok(lib) = build_probe_mpi::probe() else { panic!("no MPI library found (see the `mpi` crate's build output)") };
    let mut build = cc::Build::new();
    build.file("src/mpi_in_place.c");
    match lib.mpicc {
        Some(mpicc) => {
            build.compiler(mpicc);
        }
        None => {
            build.includes(&lib.include_paths);
        }
    }
    build.compile("rnn_mpi_in_place");
}
