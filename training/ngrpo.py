"""NGRPO: a virtual full-score sample gives zero-variance GRPO groups a learning signal.

In GRPO a group whose completions all earn the same reward has zero advantage, so nothing is
learned from it (the case study: `Zero std: 3243/5108 (63.5%)`). NGRPO adds one virtual sample
with reward `max_reward` to the group's mean and std: a homogeneous group below the maximum then
gets −1/√(G+1) for every completion, a group all at the maximum stays at 0. Scope `zero_std` (the
case study) calibrates only zero-std groups; `all` (the NGRPO paper) every group; `none` is GRPO.
Asymmetric clipping is TRL's own `epsilon` / `epsilon_high` (the NGRPO reference: 0.16 / 0.24).

What "zero std" means is a setting (`ngrpo_zero_std_on`): `total` — the summed reward, as the
case study; `tool` — the tool component alone, so a group whose completions all earned the same
tool score (all right, or all the same kind of wrong) is calibrated even when their params and
reasoning scores differ. With the total reward almost no group of a tiny model is zero-std (the
other components always vary), which leaves the calibration idle.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any, get_args

import torch
from trl import GRPOConfig, GRPOTrainer
from trl.trainer.utils import nanstd

from toolgrpo.training.config import Scope, ZeroStdOn
from toolgrpo.training.model import TiedWeightsResume
from toolgrpo.training.rewards import tool_reward

logger = logging.getLogger(__name__)

SCOPES: tuple[str, ...] = get_args(Scope)
ZERO_STD_ON: tuple[str, ...] = get_args(ZeroStdOn)
# The reward function whose scores `ngrpo_zero_std_on="tool"` reads, by TRL's name for it.
TOOL_COMPONENT = tool_reward.__name__


def _check_scope(scope: str) -> None:
    if scope not in SCOPES:
        raise ValueError(f"ngrpo scope must be one of {SCOPES}, got {scope!r}")


def _grouped(rewards: torch.Tensor | list[float], num_generations: int) -> torch.Tensor:
    """Rewards as (groups, num_generations), in float64: in float32 the mean of eight equal
    rewards can miss them by an ulp, which leaves a spurious 3e-4 advantage in zero-std groups."""
    rewards = torch.as_tensor(rewards).to(torch.float64, copy=True)
    if rewards.dim() != 1 or rewards.numel() % num_generations:
        raise ValueError(
            f"rewards must be flat with a multiple of num_generations={num_generations} "
            f"entries, got shape {tuple(rewards.shape)}"
        )
    return rewards.view(-1, num_generations)


def _group_std(grouped: torch.Tensor) -> torch.Tensor:
    """Unbiased, NaN-ignoring std per group, as TRL computes it (0 for single-sample groups)."""
    if grouped.size(1) == 1:
        return torch.zeros(grouped.size(0), dtype=grouped.dtype)
    return nanstd(grouped, dim=1)


def zero_std_groups(rewards: torch.Tensor | list[float], num_generations: int) -> torch.Tensor:
    """One bool per group: did every completion of the group earn the same reward?"""
    std = _group_std(_grouped(rewards, num_generations))
    return torch.isclose(std, torch.zeros_like(std))


def ngrpo_advantages(
    rewards: torch.Tensor | list[float],
    num_generations: int,
    max_reward: float = 1.0,
    scope: Scope = "zero_std",
    eps: float = 1e-4,
    zero_std: torch.Tensor | None = None,
) -> torch.Tensor:
    """Per-completion advantages, `(r − mean) / (std + eps)` per group of `num_generations`.

    Calibrated groups (all of them for `all`, zero-std ones for `zero_std`, none for `none`) count
    one virtual sample of reward `max_reward` in their mean and std; it gets no advantage itself.
    `zero_std` (one bool per group) says which groups count as zero-std when it is not the
    rewards' own std (e.g. `zero_std_groups` of the tool component). NaN rewards (unscorable
    completions) are left out of the statistics and get advantage 0.
    """
    _check_scope(scope)
    grouped = _grouped(rewards, num_generations)
    mean = torch.nanmean(grouped, dim=1)
    std = _group_std(grouped)
    if scope != "none":
        calibrate = torch.ones_like(mean, dtype=torch.bool)
        if scope == "zero_std":
            calibrate = torch.isclose(std, torch.zeros_like(std)) if zero_std is None else zero_std
        with_virtual = torch.cat([grouped, torch.full_like(grouped[:, :1], max_reward)], dim=1)
        mean = torch.where(calibrate, torch.nanmean(with_virtual, dim=1), mean)
        std = torch.where(calibrate, nanstd(with_virtual, dim=1), std)
    advantages = (grouped - mean.unsqueeze(1)) / (std.unsqueeze(1) + eps)
    return torch.nan_to_num(advantages, nan=0.0).view(-1).to(torch.float32)


@dataclass
class NGRPOConfig(GRPOConfig):
    """TRL's `GRPOConfig` plus the NGRPO calibration's scope and virtual reward."""

    ngrpo_scope: str = field(
        default="zero_std",
        metadata={
            "help": "Groups that get the virtual full-score sample: 'zero_std' (the case study), "
            "'all' (the NGRPO paper) or 'none' (plain GRPO).",
            "choices": list(SCOPES),
        },
    )
    ngrpo_max_reward: float = field(
        default=1.0,
        metadata={"help": "Reward of the virtual sample: the reward function's maximum."},
    )
    ngrpo_zero_std_on: str = field(
        default="total",
        metadata={
            "help": "What a zero-std group has equal: 'total' reward (the case study) or the "
            "'tool' component's score.",
            "choices": list(ZERO_STD_ON),
        },
    )

    def __post_init__(self) -> None:
        _check_scope(self.ngrpo_scope)
        if self.ngrpo_zero_std_on not in ZERO_STD_ON:
            raise ValueError(
                f"ngrpo_zero_std_on must be one of {ZERO_STD_ON}, got {self.ngrpo_zero_std_on!r}"
            )
        super().__post_init__()  # normalises scale_rewards=True/False to "group"/"none"
        per_group = self.scale_rewards == "group"
        summed = self.multi_objective_aggregation == "sum_then_normalize"
        if self.ngrpo_scope != "none" and not (per_group and summed):
            raise ValueError(
                "NGRPO calibrates per-group reward statistics: it needs scale_rewards='group' "
                "and multi_objective_aggregation='sum_then_normalize' (got "
                f"{self.scale_rewards!r}, {self.multi_objective_aggregation!r})"
            )


@dataclass
class _GroupCounts:
    zero_std: int = 0
    zero_std_tool: int = 0
    calibrated: int = 0
    total: int = 0

    @classmethod
    def from_log_history(cls, log_history: list[dict[str, float]], prefix: str) -> _GroupCounts:
        """The cumulative counts last logged: a run resumed from a checkpoint continues them."""
        key = f"{prefix}ngrpo/total_groups_cumulative"
        last = next((entry for entry in reversed(log_history) if key in entry), None)
        if last is None:
            return cls()
        return cls(
            zero_std=int(last[f"{prefix}ngrpo/zero_std_groups_cumulative"]),
            zero_std_tool=int(last.get(f"{prefix}ngrpo/zero_std_tool_groups_cumulative", 0)),
            calibrated=int(last[f"{prefix}ngrpo/calibrated_groups_cumulative"]),
            total=int(last[key]),
        )


class NGRPOTrainer(TiedWeightsResume, GRPOTrainer):
    """`GRPOTrainer` whose advantages are NGRPO-calibrated; logs zero-std and calibration stats.

    TRL computes advantages inline in `_generate_and_score_completions`. This trainer keeps that
    step whole, records the rewards TRL gathers from every process (`_calculate_rewards`), and
    afterwards replaces the batch's advantages by `ngrpo_advantages` of those rewards, sliced to
    this process as TRL slices them. Metrics (train or eval, in `log_history`): `ngrpo/*` —
    zero-std groups before calibration, groups the calibration changed, per step and cumulative.
    """

    args: NGRPOConfig

    def __init__(
        self, model: Any, reward_funcs: Any = None, args: NGRPOConfig | None = None, **kwargs: Any
    ) -> None:
        if not isinstance(args, NGRPOConfig):
            raise TypeError(f"NGRPOTrainer needs args=NGRPOConfig(...), got {type(args).__name__}")
        super().__init__(model, reward_funcs, args, **kwargs)
        self._gathered_rewards_per_func: torch.Tensor | None = None
        self._group_counts: dict[str, _GroupCounts] = {}

    def _get_per_token_logps_and_entropies(
        self,
        model,
        input_ids,
        attention_mask,
        logits_to_keep,
        batch_size=None,
        compute_entropy=False,
        compute_aux_loss=False,
        **images,
    ):
        """The completion tokens' log-probabilities (and entropies) at the sampling temperature.
        On a GPU, TRL's fused LM head computes them; on the CPU, where that head has no Triton
        kernel and folds the logits of every prompt position too in float32 passes, they are
        the model's logits at the completion positions only."""
        if self.accelerator.device.type != "cpu" or compute_aux_loss or any(images.values()):
            return super()._get_per_token_logps_and_entropies(
                model,
                input_ids,
                attention_mask,
                logits_to_keep,
                batch_size,
                compute_entropy,
                compute_aux_loss,
                **images,
            )
        batch_size = batch_size or input_ids.size(0)
        logps, entropies = [], []
        for start in range(0, input_ids.size(0), batch_size):
            ids = input_ids[start : start + batch_size]
            with self.accelerator.autocast():
                logits = model(
                    input_ids=ids,
                    attention_mask=attention_mask[start : start + batch_size],
                    logits_to_keep=logits_to_keep + 1,
                    use_cache=False,
                ).logits
            log_probs = (logits[:, :-1].float() / self.temperature).log_softmax(-1)
            targets = ids[:, -logits_to_keep:].unsqueeze(-1)
            logps.append(log_probs.gather(-1, targets).squeeze(-1))
            if compute_entropy:
                with torch.no_grad():
                    entropies.append(-(log_probs.exp() * log_probs).sum(-1))
        return torch.cat(logps), torch.cat(entropies) if compute_entropy else None, None

    def _calculate_rewards(self, inputs, prompts, completions, completion_ids_list):
        rewards_per_func = super()._calculate_rewards(
            inputs, prompts, completions, completion_ids_list
        )
        self._gathered_rewards_per_func = rewards_per_func
        return rewards_per_func

    def _generate_and_score_completions(self, inputs):
        output = super()._generate_and_score_completions(inputs)
        mode = "train" if self.model.training else "eval"
        num_generations = self.num_generations if mode == "train" else self.num_generations_eval
        rewards_per_func = self._gathered_rewards_per_func
        self._gathered_rewards_per_func = None

        # The same total TRL normalises (weighted sum; rows every function skipped are NaN).
        weights = self.reward_weights.to(rewards_per_func.device).unsqueeze(0)
        rewards = (rewards_per_func * weights).nansum(dim=1)
        rewards[torch.isnan(rewards_per_func).all(dim=1)] = torch.nan
        rewards = rewards.cpu()

        tool_zero_std = self._tool_zero_std(rewards_per_func, num_generations)
        grpo = ngrpo_advantages(rewards, num_generations, scope="none")
        advantages = ngrpo_advantages(
            rewards,
            num_generations,
            self.args.ngrpo_max_reward,
            self.args.ngrpo_scope,
            zero_std=tool_zero_std if self.args.ngrpo_zero_std_on == "tool" else None,
        )
        changed = ~torch.isclose(grpo, advantages, atol=1e-6).view(-1, num_generations).all(dim=1)
        self._record_groups(mode, zero_std_groups(rewards, num_generations), tool_zero_std, changed)

        if self.args.ngrpo_scope != "none":
            local_size = output["advantages"].size(0)
            start = self.accelerator.process_index * local_size
            output["advantages"] = advantages[start : start + local_size].to(
                output["advantages"].device
            )
            logged = self._logs["advantages"]
            for _ in range(min(len(advantages), len(logged))):
                logged.pop()
            logged.extend(advantages.tolist())
        return output

    def _tool_zero_std(
        self, rewards_per_func: torch.Tensor, num_generations: int
    ) -> torch.Tensor | None:
        """Per group: did every completion earn the same tool score? None without that reward."""
        if TOOL_COMPONENT not in self.reward_func_names:
            return None
        tool = rewards_per_func[:, self.reward_func_names.index(TOOL_COMPONENT)].cpu()
        return zero_std_groups(tool, num_generations)

    def _record_groups(
        self,
        mode: str,
        zero_std: torch.Tensor,
        zero_std_tool: torch.Tensor | None,
        changed: torch.Tensor,
    ) -> None:
        """Per-step and cumulative group counts into TRL's metrics, and the case study's line.

        Both definitions of zero std are counted, whichever one the calibration uses."""
        if mode not in self._group_counts:
            prefix = "eval_" if mode == "eval" else ""
            self._group_counts[mode] = _GroupCounts.from_log_history(self.state.log_history, prefix)
        counts = self._group_counts[mode]
        counts.zero_std += int(zero_std.sum())
        tool_count = int(zero_std_tool.sum()) if zero_std_tool is not None else 0
        counts.zero_std_tool += tool_count
        counts.calibrated += int(changed.sum())
        counts.total += zero_std.numel()
        metrics = self._metrics[mode]
        metrics["ngrpo/zero_std_groups"].append(float(zero_std.sum()))
        metrics["ngrpo/zero_std_tool_groups"].append(float(tool_count))
        metrics["ngrpo/calibrated_groups"].append(float(changed.sum()))
        metrics["ngrpo/total_groups"].append(float(zero_std.numel()))
        metrics["ngrpo/calibrated_frac"].append(float(changed.float().mean()))
        # Cumulative values replace rather than append: TRL averages each list when it logs.
        metrics["ngrpo/zero_std_groups_cumulative"] = [float(counts.zero_std)]
        metrics["ngrpo/zero_std_tool_groups_cumulative"] = [float(counts.zero_std_tool)]
        metrics["ngrpo/calibrated_groups_cumulative"] = [float(counts.calibrated)]
        metrics["ngrpo/total_groups_cumulative"] = [float(counts.total)]
        metrics["ngrpo/zero_std_frac_cumulative"] = [counts.zero_std / counts.total]
        if self.accelerator.is_main_process:
            logger.info(
                "Zero std: %d/%d (%.1f%%), on the tool score %d/%d; calibration changed %d/%d "
                "groups this step (%s)",
                counts.zero_std,
                counts.total,
                100 * counts.zero_std / counts.total,
                counts.zero_std_tool,
                counts.total,
                int(changed.sum()),
                changed.numel(),
                mode,
            )
