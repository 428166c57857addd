"""SFT's length-sorted micro-batches (`batch_rebalance`): every row once per epoch, each step the
rows of one shuffled window, less padding than one padded batch, and an order that follows the
seed and the epoch."""

from toolgrpo.training.config_overrides import load_preset
from toolgrpo.training.sft import sft_trainer

ROWS_PER_STEP, MICRO_BATCHES = 8, 4
REBALANCED = {
    "sft.per_device_train_batch_size": ROWS_PER_STEP // MICRO_BATCHES,
    "sft.gradient_accumulation_steps": MICRO_BATCHES,
    "sft.train_sampling_strategy": "batch_rebalance",
}


def epoch_steps(seed: int, epoch: int, tmp_path) -> tuple[list[list[list[int]]], list[int]]:
    """The steps of one epoch (each a list of micro-batches of row indices) and the row lengths."""
    trainer = sft_trainer(load_preset("smoke", {**REBALANCED, "seed": seed}), tmp_path)
    sampler = trainer._get_train_sampler()
    sampler.set_epoch(epoch)
    micro = list(sampler)
    steps = [micro[i : i + MICRO_BATCHES] for i in range(0, len(micro), MICRO_BATCHES)]
    return steps, [len(ids) for ids in trainer.train_dataset["input_ids"]]


def test_each_step_holds_the_rows_of_a_step_in_micro_batches_of_similar_length(tmp_path):
    steps, lengths = epoch_steps(0, 0, tmp_path / "a")
    rows = [i for step in steps for batch in step for i in batch]
    assert sorted(rows) == list(range(len(lengths)))  # every row once
    assert all(sum(map(len, step)) == ROWS_PER_STEP for step in steps[:-1])
    padded_micro = sum(len(b) * max(lengths[i] for i in b) for step in steps for b in step)
    padded_step = sum(
        sum(map(len, step)) * max(lengths[i] for b in step for i in b) for step in steps
    )
    assert padded_micro < 0.9 * padded_step


def test_the_row_order_follows_the_seed_and_the_epoch(tmp_path):
    order = {
        (seed, epoch): epoch_steps(seed, epoch, tmp_path / f"{seed}-{epoch}")[0]
        for seed, epoch in [(0, 0), (0, 1), (1, 0)]
    }
    assert order[0, 0] != order[0, 1] and order[0, 0] != order[1, 0]
    assert order[0, 0] == epoch_steps(0, 0, tmp_path / "again")[0]


def test_aux_first_reads_every_auxiliary_row_before_the_training_rows_in_the_first_epoch(
    tmp_path,
):
    """The curriculum (`sft.aux_first`): epoch 0 steps through the auxiliary rows (the dataset's
    last) first, then the training rows; later epochs mix them as without it."""
    mixed = {**REBALANCED, "data.train_aux": "data/aux/numeracy.jsonl", "data.aux_share": 0.45}
    config = load_preset("smoke", {**mixed, "sft.aux_first": True})
    trainer = sft_trainer(config, tmp_path / "first")
    rows = len(trainer.train_dataset)
    aux = rows - config.data.max_train_rows  # 39 of 87 rows: the last step a short one
    sampler = trainer._get_train_sampler()
    batches = list(sampler)
    assert len(batches) == len(sampler)
    first = [i for batch in batches for i in batch]
    assert sorted(first) == list(range(rows))
    assert sorted(first[:aux]) == list(range(rows - aux, rows))  # the aux rows, then the rest
    sampler.set_epoch(1)
    plain = sft_trainer(load_preset("smoke", mixed), tmp_path / "plain")._get_train_sampler()
    plain.set_epoch(1)
    assert list(sampler) == list(plain)
    plain.set_epoch(0)
    assert [i for batch in plain for i in batch][:aux] != first[:aux]
