"""Keras optimizers and learning-rate schedules exposed to gin.

`gin.tf` cannot be imported with recent TensorFlow (it reaches for tf.estimator), so the Keras
parts are registered here. In a gin file: `DQNAgent.optimizer = @Adam()`,
`Adam.learning_rate = 1e-3`, or `RMSprop.learning_rate = @ExponentialDecay()`.
"""

import gin
import keras

for _optimizer in (keras.optimizers.Adam, keras.optimizers.RMSprop, keras.optimizers.SGD):
    gin.external_configurable(_optimizer, module="optimizers")

gin.external_configurable(keras.optimizers.schedules.ExponentialDecay, module="optimizers")
