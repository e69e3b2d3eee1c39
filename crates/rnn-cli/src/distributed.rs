//! Which device a rank started by `mpirun` (or Slurm's `srun`) trains on.

use rnn::Device;

/// The launcher's variables holding this process's index among the ranks of its host:
/// OpenMPI, MPICH / Intel MPI, Slurm.
const LOCAL_RANK_VARS: [&str; 3] = ["OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID", "SLURM_LOCALID"];

/// `best` (what `Device::best()` chose), except that on a host with several GPUs of its
/// kind, rank `r` of the host takes GPU `r`, so the ranks of a host do not all share GPU 0.
/// An explicit `RNN_GPU_DEVICE` wins, and so does `best` when GPU `r` does not exist.
pub fn rank_device(best: Device) -> Device {
    if Device::env_request().is_some() {
        return best;
    }
    let Some(local) = local_rank() else { return best };
    let candidate = match best {
        Device::Cuda(_) => Device::Cuda(local),
        Device::Wgpu(_) => Device::Wgpu(local),
        Device::Cpu => return best,
    };
    if candidate.is_available() {
        candidate
    } else {
        best
    }
}

fn local_rank() -> Option<usize> {
    LOCAL_RANK_VARS.iter().find_map(|var| std::env::var(var).ok()?.trim().parse().ok())
}
