"""nni_hwaware.cost_table.table: schema validation, files, merging and queries."""

from __future__ import annotations

import importlib.util
import math
import os
from pathlib import Path

import pandas as pd
import pytest

from nni_hwaware.cost_table.table import (
    COLUMNS,
    KEY_COLUMNS,
    MEASURE_COLUMNS,
    META_COLUMNS,
    BlockKey,
    CostTable,
)
from nni_hwaware.errors import HwAwareError

STEM = BlockKey("stem", (3, 32, 32), 16, 1)
CONV = BlockKey("conv3x3", (16, 32, 32), 32, 2)
HEAD = BlockKey("head", (32, 16, 16), 10, 1)
PEAK = {"chipA": 1e12, "chipB": 2e12, "chipC": 1e12}


def record(key: BlockKey, chip: str, latency_ms: float, utilisation: float, param_mb: float,
           activation_mb: float, **overrides: object) -> dict[str, object]:
    """A consistent row: flops is derived from latency, utilisation and the chip's peak."""
    flops = utilisation * latency_ms / 1000 * PEAK[chip]
    assert flops == int(flops)
    row: dict[str, object] = {
        "block": key.block, "kind": "candidate" if key is CONV else "fixed",
        "input_shape": key.shape_str, "out_channels": key.out_channels, "stride": key.stride,
        "chip": chip, "backend": "torch", "batch_size": 1,
        "latency_ms": latency_ms, "latency_std_ms": latency_ms / 8, "latency_cv": 0.125,
        "runs": 50, "param_mb": param_mb, "activation_mb": activation_mb,
        "memory_mb": param_mb + activation_mb, "flops": int(flops),
        "params": int(param_mb * 2**20 / 4), "peak_flops": PEAK[chip], "utilisation": utilisation,
        "torch_version": "2.14.1", "threads": 4, "profiled_at": "2026-05-09", "device": "cpu",
        "providers": "",
    }
    row.update(overrides)
    return row


def chip_a() -> list[dict[str, object]]:
    return [
        record(STEM, "chipA", 0.5, 0.25, 0.25, 1.0),
        record(CONV, "chipA", 1.0, 0.5, 0.5, 2.0),
        record(HEAD, "chipA", 0.25, 0.125, 0.125, 0.5),
    ]


def chip_b() -> list[dict[str, object]]:
    return [
        record(STEM, "chipB", 0.25, 0.25, 0.25, 1.0),
        record(CONV, "chipB", 0.5, 0.5, 0.5, 1.5),
        record(HEAD, "chipB", 0.5, 0.03125, 0.125, 0.5),
    ]


@pytest.fixture
def table() -> CostTable:
    return CostTable.from_records(chip_a()).merge(
        CostTable.from_records(chip_b()), CostTable.from_records([record(STEM, "chipC", 2.0, 0.5, 0.25, 1.0)])
    )


def error(func, *args, **kwargs) -> str:  # type: ignore[no-untyped-def]
    with pytest.raises(HwAwareError) as info:
        func(*args, **kwargs)
    message = str(info.value)
    assert "\n" not in message
    return message


# -- schema and construction -------------------------------------------------------------
def test_columns_are_the_documented_schema() -> None:
    assert COLUMNS == KEY_COLUMNS + MEASURE_COLUMNS + META_COLUMNS
    assert len(set(COLUMNS)) == len(COLUMNS) == 24
    assert KEY_COLUMNS == ("block", "kind", "input_shape", "out_channels", "stride", "chip",
                           "backend", "batch_size")


def test_block_key_shape_helpers() -> None:
    assert CONV.shape_str == "16x32x32"
    assert BlockKey.parse_shape("64x32x32") == (64, 32, 32)
    assert BlockKey("b", [8, 4, 4], 8, 1).input_shape == (8, 4, 4)  # type: ignore[arg-type]
    assert "'64x32'" in error(BlockKey.parse_shape, "64x32")
    assert "input_shape" in error(BlockKey, "b", (0, 4, 4), 8, 1)
    assert "stride" in error(BlockKey, "b", (8, 4, 4), 8, 0)


def test_constructor_normalises_dtypes_and_order(table: CostTable) -> None:
    frame = table.frame
    assert tuple(frame.columns) == COLUMNS
    assert len(table) == 7
    for col in ("out_channels", "stride", "batch_size", "runs", "flops", "params", "threads"):
        assert frame[col].dtype == "int64", col
    for col in ("latency_ms", "param_mb", "peak_flops", "utilisation"):
        assert frame[col].dtype == "float64", col
    assert list(frame.index) == list(range(7))
    # ints given as floats and numbers given as strings are normalised, not rejected
    rows = chip_a()
    rows[0]["flops"] = 125_000_000.0
    rows[0]["latency_ms"] = "0.5"
    loose = CostTable.from_records(rows).frame
    assert loose.loc[0, "flops"] == 125_000_000 and loose["flops"].dtype == "int64"
    assert loose.loc[0, "latency_ms"] == 0.5


def test_frame_is_a_copy(table: CostTable) -> None:
    frame = table.frame
    frame.loc[0, "latency_ms"] = 99.0
    assert table.frame.loc[0, "latency_ms"] == 0.5


def test_extra_columns_are_kept_last() -> None:
    rows = [dict(r, note="x") for r in chip_a()]
    assert list(CostTable.from_records(rows).frame.columns) == [*COLUMNS, "note"]


def test_empty_table() -> None:
    empty = CostTable.from_records([])
    assert len(empty) == 0 and empty.chips() == []
    assert len(CostTable.concat([])) == 0


def test_missing_columns_are_listed() -> None:
    frame = pd.DataFrame(chip_a()).drop(columns=["flops", "providers"])
    message = error(CostTable, frame)
    assert "missing column(s) flops, providers;" in message


@pytest.mark.parametrize(
    ("column", "value", "expected"),
    [
        ("latency_ms", float("nan"), "column 'latency_ms' is empty (NaN) but must be a finite number"),
        ("latency_ms", 0.0, "column 'latency_ms' is 0.0 but must be > 0"),
        ("latency_ms", -1.5, "column 'latency_ms' is -1.5 but must be > 0"),
        ("latency_std_ms", float("nan"), "column 'latency_std_ms' is empty (NaN) but must be a finite number"),
        ("utilisation", None, "column 'utilisation' is empty (NaN) but must be a finite number"),
        ("peak_flops", float("inf"), "column 'peak_flops' is inf but must be a finite number"),
        ("flops", -1, "column 'flops' is -1 but must be >= 0"),
        ("params", -3, "column 'params' is -3 but must be >= 0"),
        ("memory_mb", -0.5, "column 'memory_mb' is -0.5 but must be >= 0"),
        ("activation_mb", -0.5, "column 'activation_mb' is -0.5 but must be >= 0"),
        ("runs", 2.5, "column 'runs' is 2.5 but must be an integer"),
        ("runs", "many", "column 'runs' is 'many' but must be a finite number"),
        ("kind", "searchable", "column 'kind' is 'searchable' but must be 'candidate' or 'fixed'"),
        ("input_shape", "16x32", "column 'input_shape' is '16x32' but must be 'CxHxW'"),
        ("chip", "", "column 'chip' is '' but must be a non-empty string"),
        ("providers", None, "column 'providers' is empty (NaN) but must be a string"),
    ],
)
def test_bad_values_name_the_row_and_column(column: str, value: object, expected: str) -> None:
    rows = chip_a()
    rows[1][column] = value
    message = error(CostTable.from_records, rows)
    chip = "''" if column == "chip" else "'chipA'"
    shape = "16x32" if column == "input_shape" else "16x32x32"
    assert message.startswith(f"cost table row 1 (block 'conv3x3', input_shape {shape}, chip {chip}): ")
    assert expected in message


def test_several_bad_rows_are_counted() -> None:
    rows = chip_a()
    for row in rows:
        row["latency_ms"] = 0.0
    message = error(CostTable.from_records, rows)
    assert message.startswith("cost table row 0 (block 'stem', input_shape 3x32x32, chip 'chipA') "
                              "(and 2 more rows): column 'latency_ms' is 0.0 but must be > 0; ")


def test_duplicate_keys_are_rejected_naming_the_key() -> None:
    # same key (threads are part of it) with a different kind and different measurements is still a duplicate
    rows = [*chip_a(), record(CONV, "chipA", 2.0, 0.5, 0.5, 2.0, kind="fixed")]
    message = error(CostTable.from_records, rows)
    assert message == (
        "cost table has 2 rows for the key (block='conv3x3', input_shape='16x32x32', "
        "out_channels=32, stride=2, chip='chipA', backend='torch', batch_size=1, threads=4); "
        "keep only one of them (e.g. drop the older profile)"
    )


# -- merging -----------------------------------------------------------------------------
def test_merge_two_chips() -> None:
    a, b = CostTable.from_records(chip_a()), CostTable.from_records(chip_b())
    merged = a.merge(b)
    assert len(merged) == 6 and merged.chips() == ["chipA", "chipB"]
    expected = pd.concat([a.frame, b.frame], ignore_index=True)
    pd.testing.assert_frame_equal(merged.frame, expected)
    pd.testing.assert_frame_equal(CostTable.concat([a, b]).frame, expected)
    assert len(a) == 3  # merge returns a new table


def test_merge_duplicate_is_rejected() -> None:
    a = CostTable.from_records(chip_a())
    message = error(a.merge, CostTable.from_records(chip_a()[2:]))
    assert "2 rows for the key (block='head', input_shape='32x16x16'" in message
    assert "can only merge CostTable" in error(CostTable.concat, [a, pd.DataFrame()])


# -- files -------------------------------------------------------------------------------
def test_csv_round_trip(tmp_path: Path) -> None:
    rows = chip_a()
    rows[0]["latency_ms"] = 0.1 + 0.2  # not exactly representable in short decimal
    rows[0]["providers"] = "CPUExecutionProvider"
    t = CostTable.from_records([*rows, *chip_b()])
    path = t.save(tmp_path / "sub" / "costs.csv")
    assert path == tmp_path / "sub" / "costs.csv"
    loaded = CostTable.load(path)
    pd.testing.assert_frame_equal(loaded.frame, t.frame)
    assert loaded.frame.loc[1, "providers"] == ""
    assert loaded.frame.loc[0, "latency_ms"] == 0.1 + 0.2
    assert os.listdir(tmp_path / "sub") == ["costs.csv"]


def test_parquet_round_trip(table: CostTable, tmp_path: Path) -> None:
    if importlib.util.find_spec("pyarrow") is None:
        assert "pip install pyarrow" in error(table.save, tmp_path / "costs.parquet")
        assert not list(tmp_path.iterdir())
        pytest.skip("pyarrow is not installed")
    path = table.save(tmp_path / "costs.parquet")
    pd.testing.assert_frame_equal(CostTable.load(path).frame, table.frame)


def test_save_is_atomic(table: CostTable, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "costs.csv"

    def broken_to_csv(self: pd.DataFrame, fh: object, **kwargs: object) -> None:
        fh.write(b"block,kind\nhalf")  # type: ignore[attr-defined]
        raise OSError("disk full")

    monkeypatch.setattr(pd.DataFrame, "to_csv", broken_to_csv)
    with pytest.raises(OSError, match="disk full"):
        table.save(path)
    assert list(tmp_path.iterdir()) == []  # no target, no temp file

    path.write_text("previous\n")
    with pytest.raises(OSError, match="disk full"):
        table.save(path)
    assert path.read_text() == "previous\n"
    assert list(tmp_path.iterdir()) == [path]


def test_load_errors(tmp_path: Path) -> None:
    missing = tmp_path / "nope.csv"
    assert f"cost table file '{missing}' does not exist" in error(CostTable.load, missing)
    bad = tmp_path / "bad.csv"
    pd.DataFrame(chip_a()).drop(columns=["runs"]).to_csv(bad, index=False)
    message = error(CostTable.load, bad)
    assert message.startswith(f"{bad}: cost table is missing column(s) runs;")
    nan = tmp_path / "nan.csv"
    frame = pd.DataFrame(chip_a())
    frame.loc[2, "latency_ms"] = float("nan")
    frame.to_csv(nan, index=False)
    assert "row 2 (block 'head', input_shape 32x16x16, chip 'chipA'): column 'latency_ms' is empty (NaN)" in error(
        CostTable.load, nan
    )
    empty = tmp_path / "empty.csv"
    empty.write_text("")
    assert f"cannot read cost table '{empty}'" in error(CostTable.load, empty)


# -- queries -----------------------------------------------------------------------------
def test_chips_backends_batch_sizes(table: CostTable) -> None:
    more = CostTable.from_records([record(STEM, "chipA", 1.0, 0.25, 0.25, 1.0, batch_size=8,
                                          backend="onnxruntime", providers="CPUExecutionProvider")])
    t = table.merge(more)
    assert t.chips() == ["chipA", "chipB", "chipC"]
    assert t.backends() == ["onnxruntime", "torch"]
    assert t.batch_sizes() == [1, 8]
    assert t.batch_sizes(chip="chipB") == [1]
    assert "present: 'chipA', 'chipB', 'chipC'" in error(t.batch_sizes, chip="chipX")


def test_select(table: CostTable) -> None:
    sub = table.select(chip="chipB", backend="torch", batch_size=1)
    assert len(sub) == 3 and sub.chips() == ["chipB"]
    assert list(sub.frame.index) == [0, 1, 2]
    assert len(table.select()) == 7
    assert error(table.select, chip="chipX") == (
        "cost table has no rows for chip='chipX'; present: 'chipA', 'chipB', 'chipC' "
        "(profile it first, or pick one of these)"
    )
    assert "no rows for backend='onnxruntime' with chip='chipA'; present: 'torch'" in error(
        table.select, chip="chipA", backend="onnxruntime"
    )
    assert "no rows for batch_size=8; present: 1 " in error(table.select, batch_size=8)


def test_lookup(table: CostTable) -> None:
    row = table.lookup(CONV, chip="chipB", backend="torch", batch_size=1)
    assert isinstance(row, pd.Series)
    assert row["latency_ms"] == 0.5 and row["activation_mb"] == 1.5 and row["flops"] == 500_000_000
    assert row["chip"] == "chipB" and row["kind"] == "candidate"
    message = error(table.lookup, CONV, chip="chipC", backend="torch", batch_size=1)
    assert message == (
        "cost table has no row for block 'conv3x3' with input_shape 16x32x32, out_channels 32, "
        "stride 2 on chip 'chipC' (backend 'torch', batch_size 1; 1 of 1 keys missing); "
        "re-profile the search space on that chip"
    )
    assert "present: 'chipA', 'chipB', 'chipC'" in error(
        table.lookup, CONV, chip="chipZ", backend="torch", batch_size=1
    )


def test_lookup_many_keeps_key_order(table: CostTable) -> None:
    keys = [HEAD, STEM, CONV, CONV]
    rows = table.lookup_many(keys, chip="chipA", backend="torch", batch_size=1)
    assert list(rows["block"]) == ["head", "stem", "conv3x3", "conv3x3"]
    assert list(rows["latency_ms"]) == [0.25, 0.5, 1.0, 1.0]
    assert list(rows.index) == [0, 1, 2, 3]
    assert tuple(rows.columns) == COLUMNS
    assert rows["flops"].dtype == "int64"
    one = table.lookup(HEAD, chip="chipA", backend="torch", batch_size=1)
    pd.testing.assert_series_equal(rows.iloc[0], one)
    other_stride = BlockKey("conv3x3", (16, 32, 32), 32, 1)
    message = error(table.lookup_many, [STEM, other_stride, BlockKey("x", (1, 1, 1), 1, 1)],
                    chip="chipA", backend="torch", batch_size=1)
    assert message.startswith("cost table has no row for block 'conv3x3' with input_shape 16x32x32, "
                              "out_channels 32, stride 1 on chip 'chipA' (backend 'torch', "
                              "batch_size 1; 2 of 3 keys missing)")
    assert len(table.lookup_many([], chip="chipA", backend="torch", batch_size=1)) == 0


def test_compare_chips_totals(table: CostTable) -> None:
    result = table.compare_chips([STEM, CONV, HEAD], backend="torch", batch_size=1)
    assert list(result.index) == ["chipB", "chipA", "chipC"]
    assert result.index.name == "chip"
    assert list(result.columns) == ["latency_ms", "memory_mb", "flops", "params", "utilisation",
                                    "missing"]
    b, a = result.loc["chipB"], result.loc["chipA"]
    assert b["latency_ms"] == 0.25 + 0.5 + 0.5
    assert a["latency_ms"] == 0.5 + 1.0 + 0.25
    # params summed, plus only the largest activation
    assert b["memory_mb"] == (0.25 + 0.5 + 0.125) + 1.5
    assert a["memory_mb"] == (0.25 + 0.5 + 0.125) + 2.0
    assert a["flops"] == b["flops"] == 125_000_000 + 500_000_000 + 31_250_000
    assert a["params"] == (0.25 + 0.5 + 0.125) * 2**20 / 4
    # latency-weighted utilisation == total flops / (total latency * peak)
    assert b["utilisation"] == (0.25 * 0.25 + 0.5 * 0.5 + 0.03125 * 0.5) / 1.25
    assert a["utilisation"] == (0.25 * 0.5 + 0.5 * 1.0 + 0.125 * 0.25) / 1.75
    assert math.isclose(a["utilisation"], 656_250_000 / (1.75e-3 * 1e12))
    assert list(result["missing"]) == [0, 0, 2]
    assert result.loc["chipC"].isna().sum() == 5  # every total is NA when a key is missing


def test_compare_chips_counts_repeated_blocks(table: CostTable) -> None:
    result = table.compare_chips([STEM, CONV, CONV, HEAD], backend="torch", batch_size=1)
    assert result.loc["chipA", "latency_ms"] == 0.5 + 1.0 + 1.0 + 0.25
    assert result.loc["chipA", "memory_mb"] == (0.25 + 0.5 + 0.5 + 0.125) + 2.0
    assert list(result.index) == ["chipB", "chipA", "chipC"]
    assert list(result["missing"]) == [0, 0, 3]


def test_compare_chips_errors(table: CostTable) -> None:
    assert "at least one BlockKey" in error(table.compare_chips, [], backend="torch", batch_size=1)
    assert "present: 'torch'" in error(table.compare_chips, [STEM], backend="onnx", batch_size=1)
    only_stem = table.compare_chips([STEM], backend="torch", batch_size=1)
    assert list(only_stem.index) == ["chipB", "chipA", "chipC"]
    assert list(only_stem["missing"]) == [0, 0, 0]
