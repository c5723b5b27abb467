"""The local backend reads what a run's process sent, also when it sent nothing."""

import multiprocessing

from experiments import sweep_backends


def _die_without_a_word(sender):
    del sender  # killed before it reports: the pipe ends with nothing in it


def _report(sender):
    sender.send({"status": "finished"})


def test_a_run_process_that_died_before_sending_reads_as_no_outcome():
    context = multiprocessing.get_context("fork")  # the children run no TensorFlow
    for target, expected in ((_die_without_a_word, None), (_report, {"status": "finished"})):
        receiver, sender = context.Pipe(duplex=False)
        process = context.Process(target=target, args=(sender,))
        process.start()
        sender.close()
        process.join()
        assert receiver.poll()  # readable: at its end, or with the report
        assert sweep_backends._outcome(receiver) == expected
