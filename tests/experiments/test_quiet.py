"""The quiet TensorFlow import hides Keras's unused optional imports only while TF loads."""

import importlib
import json
import sys

import pytest

from experiments import quiet


def test_hidden_modules_fail_to_import_inside_the_block_and_import_normally_after():
    sys.modules.pop("wave", None)  # a standard module that nothing here imports
    with quiet._hidden_from_imports(("wave", "json")):
        with pytest.raises(ImportError):
            importlib.import_module("wave")
        assert importlib.import_module("json") is json  # already imported: left alone
    assert importlib.import_module("wave").open is not None
