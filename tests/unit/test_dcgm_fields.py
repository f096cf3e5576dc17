"""The one dcgm-exporter field catalog: no name twice, and every field anyone reads or writes is in it."""

from __future__ import annotations

import pytest

from app import dcgm_fields
from app.agent import exposition as agent_exposition
from app.predict import features
from app.sim.fleet import fieldsets, metrics


def test_no_name_id_or_4_6_name_appears_twice() -> None:
    names = [field.name for field in dcgm_fields.FIELDS]
    renamed = [field.renamed_in_4_6 for field in dcgm_fields.FIELDS if field.renamed_in_4_6]
    ids = [field.field_id for field in dcgm_fields.FIELDS if field.field_id is not None]
    assert len(set(names)) == len(names)
    assert len(set(ids)) == len(ids)
    # A 4.6 name must not be some other field's old name, or `OLD_NAME_OF` would read one field as another.
    assert len(set(names + renamed)) == len(names) + len(renamed)


@pytest.mark.parametrize(
    ("old", "new"),
    [
        ("XID_ERRORS", "XID_ERROR"),
        ("PCIE_REPLAY_COUNTER", "PCIE_REPLAY_TOTAL"),
        ("CORRECTABLE_REMAPPED_ROWS", "ROW_REMAP_CORRECTABLE_TOTAL"),
        ("ROW_REMAP_FAILURE", "ROW_REMAP_FAILED"),
        ("GPU_TEMP", "GPU_TEMP_CELSIUS"),
    ],
)
def test_the_renames_telemetry_md_names(old: str, new: str) -> None:
    assert dcgm_fields.RENAMED_IN_4_6["DCGM_FI_DEV_" + old] == "DCGM_FI_DEV_" + new
    assert dcgm_fields.OLD_NAME_OF["DCGM_FI_DEV_" + new] == "DCGM_FI_DEV_" + old
    field = dcgm_fields.BY_NAME["DCGM_FI_DEV_" + old].exported(dcgm_4_6=True)
    assert (field.name, field.renamed_in_4_6) == ("DCGM_FI_DEV_" + new, None)


def test_groups_are_catalog_fields_and_nest_as_the_counters_files_do() -> None:
    default = dcgm_fields.names(dcgm_fields.DEFAULT_COUNTERS)
    for group in (
        dcgm_fields.ECC,
        dcgm_fields.RETIRED_PAGES,
        dcgm_fields.NVLINK_ERRORS,
        dcgm_fields.VIOLATIONS,
    ):
        assert set(group) <= set(dcgm_fields.FIELDS)
        assert not dcgm_fields.names(group) & default, "the default file ships these lines commented out"
    assert default < dcgm_fields.names(dcgm_fields.DCP_COUNTERS) < dcgm_fields.names(dcgm_fields.FIELDS)
    assert default < dcgm_fields.names(dcgm_fields.EXTENDED_COUNTERS)


def _read_by_the_features() -> set[str]:
    groups = {name for group in features.FIELD_GROUPS.values() for name in group}
    equivalents = {name for pair in features.EQUIVALENT.values() for name in pair}
    sources = {name for fields in features.FEATURE_SOURCES.values() for name in fields}
    return {*features.SOURCE_METRICS, *features.VOLATILE_COUNTERS, *groups, *equivalents, *sources}


def _exposed_by_the_simulator() -> set[str]:
    sets = {name for fields in fieldsets.FIELD_SETS.values() if fields is not None for name in fields}
    rules = {name for name in metrics.RULE_FAMILIES if name.startswith("DCGM_")}
    return {*metrics.all_family_names(), *sets, *rules}


@pytest.mark.parametrize(
    ("user", "read"),
    [
        ("features", _read_by_the_features),
        ("agent", lambda: set(agent_exposition.series_names())),
        ("simulator", _exposed_by_the_simulator),
    ],
)
def test_every_field_a_user_reads_or_writes_is_in_the_catalog(user: str, read: object) -> None:
    assert callable(read)
    assert set(read()) <= set(dcgm_fields.BY_NAME), user


def test_the_predictor_accepts_exactly_the_catalogs_4_6_names_of_what_it_reads() -> None:
    assert dict(features.ALIASES) == {
        new: old for old, new in dcgm_fields.RENAMED_IN_4_6.items() if old in features.SOURCE_METRICS
    }
    assert set(features.ALIASES.values()) <= set(features.SOURCE_METRICS)
