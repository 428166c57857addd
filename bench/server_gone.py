"""A Prefect server that goes away for good during a run: how long until the command ends, how.

    python bench/server_gone.py [--epochs 6] [--limit-s 600]

Starts `prefect server start` on a free localhost port (its own PREFECT_HOME), runs
`toolgrpo run --preset smoke` against it, kills the server (SIGKILL, never restarted) as soon as
SFT logs its first step, and prints the seconds from the kill to the command's end, its exit
status, its last line, and whether the run folder holds the GRPO model and report.html.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import tempfile
import time
from pathlib import Path

from ui_screenshots import BIN, prefect_server


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=6, help="SFT epochs (longer training)")
    parser.add_argument("--limit-s", type=float, default=600, help="give up after this")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        folder = Path(scratch)
        with prefect_server(folder / "home") as (url, env):
            port = url.split(":")[2].split("/")[0]
            found = subprocess.run(
                ["pgrep", "-f", "--", f"--port {port}"], capture_output=True, text=True
            )
            server_group = int(found.stdout.split()[0])  # `prefect server start`, its own session
            log = folder / "run.log"
            command = [BIN / "toolgrpo", "run", "--preset", "smoke", "--out", folder / "runs"]
            command += ["--set", f"sft.num_train_epochs={args.epochs}"]
            with log.open("w") as output:
                run = subprocess.Popen(
                    command, env=env, stdout=output, stderr=subprocess.STDOUT, text=True
                )
                while not list(folder.glob("runs/*/sft/train_metrics.jsonl")):
                    if run.poll() is not None:
                        raise SystemExit(f"the run ended before SFT began:\n{log.read_text()}")
                    time.sleep(0.2)
                os.killpg(server_group, signal.SIGKILL)
                killed = time.monotonic()
                try:
                    status: int | str = run.wait(timeout=args.limit_s)
                except subprocess.TimeoutExpired:
                    run.kill()
                    status = f"still running after {args.limit_s:.0f} s (killed)"
            ended_s = time.monotonic() - killed
        run_dir = next(folder.glob("runs/*"))
        print(f"server killed at SFT's first step; the command ended {ended_s:.1f} s later")
        print(f"exit status: {status}")
        print(f"last line: {log.read_text().strip().splitlines()[-1]}")
        print(f"GRPO model kept: {(run_dir / 'grpo' / 'model').is_dir()}")
        print(f"report.html kept: {(run_dir / 'report.html').is_file()}")


if __name__ == "__main__":
    main()
