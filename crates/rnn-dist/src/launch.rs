//! What the environment says about how this process was launched, and the group timeout.

use std::time::Duration;

use rnn_core::{Error, Result};

/// The environment variable that sets how long a collective may wait for the other ranks, in
/// seconds (a decimal number).
pub const TIMEOUT_ENV: &str = "RNN_DIST_TIMEOUT";

/// How long a collective waits for the other ranks when `RNN_DIST_TIMEOUT` is not set.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(300);

/// The timeout from `RNN_DIST_TIMEOUT`, or [`DEFAULT_TIMEOUT`].
pub fn timeout_from_env() -> Result<Duration> {
    match std::env::var(TIMEOUT_ENV) {
        Err(_) => Ok(DEFAULT_TIMEOUT),
        Ok(text) => parse_timeout(&text),
    }
}

fn parse_timeout(text: &str) -> Result<Duration> {
    let seconds: f64 = text.trim().parse().unwrap_or(f64::NAN);
    if seconds.is_finite() && seconds > 0.0 && seconds < 1e9 {
        Ok(Duration::from_secs_f64(seconds))
    } else {
        Err(Error::invalid(
            "ProcessGroup",
            format!("{TIMEOUT_ENV}={text:?} is not a number of seconds above 0 (e.g. 300 or 2.5)"),
        ))
    }
}

/// The environment variable that turns the header check of MPI collectives off when `0`
/// (see `ProcessGroup::set_header_checks`).
pub const CHECKS_ENV: &str = "RNN_DIST_CHECKS";

/// False when `RNN_DIST_CHECKS` is `0`.
pub fn header_checks_from_env() -> bool {
    std::env::var(CHECKS_ENV).map_or(true, |v| v.trim() != "0")
}

/// The environment variable that, when `1`, makes the MPI group run a collective whose caller
/// waits for it on the caller's thread (see `ProcessGroup::direct_calls`).
pub const DIRECT_ENV: &str = "RNN_DIST_DIRECT";

/// Whether `RNN_DIST_DIRECT` asks for direct calls (`1`; unset or `0`: not).
pub fn direct_from_env() -> Result<bool> {
    match std::env::var(DIRECT_ENV) {
        Err(_) => Ok(false),
        Ok(text) => parse_switch(DIRECT_ENV, &text),
    }
}

fn parse_switch(var: &str, text: &str) -> Result<bool> {
    match text.trim() {
        "1" => Ok(true),
        "0" | "" => Ok(false),
        _ => Err(Error::invalid("ProcessGroup", format!("{var}={text:?} is neither 1 nor 0"))),
    }
}

/// The number of processes of the job when this process was started by an MPI launcher
/// (`mpirun`, `mpiexec`, `srun`): OpenMPI sets OMPI_COMM_WORLD_SIZE, MPICH and Slurm's PMI
/// set PMI_SIZE, PMIx launchers set PMIX_RANK (the size is then learned from MPI itself).
pub fn launcher_world_size() -> Option<usize> {
    for var in ["OMPI_COMM_WORLD_SIZE", "PMI_SIZE"] {
        if let Some(n) = std::env::var(var).ok().and_then(|v| v.trim().parse().ok()) {
            return Some(n);
        }
    }
    // Launched by a PMIx launcher that did not say the size: more than one is possible.
    std::env::var("PMIX_RANK").ok().map(|_| usize::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timeouts_parse_or_fail_clearly() {
        assert_eq!(parse_timeout("2.5").unwrap(), Duration::from_millis(2500));
        assert_eq!(parse_timeout(" 300 ").unwrap(), Duration::from_secs(300));
        for bad in ["", "0", "-1", "soon", "inf", "NaN"] {
            let err = parse_timeout(bad).unwrap_err().to_string();
            assert!(err.contains(TIMEOUT_ENV), "{bad}: {err}");
        }
    }

    #[test]
    fn switches_parse_or_fail_clearly() {
        assert!(parse_switch(DIRECT_ENV, " 1").unwrap());
        assert!(!parse_switch(DIRECT_ENV, "0").unwrap());
        assert!(!parse_switch(DIRECT_ENV, "").unwrap());
        let err = parse_switch(DIRECT_ENV, "yes").unwrap_err().to_string();
        assert!(err.contains(DIRECT_ENV) && err.contains("neither 1 nor 0"), "{err}");
    }
}
