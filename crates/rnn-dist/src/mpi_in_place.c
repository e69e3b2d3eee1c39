/* MPI_IN_PLACE of the MPI library this crate is built against, for the Rust side
   (src/mpi_engine.rs): the `mpi` crate does not export it. */
#include <mpi.h>

void *const rnn_mpi_in_place = MPI_IN_PLACE;
