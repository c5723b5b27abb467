"""A dense layer for a small batch on a wide input (the Nature CNN's 2304 or 3136 features into
512 units at DQN's batch of 32), whose input gradient takes TensorFlow's fast kernel.

The input gradient of `x @ W` is `g @ W^T`. At these shapes TensorFlow's CPU kernel for a
product with a transposed right operand runs at ~49 GFLOP/s here, against ~120 for the same
numbers computed as `(W @ g^T)^T` (1.51 against 0.65 ms at [32, 512] x [2304, 512]^T; bitwise
equal: docs/speed.md). At batch 256, or on a 256-wide MLP, the plain form is as fast or faster,
so only the Nature CNN's hidden layer uses this one.
"""

import keras
import tensorflow as tf


@tf.custom_gradient
def _product_with_fast_input_gradient(inputs: tf.Tensor, kernel: tf.Tensor):
    """`inputs [B, F] @ kernel [F, U]`."""

    def gradient(upstream: tf.Tensor):  # [B, U]
        input_gradient = tf.transpose(tf.matmul(kernel, upstream, transpose_b=True))  # [B, F]
        kernel_gradient = tf.matmul(inputs, upstream, transpose_a=True)  # [F, U]
        return input_gradient, kernel_gradient

    return tf.matmul(inputs, kernel), gradient


class WideInputDense(keras.layers.Dense):
    """`keras.layers.Dense` on [batch, features] inputs (the same weights, outputs and
    checkpoints) whose input gradient is `(W @ g^T)^T`."""

    def build(self, input_shape) -> None:
        if len(input_shape) != 2:
            raise ValueError(
                f"WideInputDense takes [batch, features] inputs; got shape {tuple(input_shape)}. "
                "Flatten them first, or use keras.layers.Dense."
            )
        super().build(input_shape)

    def call(self, inputs: tf.Tensor, training: bool | None = None) -> tf.Tensor:
        # A tensor, not the variable: a variable read inside a custom gradient would need its
        # own gradient (`variables=`). The read happens here, under Keras's autocast.
        kernel = tf.convert_to_tensor(self.kernel)
        outputs = _product_with_fast_input_gradient(inputs, kernel)
        if self.bias is not None:
            outputs = keras.ops.add(outputs, self.bias)
        if self.activation is not None:
            outputs = self.activation(outputs)
        return outputs
