"""NGRPO advantages against a NumPy reference, and the config's guards."""

import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from toolgrpo.training.ngrpo import NGRPOConfig, ngrpo_advantages, zero_std_groups

# Reward levels the ground-truth reward actually produces, so equal rewards (zero std) are common.
LEVELS = [0.0, 0.1, 0.3, 0.45, 0.55, 0.8, 0.95, 1.0]


def reference_advantages(rewards, num_generations, max_reward, scope, eps=1e-4, deciding=None):
    """The three scopes written out group by group in NumPy (unbiased std, as TRL); `deciding`
    (default: the rewards) are the scores whose equality makes a group zero-std."""
    out = []
    rewards = np.asarray(rewards, dtype=np.float64).reshape(-1, num_generations)
    deciding = rewards if deciding is None else np.asarray(deciding).reshape(-1, num_generations)
    for group, decider in zip(rewards, deciding, strict=True):
        homogeneous = np.isclose(decider.std(ddof=1), 0.0)
        calibrate = scope == "all" or (scope == "zero_std" and homogeneous)
        stats = np.append(group, max_reward) if calibrate else group
        out.append((group - stats.mean()) / (stats.std(ddof=1) + eps))
    return np.concatenate(out)


@settings(max_examples=300, deadline=None)
@given(
    num_generations=st.integers(2, 8),
    data=st.data(),
    scope=st.sampled_from(["none", "zero_std", "all"]),
)
def test_advantages_match_numpy_reference_for_every_scope(num_generations, data, scope):
    num_groups = data.draw(st.integers(1, 6))
    groups = data.draw(
        st.lists(
            st.one_of(
                st.lists(
                    st.sampled_from(LEVELS), min_size=num_generations, max_size=num_generations
                ),
                st.sampled_from(LEVELS).map(lambda r: [r] * num_generations),  # all equal
            ),
            min_size=num_groups,
            max_size=num_groups,
        )
    )
    rewards = [r for group in groups for r in group]
    expected = reference_advantages(rewards, num_generations, 1.0, scope)
    actual = ngrpo_advantages(torch.tensor(rewards), num_generations, 1.0, scope).numpy()
    np.testing.assert_allclose(actual, expected, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("scope", ["zero_std", "all"])
@pytest.mark.parametrize("num_generations", [4, 8])
def test_homogeneous_group_below_max_gets_minus_one_over_root_g_plus_one(scope, num_generations):
    for reward in (0.0, 0.3, 0.95):
        rewards = [reward] * num_generations
        advantages = ngrpo_advantages(rewards, num_generations, 1.0, scope, eps=0.0)
        expected = -1 / math.sqrt(num_generations + 1)
        assert advantages.tolist() == pytest.approx([expected] * num_generations, rel=1e-5)


@pytest.mark.parametrize("scope", ["none", "zero_std", "all"])
def test_group_all_at_max_reward_stays_at_zero(scope):
    assert ngrpo_advantages([1.0] * 8, 8, 1.0, scope).tolist() == [0.0] * 8


def test_zero_std_scope_leaves_varied_groups_as_grpo_and_all_scope_does_not():
    rewards = [0.1, 0.6, 0.6, 1.0, 0.3, 0.3, 0.3, 0.3]
    grpo = ngrpo_advantages(rewards, 4, scope="none")
    zero_std = ngrpo_advantages(rewards, 4, scope="zero_std")
    calibrated_all = ngrpo_advantages(rewards, 4, scope="all")
    assert torch.equal(zero_std[:4], grpo[:4])
    assert grpo[4:].tolist() == [0.0] * 4
    assert zero_std[4:].tolist() == pytest.approx([-1 / math.sqrt(5)] * 4, abs=1e-3)
    assert not torch.allclose(calibrated_all[:4], grpo[:4])


def test_virtual_sample_follows_max_reward():
    # A lower max_reward: a homogeneous group above it is pushed up, not down.
    advantages = ngrpo_advantages([0.8] * 4, 4, max_reward=0.5, scope="zero_std")
    assert advantages.tolist() == pytest.approx([1 / math.sqrt(5)] * 4, abs=1e-3)


def test_unscorable_rewards_are_left_out_and_get_zero_advantage():
    rewards = torch.tensor([0.5, float("nan"), 0.5, 0.5])
    advantages = ngrpo_advantages(rewards, 4, scope="zero_std")
    expected = reference_advantages([0.5, 0.5, 0.5], 3, 1.0, "zero_std")
    assert advantages[1].item() == 0.0
    np.testing.assert_allclose(advantages[[0, 2, 3]].numpy(), expected, rtol=1e-4)


def test_zero_std_groups_flags_groups_of_equal_rewards():
    rewards = [0.3, 0.3, 1.0, 1.0, 0.1, 0.5]
    assert zero_std_groups(rewards, 2).tolist() == [True, True, False]


def test_rewards_not_divisible_into_groups_are_refused():
    with pytest.raises(ValueError, match="multiple of num_generations=4"):
        ngrpo_advantages([0.1] * 6, 4)


def test_unknown_scope_is_refused_by_function_and_config(tmp_path):
    with pytest.raises(ValueError, match="ngrpo scope must be one of"):
        ngrpo_advantages([0.1] * 4, 4, scope="everything")
    with pytest.raises(ValueError, match="ngrpo scope must be one of"):
        NGRPOConfig(output_dir=str(tmp_path), ngrpo_scope="everything", use_cpu=True, bf16=False)


def test_config_refuses_calibration_with_batch_scaling(tmp_path):
    with pytest.raises(ValueError, match="scale_rewards='group'"):
        NGRPOConfig(output_dir=str(tmp_path), scale_rewards="batch", use_cpu=True, bf16=False)
    config = NGRPOConfig(
        output_dir=str(tmp_path),
        scale_rewards="batch",
        ngrpo_scope="none",
        use_cpu=True,
        bf16=False,
    )
    assert config.scale_rewards == "batch"


def test_config_passes_asymmetric_clipping_to_trl(tmp_path):
    config = NGRPOConfig(
        output_dir=str(tmp_path), epsilon=0.16, epsilon_high=0.24, use_cpu=True, bf16=False
    )
    assert (config.epsilon, config.epsilon_high, config.ngrpo_scope) == (0.16, 0.24, "zero_std")


TOOL_LEVELS = [0.0, 0.1, 0.5]  # case study: right tool 0.5, valid but wrong 0.1, none 0


@settings(max_examples=200, deadline=None)
@given(num_generations=st.integers(2, 8), data=st.data())
def test_zero_std_on_the_tool_score_calibrates_groups_whose_tool_scores_are_equal(
    num_generations, data
):
    num_groups = data.draw(st.integers(1, 6))
    size = num_groups * num_generations
    tool = data.draw(
        st.one_of(
            st.lists(st.sampled_from(TOOL_LEVELS), min_size=size, max_size=size),
            st.sampled_from(TOOL_LEVELS).map(lambda r: [r] * size),
        )
    )
    rest = data.draw(st.lists(st.sampled_from([0.0, 0.2, 0.35, 0.5]), min_size=size, max_size=size))
    rewards = [t + r for t, r in zip(tool, rest, strict=True)]
    expected = reference_advantages(rewards, num_generations, 1.0, "zero_std", deciding=tool)
    mask = zero_std_groups(torch.tensor(tool), num_generations)
    actual = ngrpo_advantages(
        torch.tensor(rewards), num_generations, 1.0, "zero_std", zero_std=mask
    )
    np.testing.assert_allclose(actual.numpy(), expected, rtol=1e-4, atol=1e-5)


def test_a_group_of_one_right_tool_with_varied_reasoning_is_calibrated_on_the_tool_score():
    rewards = torch.tensor([0.8, 0.9, 0.7, 1.0])  # same tool, reasoning differs
    tool_scores = torch.tensor([0.5, 0.5, 0.5, 0.5])
    plain = ngrpo_advantages(rewards, 4, 1.0, "zero_std")
    on_tool = ngrpo_advantages(
        rewards, 4, 1.0, "zero_std", zero_std=zero_std_groups(tool_scores, 4)
    )
    assert torch.allclose(plain, ngrpo_advantages(rewards, 4, 1.0, "none"))  # not zero-std
    assert not torch.allclose(on_tool, plain)  # the virtual 1.0 moves the group's mean up
    assert bool((on_tool < plain).all())


def test_unknown_zero_std_definition_is_refused(tmp_path):
    with pytest.raises(ValueError, match="ngrpo_zero_std_on"):
        NGRPOConfig(output_dir=str(tmp_path), use_cpu=True, bf16=False, ngrpo_zero_std_on="x")
