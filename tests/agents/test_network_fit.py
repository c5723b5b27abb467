"""A network that does not fit its agent's distribution and action space is refused when the
agent is built, in one paragraph naming the binding to change; every agent's own network fits.
SAC's target entropy follows the action space unless bound, and a bound one that differs is said.

Agents are built directly on small spaces (no environment, no training): the check reads the
model's symbolic output shapes.
"""

import functools

import gymnasium as gym
import numpy as np
import pytest
from absl import logging

from agents.a2c import A2CAgent
from agents.ddpg import DDPGAgent
from agents.dqn import DQNAgent
from agents.nstep_q import NStepQAgent
from agents.ppo import PPOAgent
from agents.reinforce import ReinforceAgent
from agents.sac import SACAgent
from framework.parts import networks
from framework.parts.value_distribution import CategoricalSupport

CARTPOLE = (gym.spaces.Box(-np.inf, np.inf, (4,), np.float32), gym.spaces.Discrete(2))
PENDULUM = (gym.spaces.Box(-np.inf, np.inf, (3,), np.float32), gym.spaces.Box(-2.0, 2.0, (1,)))
SIX_D = (gym.spaces.Box(-np.inf, np.inf, (17,), np.float32), gym.spaces.Box(-1.0, 1.0, (6,)))
SMALL = dict(hidden_units=(8,))
C51_MLP = functools.partial(networks.mlp, support=CategoricalSupport(11), **SMALL)


def _sac_actor_for_ddpg(shape, low, high):
    """SAC's actor where DDPG's belongs: a mean and a log std, not an action."""
    del high
    return networks.gaussian_actor_mlp(shape, len(low), **SMALL)


def _ddpg_actor_for_sac(shape, size):
    """DDPG's actor where SAC's belongs: an action in the bounds, no distribution."""
    return networks.actor_mlp(shape, -np.ones(size), np.ones(size), **SMALL)


# name -> (spaces, agent factory, what the one paragraph must say, in order)
MISFITS = {
    # ppo/pendulum.gin on CartPole: the Gaussian's mean would be read as logits.
    "ppo_gaussian_network_on_discrete_actions": (
        CARTPOLE,
        functools.partial(PPOAgent, network=networks.gaussian_actor_critic_mlp),
        [
            "PPOAgent.network builds gaussian_actor_critic_mlp, whose outputs are "
            "(([B, 2], [B, 2]), [B]);",
            "PPOAgent reads (logits [B, 2], V(s) [B]) from it for the action space Discrete(2):",
            "bind PPOAgent.network = @networks.actor_critic_mlp for a Discrete action space",
        ],
    ),
    # ppo/cartpole.gin on Pendulum: no log std to act with.
    "ppo_categorical_network_on_box_actions": (
        PENDULUM,
        functools.partial(PPOAgent, network=networks.actor_critic_mlp),
        [
            "PPOAgent.network builds actor_critic_mlp, whose outputs are ([B, 1], [B]);",
            "PPOAgent reads ((mean [B, 1], log_std [B, 1]), V(s) [B])",
            "bind PPOAgent.network = @networks.gaussian_actor_critic_mlp for a Box action space",
        ],
    ),
    "a2c_gaussian_network": (
        CARTPOLE,
        functools.partial(A2CAgent, network=networks.gaussian_actor_critic_mlp),
        ["A2CAgent.network builds gaussian_actor_critic_mlp", "@networks.actor_critic_mlp"],
    ),
    "a2c_q_network": (
        CARTPOLE,
        functools.partial(A2CAgent, network=functools.partial(networks.mlp, **SMALL)),
        ["A2CAgent.network builds mlp, whose outputs are [B, 2];", "(logits [B, 2], V(s) [B])"],
    ),
    "reinforce_actor_critic_network": (
        CARTPOLE,
        functools.partial(ReinforceAgent, network=networks.actor_critic_mlp),
        [
            "ReinforceAgent.network builds actor_critic_mlp, whose outputs are ([B, 2], [B]);",
            "ReinforceAgent reads logits [B, 2] from it",
            "bind ReinforceAgent.network = @networks.mlp for a Discrete action space",
        ],
    ),
    "dqn_actor_critic_network": (
        CARTPOLE,
        functools.partial(DQNAgent, network=networks.actor_critic_mlp),
        ["DQNAgent.network builds actor_critic_mlp", "Q-values [B, 2]", "@networks.mlp"],
    ),
    # A C51 head bound where plain Q-values are read: the network is the fix's own part, so
    # the message points at its bindings.
    "nstep_q_categorical_network": (
        CARTPOLE,
        functools.partial(NStepQAgent, network=C51_MLP),
        [
            "NStepQAgent.network builds mlp, whose outputs are [B, 2, 11];",
            "reads Q-values [B, 2]",
            "check the bindings of networks.mlp.",
        ],
    ),
    "ddpg_gaussian_actor": (
        PENDULUM,
        functools.partial(DDPGAgent, actor_network=_sac_actor_for_ddpg),
        [
            "DDPGAgent.actor_network builds gaussian_actor_mlp, whose outputs are "
            "([B, 1], [B, 1]);",
            "DDPGAgent reads action [B, 1]",
            "bind DDPGAgent.actor_network = @networks.actor_mlp for a Box action space",
        ],
    ),
    "ddpg_critic_without_the_action": (
        PENDULUM,
        functools.partial(DDPGAgent, critic_network=functools.partial(networks.mlp, **SMALL)),
        [
            "DDPGAgent.critic_network builds mlp, which does not take "
            "(observation [B, 3], action [B, 1]);",
            "DDPGAgent reads Q(s, a) [B]",
            "bind DDPGAgent.critic_network = @networks.critic_mlp",
        ],
    ),
    "sac_deterministic_actor": (
        PENDULUM,
        functools.partial(SACAgent, actor_network=_ddpg_actor_for_sac),
        [
            "SACAgent.actor_network builds actor_mlp, whose outputs are [B, 1];",
            "SACAgent reads (mean [B, 1], log_std [B, 1])",
            "bind SACAgent.actor_network = @networks.gaussian_actor_mlp",
        ],
    ),
    "sac_critic_without_the_action": (
        SIX_D,
        functools.partial(SACAgent, critic_network=functools.partial(networks.mlp, **SMALL)),
        [
            "SACAgent.critic_network builds mlp, which does not take "
            "(observation [B, 17], action [B, 6]);"
        ],
    ),
}

# name -> (spaces, agent factory): each agent's own networks, on each space it acts in.
FITS = {
    "reinforce_with_baseline": (CARTPOLE, functools.partial(ReinforceAgent, use_baseline=True)),
    "dqn": (CARTPOLE, DQNAgent),
    "dqn_c51_dueling": (
        CARTPOLE,
        functools.partial(DQNAgent, network=functools.partial(C51_MLP, dueling=True)),
    ),
    "nstep_q": (CARTPOLE, NStepQAgent),
    "a2c": (CARTPOLE, A2CAgent),
    "ppo_discrete": (CARTPOLE, PPOAgent),
    "ppo_box": (SIX_D, PPOAgent),
    "ddpg": (SIX_D, DDPGAgent),
    "td3": (SIX_D, functools.partial(DDPGAgent, num_critics=2)),
    "sac": (SIX_D, SACAgent),
}


@pytest.mark.parametrize("case", sorted(MISFITS))
def test_a_network_that_does_not_fit_is_one_paragraph_naming_the_binding(case):
    (observation_space, action_space), agent, culprits = MISFITS[case]
    with pytest.raises(ValueError) as raised:
        agent(observation_space, action_space, seed=0)
    # One line, and gin's note of the configurable it was raised in (the command line drops it).
    message, *gin_notes = str(raised.value).split("\n")
    assert all(note.strip().startswith("In call to configurable") for note in gin_notes), gin_notes
    position = 0
    for culprit in culprits:  # in this order
        found = message.find(culprit, position)
        assert found >= 0, f"{culprit!r} not after position {position} of: {message}"
        position = found + len(culprit)


@pytest.mark.parametrize("case", sorted(FITS))
def test_each_agents_own_network_fits(case):
    (observation_space, action_space), agent = FITS[case]
    agent(observation_space, action_space, seed=0)


def test_sac_aims_at_minus_the_action_dimension_and_says_where_a_bound_target_differs(
    monkeypatch,
):
    warnings = []
    monkeypatch.setattr(logging, "warning", lambda message, *args: warnings.append(message % args))
    assert SACAgent(*SIX_D, seed=0).target_entropy == -6.0
    assert SACAgent(*SIX_D, seed=0, target_entropy=-6).target_entropy == -6.0
    assert warnings == []
    assert SACAgent(*SIX_D, seed=0, target_entropy=-1.0).target_entropy == -1.0
    assert warnings == [
        "SACAgent.target_entropy = -1 differs from -dim(A) = -6, the default for this "
        "6-dimensional action space (SB3's 'auto'); unbind it to use the default."
    ]
