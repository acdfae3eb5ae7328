"""Per-chip hardware cost tables: one measured row per profiled block.

A cost table records, for every candidate block of a search space profiled on each
target chip (and for the fixed parts of the network such as ``stem`` and ``head``),
its measured costs. Rows are keyed by block, shape, chip, backend and batch size:

===================  =====  ==========================================================
column               type   meaning
===================  =====  ==========================================================
**key**
``block``            str    block name, e.g. ``"mbconv3_k5"``, ``"stem"``, ``"head"``
``kind``             str    ``"candidate"`` (searchable choice), ``"fixed"`` (stem, head),
                            ``"network"`` (per-network overhead, see below) or ``"leaf"``
                            (a leaf of any model space, :mod:`nni_hwaware.cost_model`:
                            ``block`` names its module spec, ``input_shape`` is per-sample
                            sizes of any rank, ``";"`` between inputs)
``input_shape``      str    per-sample input shape ``"CxHxW"``, e.g. ``"64x32x32"``
``out_channels``     int    output channels
``stride``           int    stride
``chip``             str    chip model string, e.g. ``"NVIDIA H200"``
``backend``          str    ``"torch"``, ``"onnxruntime"``, ...
``batch_size``       int    batch size the block was timed with
**measurement**
``latency_ms``       float  median latency in milliseconds (> 0)
``latency_std_ms``   float  standard deviation of the timed runs (ms)
``latency_cv``       float  coefficient of variation, std / mean
``runs``             int    number of timed runs
``param_mb``         float  parameter + buffer bytes / 2**20
``activation_mb``    float  peak activation bytes / 2**20
``memory_mb``        float  ``param_mb + activation_mb``
``flops``            int    multiplies + adds
``params``           int    number of parameters
``peak_flops``       float  the chip's theoretical peak C in FLOP/s
``utilisation``      float  ``flops / (latency_ms / 1000 * peak_flops)``
**metadata**
``torch_version``    str    ``torch.__version__`` at profiling time
``threads``          int    intra-op threads (0 = runtime default)
``profiled_at``      str    ISO date of the profile
``device``           str    ``"cpu"``, ``"cuda:0"``, ...
``providers``        str    ONNX Runtime execution providers joined by ``"+"``; ``""`` for torch
===================  =====  ==========================================================

A ``network`` row (block ``"network"`` in block tables, ``"network-<space fingerprint>"``
in leaf tables; the space's input shape) holds what a network costs beyond the sum of
its blocks, measured when the table is profiled (see :mod:`nni_hwaware.cost_table.block_keys`
and :mod:`nni_hwaware.cost_model.calibration`): its ``latency_ms`` is added to every
prediction; in leaf tables its extra columns ``latency_scale`` (what the summed leaves are
multiplied by) and ``latency_terms`` (JSON ``{label: {repr(value): ms}}``, added per chosen
value) complete it.

A row is identified by every key column except ``kind`` (which only describes the
block), and ``threads``: two rows may not share (block, input_shape, out_channels, stride,
chip, backend, batch_size, threads); one table holds a runtime at several thread counts.
:class:`CostTable` validates strictly and recomputes nothing:
every column above is required (extra columns are kept, unvalidated, after them) and
the derived columns (``memory_mb``, ``utilisation``, ``latency_cv``) are trusted as stored.
Every validation failure raises :class:`~nni_hwaware.errors.HwAwareError` with a
one-line message naming the column or row and what to do.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from nni_hwaware.errors import HwAwareError
from nni_hwaware.files import atomic_open

__all__ = ["COLUMNS", "KEY_COLUMNS", "KINDS", "MEASURE_COLUMNS", "META_COLUMNS", "BlockKey", "CostTable"]

KEY_COLUMNS: tuple[str, ...] = (
    "block", "kind", "input_shape", "out_channels", "stride", "chip", "backend", "batch_size",
)  # fmt: skip
MEASURE_COLUMNS: tuple[str, ...] = (
    "latency_ms", "latency_std_ms", "latency_cv", "runs", "param_mb", "activation_mb",
    "memory_mb", "flops", "params", "peak_flops", "utilisation",
)  # fmt: skip
META_COLUMNS: tuple[str, ...] = ("torch_version", "threads", "profiled_at", "device", "providers")
COLUMNS: tuple[str, ...] = KEY_COLUMNS + MEASURE_COLUMNS + META_COLUMNS
KINDS: tuple[str, ...] = ("candidate", "fixed", "network", "leaf")

_NONEMPTY = ("block", "kind", "input_shape", "chip", "backend")
_STR = (*_NONEMPTY, "torch_version", "profiled_at", "device", "providers")
_INT = ("out_channels", "stride", "batch_size", "runs", "flops", "params", "threads")
_FLOAT = tuple(c for c in COLUMNS if c not in _STR and c not in _INT)
#: What identifies a row: the key columns but ``kind``, and the intra-op threads it was timed with.
_UNIQUE = [*(c for c in KEY_COLUMNS if c != "kind"), "threads"]
_BLOCK = ["block", "input_shape", "out_channels", "stride"]
_POSITIVE = ("latency_ms", "peak_flops")  # > 0; every other number is >= 0, these >= 1:
_AT_LEAST_1 = ("runs", "out_channels", "stride", "batch_size")
_SHAPE = re.compile(r"[1-9]\d*x[1-9]\d*x[1-9]\d*")
#: A leaf of any model space: per-sample shapes of any rank, ";" between inputs.
_LEAF_SHAPE = re.compile(r"[1-9]\d*(x[1-9]\d*)*(;[1-9]\d*(x[1-9]\d*)*)*")


@dataclass(frozen=True)
class BlockKey:
    """One block instance of a network: what a cost-table row is looked up by."""

    block: str
    input_shape: tuple[int, int, int]
    out_channels: int
    stride: int

    def __post_init__(self) -> None:
        shape = tuple(self.input_shape)
        if len(shape) != 3 or not all(isinstance(v, int | np.integer) and v > 0 for v in shape):
            raise HwAwareError(
                f"BlockKey {self.block!r}: input_shape must be 3 positive ints (C, H, W), got {self.input_shape!r}"
            )
        object.__setattr__(self, "input_shape", tuple(int(v) for v in shape))
        if not isinstance(self.block, str) or not self.block:
            raise HwAwareError(f"BlockKey: block must be a non-empty string, got {self.block!r}")
        for name in ("out_channels", "stride"):
            if not isinstance(getattr(self, name), int | np.integer) or getattr(self, name) < 1:
                raise HwAwareError(f"BlockKey {self.block!r}: {name} must be a positive int, got {getattr(self, name)!r}")
            object.__setattr__(self, name, int(getattr(self, name)))

    @property
    def shape_str(self) -> str:
        """The input shape as stored in the table, e.g. ``"64x32x32"``."""
        return "x".join(str(v) for v in self.input_shape)

    @staticmethod
    def parse_shape(text: str) -> tuple[int, int, int]:
        """Parse ``"CxHxW"`` (e.g. ``"64x32x32"``) into ``(C, H, W)``."""
        if not isinstance(text, str) or not _SHAPE.fullmatch(text):
            raise HwAwareError(f"input shape {text!r} is not 'CxHxW' with positive integers, e.g. '64x32x32'")
        c, h, w = (int(v) for v in text.split("x"))
        return c, h, w


def _show(value: object) -> str:
    """``repr`` of a cell, with numpy scalars shown as plain Python values."""
    if pd.api.types.is_scalar(value) and pd.isna(value):
        return "empty (NaN)"
    return repr(value.item() if isinstance(value, np.generic) else value)


def _fail_rows(df: pd.DataFrame, bad: pd.Series, col: str, must: str, fix: str) -> None:
    """Raise naming the first row where ``bad`` holds, if any."""
    pos = np.flatnonzero(bad.to_numpy(dtype=bool))
    if len(pos):
        i, r = int(pos[0]), df.iloc[int(pos[0])]
        more = f" (and {len(pos) - 1} more rows)" if len(pos) > 1 else ""
        raise HwAwareError(
            f"cost table row {i} (block {r['block']!r}, input_shape {r['input_shape']!s}, chip {r['chip']!r})"
            f"{more}: column {col!r} is {_show(r[col])} but must be {must}; {fix}"
        )


def _normalise(frame: pd.DataFrame) -> pd.DataFrame:
    """Validate ``frame`` against the schema; return a copy with canonical dtypes and order."""
    if not isinstance(frame, pd.DataFrame):
        raise HwAwareError(f"CostTable needs a pandas DataFrame, got {type(frame).__name__}")
    missing = [c for c in COLUMNS if c not in frame.columns]
    if missing:
        raise HwAwareError(
            f"cost table is missing column(s) {', '.join(missing)}; re-profile with the current "
            f"profiler or add them (expected: {', '.join(COLUMNS)})"
        )
    if frame.columns.duplicated().any():
        dups = sorted({str(c) for c in frame.columns[frame.columns.duplicated()]})
        raise HwAwareError(f"cost table has duplicate column(s) {', '.join(dups)}; keep one of each")
    extras = [c for c in frame.columns if c not in COLUMNS]
    df = frame.loc[:, [*COLUMNS, *extras]].reset_index(drop=True).copy()
    fix = "fix or re-profile that row"
    for col in _STR:
        _fail_rows(df, df[col].isna(), col, "a string", fix)
        df[col] = df[col].astype(str)
        if col in _NONEMPTY:
            _fail_rows(df, df[col].str.strip() == "", col, "a non-empty string", fix)
    for col in _INT + _FLOAT:
        num = pd.to_numeric(df[col], errors="coerce")
        bad = num.isna() | ~np.isfinite(num.astype("float64"))
        _fail_rows(df, bad, col, "a finite number", "re-profile that block or drop the row")
        if col in _INT:
            _fail_rows(df, num % 1 != 0, col, "an integer", fix)
            num = num.astype("int64")
        df[col] = num if col in _INT else num.astype("float64")
    _fail_rows(df, ~df["kind"].isin(KINDS), "kind", " or ".join(map(repr, KINDS)), fix)
    leaf = df["kind"].isin(["leaf", "network"])
    _fail_rows(df, ~leaf & ~df["input_shape"].str.fullmatch(_SHAPE.pattern), "input_shape",
               "'CxHxW' with positive integers, e.g. '64x32x32'", fix)  # fmt: skip
    _fail_rows(df, leaf & ~df["input_shape"].str.fullmatch(_LEAF_SHAPE.pattern), "input_shape",  # any space
               "per-sample sizes joined by 'x', inputs by ';', e.g. '64x32x32;64x32x32'", fix)  # fmt: skip
    for col in _INT + _FLOAT:
        low, strict = (1, False) if col in _AT_LEAST_1 else (0, col in _POSITIVE)
        bad = df[col] <= low if strict else df[col] < low
        _fail_rows(df, bad, col, f"{'>' if strict else '>='} {low}", "re-profile that block or drop the row")
    dup = df.duplicated(_UNIQUE, keep=False)
    if dup.any():
        row = df.loc[dup.idxmax(), _UNIQUE]
        n = int((df[_UNIQUE] == row).all(axis=1).sum())
        key = ", ".join(f"{c}={_show(row[c])}" for c in _UNIQUE)
        raise HwAwareError(
            f"cost table has {n} rows for the key ({key}); keep only one of them (e.g. drop the older profile)"
        )
    return df


def _keys_frame(keys: Iterable[BlockKey]) -> pd.DataFrame:
    keys = list(keys)
    for k in keys:
        if not isinstance(k, BlockKey):
            raise HwAwareError(f"expected BlockKey objects, got {type(k).__name__}: {k!r}")
    return pd.DataFrame({
        "block": pd.Series([k.block for k in keys], dtype=str),
        "input_shape": pd.Series([k.shape_str for k in keys], dtype=str),
        "out_channels": pd.Series([k.out_channels for k in keys], dtype="int64"),
        "stride": pd.Series([k.stride for k in keys], dtype="int64"),
    })  # fmt: skip


def _require_pyarrow() -> None:
    try:
        import pyarrow  # noqa: F401
    except ImportError:
        raise HwAwareError("Parquet cost tables need pyarrow: pip install pyarrow (or use a .csv path)") from None


class CostTable:
    """A validated, immutable hardware cost table (see the module docstring for the schema)."""

    def __init__(self, frame: pd.DataFrame) -> None:
        self._frame = _normalise(frame)

    @classmethod
    def _trusted(cls, frame: pd.DataFrame) -> CostTable:
        """Wrap a frame derived from an already-validated table without re-validating."""
        table = cls.__new__(cls)
        table._frame = frame.reset_index(drop=True)
        return table

    @classmethod
    def from_records(cls, records: Iterable[dict]) -> CostTable:
        """Build a table from row dicts (one per profiled block); no records -> an empty table."""
        rows = list(records)
        return cls(pd.DataFrame(rows) if rows else pd.DataFrame(columns=list(COLUMNS)))

    @classmethod
    def concat(cls, tables: Iterable[CostTable]) -> CostTable:
        """All rows of ``tables`` in one table; a key present twice is an error naming it."""
        tables = list(tables)
        for t in tables:
            if not isinstance(t, CostTable):
                raise HwAwareError(f"can only merge CostTable objects, got {type(t).__name__}")
        if not tables:
            return cls.from_records([])
        return cls(pd.concat([t._frame for t in tables], ignore_index=True))

    def merge(self, *others: CostTable) -> CostTable:
        """A new table with the rows of this table and ``others`` (e.g. other chips)."""
        return CostTable.concat([self, *others])

    @property
    def frame(self) -> pd.DataFrame:
        """A copy of the rows, columns in schema order (extra columns last)."""
        return self._frame.copy()

    def __len__(self) -> int:
        return len(self._frame)

    def __repr__(self) -> str:
        return f"CostTable({len(self)} rows, chips={self.chips()}, backends={self.backends()})"

    # -- files ---------------------------------------------------------------------------
    def save(self, path: str | os.PathLike[str]) -> Path:
        """Write atomically: CSV, or Parquet when the suffix is ``.parquet``; returns the path.

        The rows go to a temporary file next to ``path`` which then replaces it, so a
        reader never sees a half-written table and a failure leaves ``path`` untouched.
        """
        path = Path(path)
        parquet = path.suffix.lower() == ".parquet"
        if parquet:
            _require_pyarrow()
        with atomic_open(path, "wb") as fh:
            if parquet:
                self._frame.to_parquet(fh, engine="pyarrow", index=False)
            else:
                self._frame.to_csv(fh, index=False, encoding="utf-8")
        return path

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> CostTable:
        """Read a table written by :meth:`save` (CSV, or Parquet for ``.parquet``) and validate it."""
        path = Path(path)
        if not path.is_file():
            raise HwAwareError(f"cost table file {str(path)!r} does not exist; profile the search space first or fix the path")
        try:
            if path.suffix.lower() == ".parquet":
                _require_pyarrow()
                frame = pd.read_parquet(path, engine="pyarrow")
            else:
                frame = pd.read_csv(
                    path, dtype={c: str for c in _STR}, keep_default_na=False,
                    na_values={c: ["", "nan", "NaN", "NA"] for c in _INT + _FLOAT},
                    float_precision="round_trip",
                )  # fmt: skip
        except HwAwareError:
            raise
        except (ValueError, OSError) as exc:
            raise HwAwareError(f"cannot read cost table {str(path)!r}: {exc}".replace("\n", " ")) from None
        try:
            return cls(frame)
        except HwAwareError as exc:
            raise HwAwareError(f"{path}: {exc}") from None

    # -- queries -------------------------------------------------------------------------
    def chips(self) -> list[str]:
        """The chips in the table, sorted."""
        return sorted(self._frame["chip"].unique().tolist())

    def backends(self) -> list[str]:
        """The backends in the table, sorted."""
        return sorted(self._frame["backend"].unique().tolist())

    def batch_sizes(self, chip: str | None = None) -> list[int]:
        """The batch sizes in the table (on ``chip`` if given), sorted."""
        frame = self.select(chip=chip)._frame
        return sorted(int(v) for v in frame["batch_size"].unique())

    def select(self, chip: str | None = None, backend: str | None = None,
               batch_size: int | None = None, threads: int | None = None) -> CostTable:  # fmt: skip
        """The rows matching every given value; a value not in the table raises, listing those present."""
        df, where = self._frame, []
        for col, value in (("chip", chip), ("backend", backend), ("batch_size", batch_size), ("threads", threads)):
            if value is None:
                continue
            present = sorted(df[col].unique().tolist())
            if value not in present:
                scope = f" with {', '.join(where)}" if where else ""
                raise HwAwareError(
                    f"cost table has no rows for {col}={value!r}{scope}; present: "
                    f"{', '.join(map(repr, present)) or 'none'} (profile it first, or pick one of these)"
                )
            df = df[df[col] == value]
            where.append(f"{col}={value!r}")
        return CostTable._trusted(df)

    def lookup(self, key: BlockKey, *, chip: str, backend: str, batch_size: int) -> pd.Series:
        """The one row for ``key`` on ``chip``/``backend``/``batch_size``; absent -> HwAwareError."""
        return self.lookup_many([key], chip=chip, backend=backend, batch_size=batch_size).iloc[0]

    def lookup_many(self, keys: Iterable[BlockKey], *, chip: str, backend: str,
                    batch_size: int) -> pd.DataFrame:  # fmt: skip
        """One row per key, in the order of ``keys`` (repeats allowed), index 0..n-1.

        Raises :class:`HwAwareError` naming the first key without a row.
        """
        sub = self.select(chip=chip, backend=backend, batch_size=batch_size)._frame
        if sub["threads"].nunique() > 1:
            raise HwAwareError(f"cost table holds chip {chip!r} (backend {backend!r}, batch_size {batch_size}) at "
                               f"threads {sorted(int(t) for t in sub['threads'].unique())}; pick one with "
                               "table.select(threads=...)")
        want = _keys_frame(keys)
        got = want.merge(sub, on=_BLOCK, how="left", indicator=True, sort=False)
        absent = got["_merge"] == "left_only"
        if absent.any():
            k = want.iloc[int(absent.to_numpy().argmax())]
            raise HwAwareError(
                f"cost table has no row for block {k['block']!r} with input_shape {k['input_shape']}, "
                f"out_channels {k['out_channels']}, stride {k['stride']} on chip {chip!r} (backend "
                f"{backend!r}, batch_size {batch_size}; {int(absent.sum())} of {len(want)} keys missing); "
                "re-profile the search space on that chip"
            )
        return got.loc[:, list(sub.columns)].reset_index(drop=True)

    def compare_chips(self, keys: Sequence[BlockKey], *, backend: str, batch_size: int) -> pd.DataFrame:
        """Total cost of the network ``keys`` on each chip: pick the chip that suits the application.

        Returns one row per chip in the table, index ``chip``, columns:

        - ``latency_ms``: sum over ``keys`` (a key listed twice counts twice);
        - ``memory_mb``: sum of ``param_mb`` plus the largest ``activation_mb``, since the
          activations of consecutive blocks are not all alive at once (an estimate of peak memory);
        - ``flops``, ``params``: sums (nullable ``Int64``);
        - ``utilisation``: latency-weighted mean of the rows' ``utilisation``, i.e. the
          whole network's achieved fraction of the chip's peak;
        - ``missing``: how many of ``keys`` have no row on that chip. Chips with
          ``missing > 0`` are kept (totals NA) so a gap in profiling is visible; filter
          them with ``df[df.missing == 0]``.

        Sorted by ``missing``, then ``latency_ms``, then chip name. ``backend`` and
        ``batch_size`` must be present in the table.
        """
        want = _keys_frame(keys)
        if want.empty:
            raise HwAwareError("compare_chips needs at least one BlockKey")
        sub = self.select(backend=backend, batch_size=batch_size)._frame
        hits = want.merge(sub, on=_BLOCK, how="inner")
        hits["_weighted"] = hits["utilisation"] * hits["latency_ms"]
        agg = hits.groupby("chip").agg(
            found=("block", "size"), latency_ms=("latency_ms", "sum"), param_mb=("param_mb", "sum"),
            activation_mb=("activation_mb", "max"), flops=("flops", "sum"), params=("params", "sum"),
            weighted=("_weighted", "sum"),
        )  # fmt: skip
        agg = agg.astype({"flops": "Int64", "params": "Int64"}).reindex(pd.Index(self.chips(), name="chip"))
        out = pd.DataFrame(index=agg.index)
        missing = (len(want) - agg["found"].fillna(0)).astype("int64")
        complete = missing == 0
        out["latency_ms"] = agg["latency_ms"].where(complete)
        out["memory_mb"] = (agg["param_mb"] + agg["activation_mb"]).where(complete)
        out["flops"] = agg["flops"].where(complete)
        out["params"] = agg["params"].where(complete)
        out["utilisation"] = (agg["weighted"] / agg["latency_ms"]).where(complete)
        out["missing"] = missing
        out = out.reset_index().sort_values(["missing", "latency_ms", "chip"], na_position="last")
        return out.set_index("chip")
