"""On the CPU both trainers compute their losses from the model's logits at the positions that
count, not with TRL's fused LM head: the same numbers as TRL's, at a fraction of the cost."""

import torch
from trl import GRPOTrainer, SFTTrainer

from toolgrpo.training.config_overrides import load_preset
from toolgrpo.training.sft import sft_trainer


def _batch(trainer):
    trainer.model.train()
    return trainer._prepare_inputs(next(iter(trainer.get_train_dataloader())))


def test_sft_loss_and_metrics_on_the_cpu_are_trls(tmp_path):
    trainer = sft_trainer(load_preset("smoke", {"model.tiny.hidden_size": 64}), tmp_path)
    inputs = _batch(trainer)
    ours = trainer.compute_loss(trainer.model, dict(inputs), num_items_in_batch=None)
    ours_metrics = {k: v[-1] for k, v in trainer._metrics["train"].items() if k != "num_tokens"}
    theirs = SFTTrainer.compute_loss(trainer, trainer.model, dict(inputs))
    theirs_metrics = {k: v[-1] for k, v in trainer._metrics["train"].items() if k != "num_tokens"}
    torch.testing.assert_close(ours, theirs, rtol=1e-5, atol=1e-5)
    assert ours_metrics.keys() == theirs_metrics.keys() == {"entropy", "mean_token_accuracy"}
    for name, value in ours_metrics.items():
        assert abs(value - theirs_metrics[name]) < 1e-4, name


def test_sft_loss_gradients_on_the_cpu_are_trls(tmp_path):
    trainer = sft_trainer(load_preset("smoke", {"model.tiny.hidden_size": 64}), tmp_path)
    inputs = _batch(trainer)
    grads = []
    for compute in (trainer.compute_loss, lambda *a: SFTTrainer.compute_loss(trainer, *a)):
        trainer.model.zero_grad()
        compute(trainer.model, dict(inputs)).backward()
        grads.append(trainer.model.get_input_embeddings().weight.grad.clone())
    torch.testing.assert_close(grads[0], grads[1], rtol=1e-4, atol=1e-6)


def test_grpo_completion_log_probs_on_the_cpu_are_trls(tmp_path):
    from toolgrpo.training.grpo import grpo_config, grpo_dataset, reward_functions
    from toolgrpo.training.ngrpo import NGRPOTrainer

    config = load_preset("smoke", {"model.tiny.hidden_size": 64})
    sft = sft_trainer(config, tmp_path / "sft")
    tokenizer, model = sft.processing_class, sft.model
    catalogue = config.data.tool_catalogue()
    trainer = NGRPOTrainer(
        model=model,
        reward_funcs=reward_functions(config, catalogue),
        args=grpo_config(config, tmp_path / "grpo"),
        train_dataset=grpo_dataset(config, tokenizer, catalogue),
        processing_class=tokenizer,
    )
    ids = torch.randint(5, len(tokenizer), (3, 20))
    mask = torch.ones_like(ids)
    mask[0, :4] = 0  # a left-padded prompt
    ours = trainer._get_per_token_logps_and_entropies(model, ids, mask, 7, compute_entropy=True)
    theirs = GRPOTrainer._get_per_token_logps_and_entropies(
        trainer, model, ids, mask, 7, compute_entropy=True
    )
    for mine, trl in zip(ours[:2], theirs[:2], strict=True):
        torch.testing.assert_close(mine, trl, rtol=1e-4, atol=1e-5)
