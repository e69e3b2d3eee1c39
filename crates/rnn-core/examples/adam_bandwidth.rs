//! The CPU's fused Adam step against the memory bandwidth of a copy (see
//! `rnn_core::fused_update::bench`): `cargo run --release -p rnn-core --example adam_bandwidth
//! [params] [runs]` (default 10M parameters, 20 runs).

fn main() -> rnn_core::Result<()> {
    let mut args = std::env::args().skip(1).map(|a| a.parse::<usize>());
    let params = args.next().transpose().ok().flatten().unwrap_or(10_000_000);
    let runs = args.next().transpose().ok().flatten().unwrap_or(20);
    let b = rnn_core::fused_update::bench::cpu_adam_bandwidth(params, runs)?;
    println!(
        "Adam step, {} f32 params, {} threads: {:.2} ms ({:.1} GB/s); copy of the same bytes: {:.2} ms ({:.1} GB/s); ratio {:.2}",
        b.params,
        rayon::current_num_threads(),
        b.adam_s * 1e3,
        b.adam_gbps(),
        b.copy_s * 1e3,
        b.copy_gbps(),
        b.ratio()
    );
    Ok(())
}
