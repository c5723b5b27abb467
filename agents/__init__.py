"""Agents: each a composition of framework parts. Importing this registers them with gin."""

from agents import a2c, ddpg, dqn, nstep_q, ppo, reinforce, sac  # noqa: F401
