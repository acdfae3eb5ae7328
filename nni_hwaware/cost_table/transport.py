"""Carry a cost table inside an NNI metric, so trials on remote boards can return theirs.

Profiling many boards at once runs one NNI trial per board (NNI's remote training
service, ``machineList``); each trial profiles the machine it runs on and reports
its table in its final metric as zlib-compressed, base64-encoded CSV (about 8 KB
for a space's 130 rows). :func:`collect_tables` merges what the trials reported.
"""

from __future__ import annotations

import base64
import io
import zlib
from collections.abc import Iterable, Mapping

import pandas as pd

from nni_hwaware.cost_table.table import KEY_COLUMNS, CostTable
from nni_hwaware.errors import HwAwareError

__all__ = ["collect_tables", "table_from_text", "table_to_text"]

METRIC_KEY = "cost_table"


def table_to_text(table: CostTable) -> str:
    csv = table.frame.to_csv(index=False).encode("utf-8")
    return base64.b64encode(zlib.compress(csv, 9)).decode("ascii")


def table_from_text(text: str) -> CostTable:
    try:
        csv = zlib.decompress(base64.b64decode(text.encode("ascii"), validate=True)).decode("utf-8")
    except (ValueError, zlib.error) as err:
        raise HwAwareError(f"a reported cost table is corrupt ({err}); re-run that trial") from None
    return CostTable(pd.read_csv(io.StringIO(csv), keep_default_na=False,
                                 na_values={"latency_ms": ["", "nan"]}, float_precision="round_trip"))


def collect_tables(metrics: Iterable[Mapping[str, object]]) -> CostTable:
    """Merge the tables in trials' final metrics; a board profiled twice keeps its first table."""
    tables = [table_from_text(str(m[METRIC_KEY])) for m in metrics if METRIC_KEY in m]
    if not tables:
        raise HwAwareError("no trial reported a cost table; check that the trials succeeded (nnictl trial ls)")
    frame = pd.concat([t.frame for t in tables], ignore_index=True)
    unique = [c for c in KEY_COLUMNS if c != "kind"]
    return CostTable(frame.drop_duplicates(unique, keep="first").reset_index(drop=True))
