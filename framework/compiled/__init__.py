"""The crossing into TensorFlow: traced calls, the direct call and its fallback, packed
batches and outputs, k steps per call with roll-back, and the XLA program cache."""
