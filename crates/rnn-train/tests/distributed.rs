//! Data-parallel training over a thread group (`ProcessGroup::threads`, no MPI needed): N
//! ranks with batch b take the same steps as one rank with batch N·b (f64 to rounding, f32
//! within reduction-order error), every rank ends with the same weights, and ranks that
//! disagree on the model or the settings fail at the start on every rank.
//! (The same checks across processes under `mpirun`: `tests/mpi.rs`, feature `mpi`.)

use rnn_core::{DType, Device, GradStore, Result, Tensor};
use rnn_nn::optim::OptimizerConfig;
use rnn_nn::{Linear, Module, VarBuilder};
use rnn_testutil::test_device;
use rnn_train::data::{synthetic_digits, Batches};
use rnn_train::distributed::{DataParallel, GradBuckets, ProcessGroup};
use rnn_train::{ActivationFunction, History, LayerBuilder, LossFunction, Network, TrainingConfig};

const STEPS: usize = 20;

/// Runs `body(rank group)` on one thread per rank of a thread group of `n`, in rank order.
fn on_ranks<T: Send>(n: usize, body: impl Fn(ProcessGroup) -> Result<T> + Sync) -> Vec<Result<T>> {
    let groups = ProcessGroup::threads(n).expect("a thread group");
    std::thread::scope(|s| {
        let handles: Vec<_> = groups.into_iter().map(|g| s.spawn(|| body(g))).collect();
        handles.into_iter().map(|h| h.join().expect("a rank panicked")).collect()
    })
}

/// A two-layer f64 regression model, the same on every rank (same seed).
fn f64_model() -> Result<(Linear, Linear)> {
    let mut vb = VarBuilder::new(Device::Cpu, DType::F64, 7);
    Ok((Linear::new(6, 5, &mut vb)?, Linear::new(5, 3, &mut vb)?))
}

fn f64_params(m: &(Linear, Linear)) -> Vec<Tensor> {
    m.0.named_parameters().into_iter().chain(m.1.named_parameters()).map(|(_, t)| t).collect()
}

/// `STEPS` Adam steps on rows `[k·N·b + rank·b, .. + b)` of fixed data at step k, the
/// gradients averaged through buckets filled by the backward hook (tiny buckets, so that
/// several are in flight). Returns the final parameters.
fn f64_steps(group: ProcessGroup, batch: usize) -> Result<Vec<Vec<f64>>> {
    let (rank, world) = (group.rank(), group.world_size());
    let model = f64_model()?;
    let params = f64_params(&model);
    let buckets = GradBuckets::new(group, params.clone(), 64)?;
    assert!(buckets.num_buckets() >= 3, "{} buckets", buckets.num_buckets());
    let mut optimizer = OptimizerConfig::adam(1e-2).build(params.clone())?;
    let rows = STEPS * world * batch;
    let x = rnn_testutil::rand64(11, &[rows, 6])?;
    let y = rnn_testutil::rand64(12, &[rows, 3])?;
    for k in 0..STEPS {
        let start = (k * world + rank) * batch;
        let (xb, yb) = (x.narrow(0, start, batch)?, y.narrow(0, start, batch)?);
        let loss = rnn_nn::mse(&model.1.forward(&model.0.forward(&xb)?.tanh()?)?, &yb)?;
        let mut reduction = buckets.start(&[]);
        let mut local = GradStore::new();
        loss.backward_with_hook(&mut local, &mut |p, g| reduction.ready(p, g))?;
        let (grads, _) = reduction.finish()?;
        assert_eq!(grads.len(), params.len());
        optimizer.step(&grads)?;
    }
    params.iter().map(|p| p.flatten_all()?.to_vec::<f64>()).collect()
}

type StepGrads = (Option<Vec<f64>>, Option<Vec<f64>>);

/// Two steps through the same buckets of parameters `a` (2 values) and `b` (1 value); rank r
/// weighs its loss by r + 1, and rank 1 does not use `b` in the second step.
fn steps_with_an_unused_parameter(g: ProcessGroup) -> Result<Vec<StepGrads>> {
    let rank = g.rank();
    let a = Tensor::from_vec(vec![1.0f64, 2.0], 2, Device::Cpu)?.requires_grad();
    let b = Tensor::from_vec(vec![3.0f64], 1, Device::Cpu)?.requires_grad();
    let buckets = GradBuckets::new(g, vec![a.clone(), b.clone()], 1 << 20)?;
    let weight = (rank + 1) as f64;
    let read = |t: Option<&Tensor>| t.map(|t| t.to_vec::<f64>()).transpose();
    let mut seen = Vec::new();
    for step in 0..2 {
        let mut loss = a.sum_all()?.mul_scalar(weight)?;
        if step == 0 || rank == 0 {
            loss = loss.add(&b.sum_all()?.mul_scalar(10.0 * weight)?)?;
        }
        let mut reduction = buckets.start(&[]);
        let mut local = GradStore::new();
        loss.backward_with_hook(&mut local, &mut |p, g| reduction.ready(p, g))?;
        let (grads, _) = reduction.finish()?;
        seen.push((read(grads.get(&a))?, read(grads.get(&b))?));
    }
    Ok(seen)
}

/// The averaged gradients of one bucket are views of one buffer, with nothing copied back
/// after the all_reduce. The next step reuses that buffer only once no gradient of the step
/// before is held: gradients a caller keeps are never overwritten.
#[test]
fn averaged_gradients_view_the_bucket_and_kept_ones_stay_intact() -> Result<()> {
    let ones = |n: usize| Tensor::from_vec(vec![1.0f32; n], n, Device::Cpu).map(|t| t.requires_grad());
    let (a, b) = (ones(1000)?, ones(24)?);
    let buckets = GradBuckets::new(ProcessGroup::single(), vec![a.clone(), b.clone()], 1 << 20)?;
    let step = |w: f64| -> Result<GradStore> {
        let loss = a.sum_all()?.mul_scalar(w)?.add(&b.sum_all()?.mul_scalar(2.0 * w)?)?;
        let mut reduction = buckets.start(&[]);
        loss.backward_with_hook(&mut GradStore::new(), &mut |p, g| reduction.ready(p, g))?;
        Ok(reduction.finish()?.0)
    };
    let read = |g: &GradStore, p: &Tensor| g.get(p).expect("a gradient").to_vec::<f32>();
    let first = step(1.0)?;
    let (ga, gb) = (first.get(&a).expect("a gradient"), first.get(&b).expect("a gradient"));
    assert!(ga.same_storage(gb), "one bucket, one buffer");
    let second = step(3.0)?;
    assert!(!second.get(&a).expect("a gradient").same_storage(ga));
    assert_eq!((read(&first, &a)?, read(&first, &b)?), (vec![1.0; 1000], vec![2.0; 24]));
    assert_eq!((read(&second, &a)?, read(&second, &b)?), (vec![3.0; 1000], vec![6.0; 24]));
    drop((first, second));
    let third = step(5.0)?;
    assert_eq!((read(&third, &a)?, read(&third, &b)?), (vec![5.0; 1000], vec![10.0; 24]));
    Ok(())
}

/// A parameter a rank did not use counts as zeros in the mean, also when the bucket's
/// buffer, kept from the step before, still holds that rank's earlier gradient.
#[test]
fn an_unused_parameter_counts_as_zeros_in_a_reused_bucket() -> Result<()> {
    let ranks: Vec<_> = on_ranks(2, steps_with_an_unused_parameter).into_iter().collect::<Result<_>>()?;
    let mean_a = Some(vec![1.5, 1.5]);
    assert_eq!(ranks[0], vec![(mean_a.clone(), Some(vec![15.0])), (mean_a.clone(), Some(vec![5.0]))]);
    assert_eq!(ranks[1], vec![(mean_a.clone(), Some(vec![15.0])), (mean_a, None)]);
    Ok(())
}

#[test]
fn f64_ranks_with_batch_b_step_as_one_rank_with_batch_nb() -> Result<()> {
    let b = 3;
    for n in [2, 4] {
        let single = on_ranks(1, |g| f64_steps(g, n * b)).pop().expect("one rank")?;
        let ranks: Vec<_> = on_ranks(n, |g| f64_steps(g, b)).into_iter().collect::<Result<_>>()?;
        for (rank, params) in ranks.iter().enumerate() {
            assert_eq!(params, &ranks[0], "rank {rank} ends with other weights than rank 0");
        }
        let err = max_rel_diff(&ranks[0].concat(), &single.concat());
        assert!(err < 1e-12, "{n} ranks vs one: max relative difference {err:e}");
    }
    Ok(())
}

fn max_rel_diff(a: &[f64], b: &[f64]) -> f64 {
    assert_eq!(a.len(), b.len());
    a.iter().zip(b).map(|(x, y)| (x - y).abs() / (1.0 + y.abs())).fold(0.0, f64::max)
}

fn classifier(hidden: usize) -> Result<Network> {
    Network::with_input_size(784)?
        .add_layer(LayerBuilder::dense(hidden).activation(ActivationFunction::ReLU))
        .add_layer(LayerBuilder::dense(10).activation(ActivationFunction::Softmax))
        .loss(LossFunction::CategoricalCrossEntropy)
        .build()
}

fn config(batch: usize, epochs: usize) -> TrainingConfig {
    TrainingConfig {
        batch_size: batch,
        max_epochs: epochs,
        optimizer: OptimizerConfig::sgd_momentum(0.05, 0.9),
        learning_rate: 0.05,
        verbose: false,
        use_gpu: false,
        ..Default::default()
    }
}

/// `Network::train` on one rank of `group` (or alone without one): the weights and history.
fn train_network(
    group: Option<ProcessGroup>,
    samples: usize,
    batch: usize,
    epochs: usize,
) -> Result<(Vec<f32>, History)> {
    train_network_on(Device::Cpu, group, samples, batch, epochs)
}

fn train_network_on(
    device: Device,
    group: Option<ProcessGroup>,
    samples: usize,
    batch: usize,
    epochs: usize,
) -> Result<(Vec<f32>, History)> {
    let data = synthetic_digits(samples, 5)?;
    let mut net = classifier(24)?;
    let config = TrainingConfig {
        distributed: group.map(|g| DataParallel::new(g).with_bucket_bytes(4096)),
        device: Some(device),
        ..config(batch, epochs)
    };
    let history = net.train(&data.inputs, &data.labels, &config)?;
    let weights = net.state().iter().map(|(_, t)| t.flatten_all()?.to_vec::<f32>()).collect::<Result<Vec<_>>>()?;
    Ok((weights.concat(), history))
}

/// The data-parallel path with the model on each device: a one-process group trains to the
/// weights of training without a group (the gradient buckets are staged through host memory,
/// GPU gradients included).
fn one_rank_group_trains_as_no_group(device: Device) -> Result<()> {
    let (samples, batch, epochs) = (STEPS / 2 * 8, 8, 2);
    let (alone, _) = train_network_on(device, None, samples, batch, epochs)?;
    let (grouped, history) = train_network_on(device, Some(ProcessGroup::single()), samples, batch, epochs)?;
    let (a, b): (Vec<f64>, Vec<f64>) = grouped.iter().zip(&alone).map(|(x, y)| (*x as f64, *y as f64)).unzip();
    let err = max_rel_diff(&a, &b);
    assert!(err < 1e-6, "{device}: one rank vs no group: max relative difference {err:e}");
    assert_eq!(history.comm_wait_seconds.len(), epochs, "{history:?}");
    Ok(())
}
test_device!(one_rank_group_trains_as_no_group_test, one_rank_group_trains_as_no_group);

#[test]
fn f32_network_on_ranks_trains_as_one_rank_with_the_whole_batch() -> Result<()> {
    let (b, epochs) = (4, 2);
    for n in [2, 4] {
        // 20 steps: 10 per epoch, N·b samples each.
        let samples = STEPS / epochs * n * b;
        let (single, single_history) = train_network(None, samples, n * b, epochs)?;
        let ranks: Vec<_> =
            on_ranks(n, |g| train_network(Some(g), samples, b, epochs)).into_iter().collect::<Result<_>>()?;
        assert!(single_history.comm_wait_seconds.is_empty(), "a single process waits for no one");
        for (rank, (weights, history)) in ranks.iter().enumerate() {
            assert_eq!(weights, &ranks[0].0, "rank {rank} ends with other weights than rank 0");
            let waits = history.comm_wait_seconds.iter().zip(&history.epoch_times);
            assert_eq!(waits.len(), epochs, "one communication wait per epoch");
            assert!(waits.into_iter().all(|(w, t)| *w > 0.0 && w < t), "{history:?}");
            assert_eq!(history.train_loss, ranks[0].1.train_loss, "rank {rank} has another history");
        }
        let (a, b64): (Vec<f64>, Vec<f64>) =
            ranks[0].0.iter().zip(&single).map(|(x, y)| (*x as f64, *y as f64)).unzip();
        let err = max_rel_diff(&a, &b64);
        assert!(err < 1e-4, "{n} ranks vs one: max relative difference {err:e}");
        let losses = ranks[0].1.train_loss.iter().zip(&single_history.train_loss);
        assert!(losses.into_iter().all(|(x, y)| (x - y).abs() < 1e-4 * (1.0 + y.abs())), "{:?}", ranks[0].1);
        let initial = classifier(24)?
            .state()
            .iter()
            .map(|(_, t)| t.flatten_all()?.to_vec::<f32>())
            .collect::<Result<Vec<_>>>()?;
        assert_ne!(single, initial.concat(), "training moved the weights");
    }
    Ok(())
}

#[test]
fn uneven_data_and_validation_train_to_identical_ranks() -> Result<()> {
    // 3 ranks, 61 samples (a tenth held out): the sampler pads by wrapping, the last batches
    // are short, the validation slices are uneven.
    let results = on_ranks(3, |g| {
        let data = synthetic_digits(61, 3)?;
        let mut net = classifier(8)?;
        let config = TrainingConfig { validation_split: 0.1, distributed: Some(DataParallel::new(g)), ..config(5, 2) };
        let history = net.train(&data.inputs, &data.labels, &config)?;
        let weights = net.state().iter().map(|(_, t)| t.flatten_all()?.to_vec::<f32>()).collect::<Result<Vec<_>>>()?;
        Ok((weights, history))
    });
    let results: Vec<_> = results.into_iter().collect::<Result<_>>()?;
    for (weights, history) in &results {
        assert_eq!(weights, &results[0].0);
        assert_eq!(history.val_loss, results[0].1.val_loss);
        assert_eq!(history.val_loss.len(), 2);
        assert!(history.val_metrics["accuracy"].iter().all(|a| (0.0..=1.0).contains(a)));
    }
    Ok(())
}

#[test]
fn ranks_that_disagree_fail_at_the_start_on_every_rank() {
    let data = synthetic_digits(32, 1).unwrap();
    // Rank 1 builds a wider hidden layer.
    let errors = on_ranks(2, |g| {
        let mut net = classifier(8 + 4 * g.rank())?;
        let config = TrainingConfig { distributed: Some(DataParallel::new(g)), ..config(4, 1) };
        net.train(&data.inputs, &data.labels, &config)
    });
    for e in errors {
        let msg = e.expect_err("different models must not train").to_string();
        assert!(msg.contains("model") && msg.contains("rank 1") && msg.contains("values"), "{msg}");
    }
    // Rank 1 asks for another batch size.
    let errors = on_ranks(2, |g| {
        let mut net = classifier(8)?;
        let config = TrainingConfig { distributed: Some(DataParallel::new(g.clone())), ..config(4 + g.rank(), 1) };
        net.train(&data.inputs, &data.labels, &config)
    });
    for e in errors {
        let msg = e.expect_err("different batch sizes must not train").to_string();
        assert!(msg.contains("batch_size 5") && msg.contains("rank 0 has 4"), "{msg}");
    }
}

#[test]
fn sharded_batches_split_each_global_batch() -> Result<()> {
    let (n, b, world) = (24, 3, 4);
    let global: Vec<Vec<u32>> = Batches::epoch(n, world * b, true, 9, 2)?.collect();
    let shards: Vec<Vec<Vec<u32>>> =
        (0..world).map(|r| Batches::sharded(n, b, true, 9, 2, r, world).map(|s| s.collect())).collect::<Result<_>>()?;
    for (k, batch) in global.iter().enumerate() {
        let mut union: Vec<u32> = shards.iter().flat_map(|s| s[k].clone()).collect();
        let mut expected = batch.clone();
        union.sort();
        expected.sort();
        assert_eq!(union, expected, "step {k}");
    }
    // 10 samples on 4 ranks: padded to 12 by wrapping, 3 each, every sample at least once.
    let padded: Vec<Vec<u32>> = (0..4)
        .map(|r| Batches::sharded(10, 2, true, 1, 0, r, 4).map(|s| s.flatten().collect()))
        .collect::<Result<_>>()?;
    assert!(padded.iter().all(|s| s.len() == 3));
    let mut all: Vec<u32> = padded.concat();
    all.sort();
    all.dedup();
    assert_eq!(all, (0..10).collect::<Vec<u32>>());
    assert!(Batches::sharded(10, 2, true, 1, 0, 4, 4).is_err(), "rank out of range");
    assert!(Batches::sharded(0, 2, true, 1, 0, 0, 4).is_err(), "no samples");
    Ok(())
}

/// The same equivalences across processes: each test starts `mpirun` on this test binary,
/// which runs a `child_*` test (ignored in a plain run) as every rank; the ranks write their
/// final weights to files that the parent compares. OpenMPI over localhost, oversubscribed.
#[cfg(feature = "mpi")]
mod mpi {
    use super::*;
    use std::path::{Path, PathBuf};
    use std::process::{Command, Output};

    const F64_BATCH: usize = 3;
    const F32_BATCH: usize = 4;
    const F32_EPOCHS: usize = 2;
    const DIR_VAR: &str = "RNN_TEST_MPI_DIR";

    fn mpirun(np: usize, child: &str, dir: &Path) {
        let exe = std::env::current_exe().expect("test binary path");
        let mut cmd = Command::new("mpirun");
        cmd.args(["-np", &np.to_string(), "--oversubscribe", "-x", &format!("{DIR_VAR}={}", dir.display())]);
        // A rank that stalls makes the others' collectives fail after a minute, not five.
        cmd.args(["-x", "RNN_DIST_TIMEOUT=60"]);
        cmd.arg(exe).args(["--ignored", "--exact", "--nocapture", "--test-threads=1", &format!("mpi::{child}")]);
        cmd.env("OMPI_ALLOW_RUN_AS_ROOT", "1").env("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1");
        let output: Output = cmd.output().expect("mpirun could not start: install OpenMPI (openmpi-bin)");
        let log = format!("{}{}", String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr));
        // Every rank writes its results to files, which the caller reads: the ranks' output
        // lines interleave, so they are only shown.
        assert!(output.status.success(), "{np} ranks of {child}:\n{log}");
    }

    fn file(dir: &Path, what: &str, np: usize, rank: usize) -> PathBuf {
        dir.join(format!("{what}-{np}-{rank}.txt"))
    }

    fn write<T: std::fmt::Debug>(path: PathBuf, values: &[T]) {
        let text: Vec<String> = values.iter().map(|v| format!("{v:?}")).collect();
        std::fs::write(path, text.join(" ")).expect("write the rank's weights");
    }

    fn read<T: std::str::FromStr>(path: PathBuf) -> Vec<T> {
        let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        text.split(' ').map(|v| v.parse().ok().expect("a number")).collect()
    }

    /// The child's group, or `None` outside mpirun (a plain `--ignored` run).
    fn child_group() -> Option<(ProcessGroup, PathBuf)> {
        rnn_dist::launch::launcher_world_size()?;
        let dir = PathBuf::from(std::env::var(DIR_VAR).ok()?);
        Some((ProcessGroup::from_env().expect("the MPI group"), dir))
    }

    fn f32_samples(np: usize) -> usize {
        STEPS / F32_EPOCHS * np * F32_BATCH
    }

    #[test]
    fn mpi_ranks_step_as_one_rank_with_the_whole_batch() -> Result<()> {
        let dir = std::env::temp_dir().join(format!("rnn-mpi-training-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("a temporary folder");
        for np in [2, 4] {
            mpirun(np, "child_train", &dir);
            let single = on_ranks(1, |g| f64_steps(g, np * F64_BATCH)).pop().expect("one rank")?.concat();
            let (single32, _) = train_network(None, f32_samples(np), np * F32_BATCH, F32_EPOCHS)?;
            let rank0: Vec<f64> = read(file(&dir, "f64", np, 0));
            let rank0_32: Vec<f32> = read(file(&dir, "f32", np, 0));
            for rank in 1..np {
                assert_eq!(read::<f64>(file(&dir, "f64", np, rank)), rank0, "f64 rank {rank} of {np}");
                assert_eq!(read::<f32>(file(&dir, "f32", np, rank)), rank0_32, "f32 rank {rank} of {np}");
            }
            let err = max_rel_diff(&rank0, &single);
            assert!(err < 1e-12, "f64, {np} processes vs one: {err:e}");
            let (a, b): (Vec<f64>, Vec<f64>) =
                rank0_32.iter().zip(&single32).map(|(x, y)| (*x as f64, *y as f64)).unzip();
            let err = max_rel_diff(&a, &b);
            assert!(err < 1e-4, "f32, {np} processes vs one: {err:e}");
        }
        mpirun(2, "child_mismatch", &dir);
        for rank in 0..2 {
            let path = file(&dir, "mismatch", 2, rank);
            let msg = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            assert!(msg.contains("disagree on the model") && msg.contains("rank 1"), "rank {rank}: {msg}");
        }
        std::fs::remove_dir_all(&dir).ok();
        Ok(())
    }

    #[test]
    #[ignore = "a rank of mpi_ranks_step_as_one_rank_with_the_whole_batch"]
    fn child_train() -> Result<()> {
        let Some((g, dir)) = child_group() else { return Ok(()) };
        let (np, rank) = (g.world_size(), g.rank());
        assert_eq!(g.backend(), rnn_dist::Backend::Mpi);
        write(file(&dir, "f64", np, rank), &f64_steps(g.clone(), F64_BATCH)?.concat());
        let (weights, _) = train_network(Some(g), f32_samples(np), F32_BATCH, F32_EPOCHS)?;
        write(file(&dir, "f32", np, rank), &weights);
        Ok(())
    }

    #[test]
    #[ignore = "a rank of mpi_ranks_step_as_one_rank_with_the_whole_batch"]
    fn child_mismatch() -> Result<()> {
        let Some((g, dir)) = child_group() else { return Ok(()) };
        let path = file(&dir, "mismatch", g.world_size(), g.rank());
        let data = synthetic_digits(32, 1)?;
        let mut net = classifier(8 + 4 * g.rank())?;
        let config = TrainingConfig { distributed: Some(DataParallel::new(g)), ..config(4, 1) };
        let err = net.train(&data.inputs, &data.labels, &config).expect_err("different models must not train");
        std::fs::write(path, err.to_string()).expect("write the rank's error");
        Ok(())
    }
}
