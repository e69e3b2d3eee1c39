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
