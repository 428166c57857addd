"""One training per training-cache entry: a second run with the same data and config waits for
the first and reuses its model instead of training again beside it (or copying its live
checkpoints)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Literal

from prefect.cache_policies import CacheKeyFnPolicy, CachePolicy
from prefect.locking.filesystem import FileSystemLockManager
from prefect.settings import get_current_settings
from prefect.transactions import IsolationLevel

from toolgrpo.training.orphans import process_gone, this_process


class ProcessFileLocks(FileSystemLockManager):
    """Prefect's file locks, each also naming the process that holds it (`host:pid`); a lock
    whose process died (`kill -9`, an out-of-memory kill) is free, where Prefect's own would
    hold every later run forever (the engine sets it no expiry)."""

    def acquire_lock(
        self,
        key: str,
        holder: str,
        acquire_timeout: float | None = None,
        hold_timeout: float | None = None,
    ) -> bool:
        acquired = super().acquire_lock(key, holder, acquire_timeout, hold_timeout)
        if acquired:
            path = self._lock_path_for_key(key)
            record = json.loads(path.read_bytes())
            path.write_text(json.dumps({**record, "process": this_process()}))
            self._locks.pop(key, None)  # read back with its process next time
        return acquired

    def holder_process(self, key: str) -> str | None:
        """`host:pid` of the process holding `key`'s lock, or None when it is free."""
        if not self.is_locked(key):
            return None
        info = self._get_lock_info(key, use_cache=False)
        return None if info is None else info.get("process")  # type: ignore[return-value]

    def is_locked(self, key: str, use_cache: bool = False) -> bool:
        info = self._get_lock_info(key, use_cache=use_cache)
        if info is not None and process_gone(info.get("process")):  # type: ignore[arg-type]
            Path(info["path"]).unlink(missing_ok=True)
            self._locks.pop(key, None)
            return False
        return super().is_locked(key, use_cache)


def training_locks() -> ProcessFileLocks:
    """The lock files beside the results they guard (Prefect's local result storage)."""
    return ProcessFileLocks(get_current_settings().results.local_storage_path / "locks")


def training_cache(stage: Literal["sft", "grpo"], key: str) -> CachePolicy:
    """The cache policy of a training stage: one entry per stage and fingerprint, serialized
    (a run that finds the entry being written waits for it, then reads it)."""
    return CacheKeyFnPolicy(cache_key_fn=lambda *_: f"{stage}-{key}").configure(
        isolation_level=IsolationLevel.SERIALIZABLE, lock_manager=training_locks()
    )
