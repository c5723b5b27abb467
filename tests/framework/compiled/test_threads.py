"""`tf_threads`: a config sizes TensorFlow's thread pools before the first op, and says clearly
where it cannot (this test process has run ops already, as a second run in one process has)."""

import pytest
import tensorflow as tf

from framework.compiled.threads import tf_threads


@pytest.mark.parametrize("bad", [-1, 1.5, "2", True])  # True is an int to Python, not a count
def test_a_thread_count_that_is_not_a_whole_number_is_refused_by_name(bad):
    with pytest.raises(ValueError, match=rf"tf_threads.inter_op = {bad!r}: give a whole number"):
        tf_threads(inter_op=bad)


def test_the_pools_of_a_process_that_ran_ops_keep_their_size_and_a_warning_says_so(caplog):
    tf.constant(1.0) + 1.0  # TensorFlow's pools exist from the first op on
    current = tf.config.threading.get_intra_op_parallelism_threads()
    tf_threads(intra_op=current)  # what they are already: nothing to change
    tf_threads()  # 0: TensorFlow's choice, whatever it is
    assert not caplog.records
    tf_threads(intra_op=current + 1)
    assert tf.config.threading.get_intra_op_parallelism_threads() == current
    [warning] = [record.getMessage() for record in caplog.records]
    assert warning.startswith(f"tf_threads.intra_op = {current + 1} is not applied: TensorFlow")
