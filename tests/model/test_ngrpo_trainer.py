"""Real GRPO steps with NGRPOTrainer on a tiny random Qwen2: the loss sees NGRPO advantages.

Run as a script (under torchrun) it is the two-process check of the last test.
"""

import json
import logging
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from datasets import Dataset

from toolgrpo.training.chat import chat_prompt
from toolgrpo.training.device import end_process_group
from toolgrpo.training.model import build_tiny
from toolgrpo.training.ngrpo import NGRPOConfig, NGRPOTrainer, ngrpo_advantages, zero_std_groups
from toolgrpo.training.rewards import ground_truth_reward, tool_reward

pytestmark = pytest.mark.slow

NUM_GENERATIONS = 4
PROMPTS = {
    # pattern → the request; `scripted_reward` pays each pattern a known shape of group.
    "below_max": "What is the balance of ACC001?",
    "at_max": "Transfer 500 from ACC001 to ACC002.",
    "varied": "Buy 10 shares of AAPL.",
}


def scripted_reward(completions, pattern, **kwargs):
    """Homogeneous below the max, homogeneous at the max, or spread across the group."""
    by_pattern = {"below_max": lambda _: 0.3, "at_max": lambda _: 1.0, "varied": lambda i: i / 4}
    # TRL lays each prompt's completions out consecutively: i % G is the position in its group.
    return [by_pattern[p](i % NUM_GENERATIONS) for i, p in enumerate(pattern)]


class RecordingNGRPOTrainer(NGRPOTrainer):
    """Records the rewards TRL gathers and the advantages each loss computation receives."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.step_rewards: list[torch.Tensor] = []
        self.step_rewards_per_func: list[torch.Tensor] = []
        self.loss_advantages: list[torch.Tensor] = []

    def _calculate_rewards(self, *args, **kwargs):
        rewards_per_func = super()._calculate_rewards(*args, **kwargs)
        self.step_rewards.append(rewards_per_func.sum(dim=1).clone())
        self.step_rewards_per_func.append(rewards_per_func.clone())
        return rewards_per_func

    def _compute_loss(self, model, inputs):
        self.loss_advantages.append(inputs["advantages"].detach().clone())
        return super()._compute_loss(model, inputs)


def build_tiny_model():
    solution = {
        "thought": "先查余额",
        "action": {"tool": "check_balance", "params": {}},
        "plan": [],
    }
    texts = [*PROMPTS.values(), json.dumps(solution, ensure_ascii=False)] * 20
    return build_tiny(texts, hidden_size=64, num_layers=2, num_heads=2, vocab_size=400)


@pytest.fixture(scope="module")
def tiny_model():
    return build_tiny_model()


def train_ngrpo(
    tiny_model, scope, output_dir, per_device_batch_size=12, reward_funcs=None, **overrides
):
    """NGRPO steps (two unless overridden) of G=4 on the three prompts, 12 completions a step;
    resumes from a checkpoint in `output_dir` if there is one."""
    tokenizer, model = tiny_model
    solution = json.dumps({"action": {"tool": "check_balance", "params": {"account": "ACC001"}}})
    dataset = Dataset.from_list(
        [
            {"prompt": chat_prompt(tokenizer, prompt), "solution": solution, "pattern": pattern}
            for pattern, prompt in PROMPTS.items()
        ]
    )
    settings = dict(
        output_dir=str(output_dir),
        ngrpo_scope=scope,
        num_generations=NUM_GENERATIONS,
        per_device_train_batch_size=per_device_batch_size,
        max_completion_length=12,
        max_steps=2,
        learning_rate=1e-4,
        epsilon=0.16,
        epsilon_high=0.24,
        logging_steps=1,
        save_strategy="no",
        report_to="none",
        use_cpu=True,
        bf16=False,
        seed=0,
    )
    trainer = RecordingNGRPOTrainer(
        model=model,
        reward_funcs=reward_funcs or [ground_truth_reward, scripted_reward],
        args=NGRPOConfig(**(settings | overrides)),
        train_dataset=dataset,
        processing_class=tokenizer,
    )
    torch.set_num_threads(min(2, torch.get_num_threads()))
    trainer.train(resume_from_checkpoint=bool(list(Path(output_dir).glob("checkpoint-*"))))
    return trainer


def test_zero_std_on_the_tool_score_decides_which_groups_the_loss_sees_calibrated(
    tiny_model, tmp_path
):
    trainer = train_ngrpo(
        tiny_model,
        "zero_std",
        tmp_path,
        reward_funcs=[tool_reward, scripted_reward],
        ngrpo_zero_std_on="tool",
    )
    for per_func, received in zip(
        trainer.step_rewards_per_func, trainer.loss_advantages, strict=True
    ):
        on_tool = zero_std_groups(per_func[:, 0], NUM_GENERATIONS)
        expected = ngrpo_advantages(
            per_func.sum(dim=1), NUM_GENERATIONS, 1.0, "zero_std", zero_std=on_tool
        )
        torch.testing.assert_close(received.sort().values, expected.sort().values)
    logged = [e for e in trainer.state.log_history if "ngrpo/zero_std_tool_groups" in e]
    tool_counts = [
        int(zero_std_groups(p[:, 0], NUM_GENERATIONS).sum()) for p in trainer.step_rewards_per_func
    ]
    assert [e["ngrpo/zero_std_tool_groups"] for e in logged] == tool_counts


@pytest.mark.parametrize("scope", ["zero_std", "all"])
def test_loss_receives_ngrpo_advantages_of_the_steps_rewards(tiny_model, scope, tmp_path, caplog):
    with caplog.at_level(logging.INFO, logger="toolgrpo.training.ngrpo"):
        trainer = train_ngrpo(tiny_model, scope, tmp_path)

    assert trainer.args.epsilon_high == 0.24 and trainer.epsilon_low == 0.16
    assert len(trainer.step_rewards) == len(trainer.loss_advantages) == 2
    for rewards, received in zip(trainer.step_rewards, trainer.loss_advantages, strict=True):
        calibrated = ngrpo_advantages(rewards, NUM_GENERATIONS, 1.0, scope)
        grpo = ngrpo_advantages(rewards, NUM_GENERATIONS, scope="none")
        # TRL shuffles the batch before the loss: compare the multisets of advantages.
        torch.testing.assert_close(received.sort().values, calibrated.sort().values)
        assert not torch.allclose(received.sort().values, grpo.sort().values)
    # The homogeneous group below the max reaches the loss at −1/√(G+1), not GRPO's 0.
    below_max = trainer.loss_advantages[0].isclose(
        torch.tensor(-1 / math.sqrt(NUM_GENERATIONS + 1)), atol=1e-3
    )
    assert int(below_max.sum()) >= NUM_GENERATIONS

    zero_std = [int(zero_std_groups(r, NUM_GENERATIONS).sum()) for r in trainer.step_rewards]
    logged = [entry for entry in trainer.state.log_history if "ngrpo/zero_std_groups" in entry]
    assert [entry["ngrpo/zero_std_groups"] for entry in logged] == zero_std
    assert [entry["ngrpo/total_groups"] for entry in logged] == [3.0, 3.0]
    assert logged[-1]["ngrpo/zero_std_groups_cumulative"] == sum(zero_std)
    assert logged[-1]["ngrpo/total_groups_cumulative"] == 6.0
    for entry in logged:
        assert {"thought_action_consistent", "rewards/ground_truth_reward/mean"} <= entry.keys()
        # zero_std changes only the group below the max; all also changes the varied group.
        expected_changed = 1.0 if scope == "zero_std" else 2.0
        assert entry["ngrpo/calibrated_groups"] == expected_changed
    total = sum(zero_std)
    assert f"Zero std: {total}/6 ({100 * total / 6:.1f}%)" in caplog.text


def test_scope_none_leaves_trls_advantages_and_still_counts_zero_std_groups(tiny_model, tmp_path):
    trainer = train_ngrpo(tiny_model, "none", tmp_path)
    for rewards, received in zip(trainer.step_rewards, trainer.loss_advantages, strict=True):
        grpo = ngrpo_advantages(rewards, NUM_GENERATIONS, scope="none")
        # TRL works in float32: its zero-std groups may carry ~3e-4 of rounding.
        torch.testing.assert_close(received.sort().values, grpo.sort().values, atol=1e-3, rtol=0)
    logged = [entry for entry in trainer.state.log_history if "ngrpo/zero_std_groups" in entry]
    assert [entry["ngrpo/calibrated_groups"] for entry in logged] == [0.0, 0.0]
    assert all(entry["ngrpo/zero_std_groups"] >= 2 for entry in logged)


def test_resumed_run_continues_the_cumulative_zero_std_counts(tiny_model, tmp_path):
    first = train_ngrpo(tiny_model, "zero_std", tmp_path, save_strategy="steps", save_steps=2)
    resumed = train_ngrpo(tiny_model, "zero_std", tmp_path, max_steps=3)
    rewards = [*first.step_rewards, *resumed.step_rewards]
    assert len(rewards) == 3
    logged = [e for e in resumed.state.log_history if "ngrpo/total_groups_cumulative" in e]
    assert logged[-1]["ngrpo/total_groups_cumulative"] == 9.0
    zero_std = sum(int(zero_std_groups(r, NUM_GENERATIONS).sum()) for r in rewards)
    assert logged[-1]["ngrpo/zero_std_groups_cumulative"] == zero_std


def test_each_process_trains_on_its_slice_of_the_calibrated_advantages(tmp_path):
    # Two processes of 6 completions each: the middle group straddles them, so a correct
    # result needs rewards gathered across processes and sliced as TRL slices them.
    command = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2"]
    result = subprocess.run(
        [*command, __file__, str(tmp_path)],
        env=os.environ | {"OMP_NUM_THREADS": "1"},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-4000:]
    assert result.stdout.count("advantages match this process's slice") == 2


def check_process_slice(output_dir: str) -> None:
    """Under torchrun: this process's loss advantages are its slice of the calibrated batch."""
    trainer = train_ngrpo(build_tiny_model(), "zero_std", output_dir, per_device_batch_size=6)
    rank = trainer.accelerator.process_index
    for rewards, received in zip(trainer.step_rewards, trainer.loss_advantages, strict=True):
        calibrated = ngrpo_advantages(rewards, NUM_GENERATIONS, 1.0, "zero_std")
        mine = calibrated[rank * received.numel() : (rank + 1) * received.numel()]
        torch.testing.assert_close(received.sort().values, mine.sort().values)
    print(f"rank {rank}: advantages match this process's slice", flush=True)


if __name__ == "__main__":
    check_process_slice(sys.argv[1])
    end_process_group()  # the trainer is gone: its model no longer holds the group
