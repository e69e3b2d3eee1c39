use rnn_core::{DType, Device, Result, Tensor};
use rnn_testutil::*;

fn matmul_relu_backward(device: Device) -> Result<()> {
    let x = tensor(&[1., -2., 3., 4., 5., -6.], &[2, 3], DType::F32, device).requires_grad();
    let w = tensor(&[1., 0., 0., 1., 1., 1.], &[3, 2], DType::F32, device).requires_grad();
    let y = x.matmul(&w)?;
    assert_eq!(values(&y), vec![4., 1., -2., -1.]);
    let loss = y.relu()?.sum_all()?;
    let grads = loss.backward()?;
    // d loss / d x = relu'(y) @ w^T ; relu'(y) = [[1,1],[0,0]]
    assert_eq!(values(grads.get(&x).unwrap()), vec![1., 1., 2., 0., 0., 0.]);
    assert_eq!(values(grads.get(&w).unwrap()), vec![1., 1., -2., -2., 3., 3.]);
    let _ = Tensor::zeros(1, DType::F32, device)?;
    Ok(())
}
test_device!(matmul_relu_backward_test, matmul_relu_backward);

/// Dropping a graph a million ops deep takes it apart without recursion: it runs on a
/// thread with a 256 KiB stack, which a recursive drop (a few frames per op) would overflow
/// within a few thousand ops. A node still held elsewhere keeps its own history.
#[test]
fn dropping_a_deep_graph_does_not_overflow_the_stack() {
    let body = || -> Result<()> {
        let x = Tensor::from_vec(vec![1f32], 1, Device::Cpu)?.requires_grad();
        let mut y = x.clone();
        let mut kept = None;
        for i in 0..1_000_000 {
            y = y.add(&x)?;
            if i == 10 {
                kept = Some(y.clone());
            }
        }
        assert_eq!(values(&y), vec![1_000_001.]);
        drop(y);
        let kept = kept.expect("kept at step 10");
        let grads = kept.backward()?;
        assert_eq!(values(grads.get(&x).unwrap()), vec![12.], "the kept node's graph is intact");
        Ok(())
    };
    let worker = std::thread::Builder::new().stack_size(256 * 1024).spawn(body).expect("spawn");
    worker.join().expect("the drop overflowed the stack").expect("ops");
}
