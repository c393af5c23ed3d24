"""A built set as ``<out>/<set>/test-00000-of-00001.parquet``: HF features, rows, the atomic write."""

from __future__ import annotations

import io
import json
from pathlib import Path

from cs3_tasks.core import data
from cs3_tasks.core.audio import SAMPLE_RATE
from cs3_tasks.core.cache import atomic_write

PARQUET_NAME = "test-00000-of-00001.parquet"


def dataset_features(set_name: str, columns: tuple[str, ...] | None = None):
    """The HF Features of a set: Qid, audio (16 kHz), then the text columns.

    ``columns`` (id column first) serves configs outside data.SETS, e.g. ("id", "text") for belle_eval_s2s.
    """
    import datasets

    names = tuple(columns) if columns else data.set_columns(set_name)
    features = {
        names[0]: datasets.Value("string"),
        data.AUDIO_COLUMN: datasets.Audio(sampling_rate=SAMPLE_RATE),
    }
    for name in names[1:]:
        features[name] = datasets.Value("string")
    return datasets.Features(features)


def write_parquet(set_name: str, rows: list[dict], out: Path, columns: tuple[str, ...] | None = None) -> int:
    """Write one set as ``<out>/<set>/test-00000-of-00001.parquet`` with the HF features in its metadata.

    Returns the in-memory (arrow) size of the table, the ``num_bytes`` of the card's split info.
    """
    import pyarrow as pa
    import pyarrow.parquet as pq

    features = dataset_features(set_name, columns)
    fields = []
    for name in features:
        if name == data.AUDIO_COLUMN:
            fields.append(pa.field(name, pa.struct([("bytes", pa.binary()), ("path", pa.string())])))
        else:
            fields.append(pa.field(name, pa.string()))
    metadata = {"huggingface": json.dumps({"info": {"features": features.to_dict()}})}
    schema = pa.schema(fields, metadata=metadata)
    table = pa.Table.from_pylist(rows, schema=schema)
    path = Path(out) / set_name / PARQUET_NAME
    path.parent.mkdir(parents=True, exist_ok=True)
    buffer = io.BytesIO()
    pq.write_table(table, buffer, compression="zstd")
    atomic_write(path, buffer.getvalue())
    return int(table.nbytes)


def dataset_rows(
    set_name: str, records: list[dict], audio_by_item: dict[tuple[str, str], bytes]
) -> list[dict]:
    rows = []
    for record in records:
        flac = audio_by_item.get((set_name, record["Qid"]))
        if flac is None:
            continue
        row = {"Qid": record["Qid"], data.AUDIO_COLUMN: {"bytes": flac, "path": f"{record['Qid']}.flac"}}
        row.update({k: v for k, v in record.items() if k != "Qid"})
        rows.append(row)
    return rows
