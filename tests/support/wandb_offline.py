"""Read an offline W&B run file (``wandb/offline-run-*/run-*.wandb``) back, for tests.

The file is a LevelDB-style log (a 7-byte header, then 32 KiB blocks of records, each a 7-byte
head: crc32, length, type FULL/FIRST/MIDDLE/LAST) of ``wandb_internal_pb2.Record`` messages; the
SDK no longer ships a Python reader for it (wandb-core writes it). Only what the tests check is
decoded: the run record and the history rows.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

_BLOCK = 32768
_HEADER = 7
_FULL, _LAST = 1, 4


def _records(data: bytes) -> Iterator[bytes]:
    assert data[:4] == b":W&B", "not a W&B run file"
    pos, pending = _HEADER, b""
    while pos + 7 <= len(data):
        left = _BLOCK - pos % _BLOCK
        if left < 7:  # the rest of a block too short for a record head is padding
            pos += left
            continue
        _crc, length, kind = struct.unpack("<IHB", data[pos : pos + 7])
        pos += 7
        if length == 0 and kind == 0:
            pos += left - 7  # zero padding to the end of the block
            continue
        pending += data[pos : pos + length]
        pos += length
        if kind in (_FULL, _LAST):
            yield pending
            pending = b""


@dataclass
class OfflineRun:
    name: str = ""
    group: str = ""
    job_type: str = ""
    config_keys: list[str] = field(default_factory=list)
    history: list[tuple[int, dict]] = field(default_factory=list)  # (step, {key: value})


def read_offline_run(path: Path) -> OfflineRun:
    from wandb.proto import wandb_internal_pb2 as pb

    run = OfflineRun()
    for data in _records(Path(path).read_bytes()):
        record = pb.Record()
        record.ParseFromString(data)
        kind = record.WhichOneof("record_type")
        if kind == "run":
            run.name, run.group, run.job_type = (
                record.run.display_name,
                record.run.run_group,
                record.run.job_type,
            )
            run.config_keys = [u.key for u in record.run.config.update]
        elif kind == "history":
            row = {
                item.key or "/".join(item.nested_key): json.loads(item.value_json)
                for item in record.history.item
            }
            run.history.append((record.history.step.num, row))
    return run
