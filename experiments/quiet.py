"""Imports TensorFlow without its start-up banners, keeps its chatter out of run logs, and puts
the framework's log in one short line format (`framework/console.py`, which workers in other
processes call too).

Every entry point (run, benchmark workers, parts, sweep and its trials, evaluate, export,
analyze) calls `import_tensorflow()` before anything else imports TensorFlow, so that a
researcher sees progress and errors only.
"""

from framework.console import import_tensorflow

__all__ = ["import_tensorflow"]
