"""Agents: each a composition of framework parts. Importing this registers them with gin."""

from agents import dqn, reinforce  # noqa: F401
