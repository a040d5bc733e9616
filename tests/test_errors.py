"""The errors: a stopped run's exit code by what stopped it, and errors that survive pickling (joblib, pools)."""

import copy
import pickle

from tsformer.errors import Interrupted, Terminated, stop_code


def test_a_stop_exits_with_its_signals_code():
    assert stop_code(KeyboardInterrupt()) == 130 and stop_code(Terminated()) == 143
    assert Interrupted("stopped", Terminated()).exit_code == 143
    assert Interrupted("stopped", KeyboardInterrupt()).exit_code == Interrupted("stopped").exit_code == 130


def test_an_interrupted_run_pickles_and_copies_with_its_message():
    stopped = Interrupted("training stopped during epoch 2", Terminated())
    for again in (pickle.loads(pickle.dumps(stopped)), copy.copy(stopped)):
        assert str(again) == "training stopped during epoch 2" and again.exit_code == 143  # its state kept
