"""Which dcgm-exporter fields a fleet exposes, and under which names: the counter files real installs use.

dcgm-exporter exposes exactly the fields of its counters CSV, so what a predictor can read depends on the
file the fleet runs (NVIDIA/dcgm-exporter, etc/default-counters.csv and etc/dcp-metrics-included.csv):

- `default`: default-counters.csv as shipped. Clocks, temperatures, power and energy, PCIe replays,
  utilisation, the last XID, framebuffer, remapped rows and remap failure. ECC, retired pages, NVLink error
  counters and the throttle-violation counters are in the file but commented out.
- `dcp`: dcp-metrics-included.csv (what the GPU Operator's Helm chart mounts by default): `default` plus
  retired pages (SBE/DBE).
- `extended`: `default` with every error line the file ships commented out enabled (ECC, retired pages,
  the four NVLink error counters, power/thermal violation) — a careful operator's file.
- `full`: everything the simulator has (`extended` plus row-remap pending, clock throttle reasons, PCIe max
  link generation, the recovery action and the health collector's status): the classic simulator's set.
- partial sets, as installs that enabled some lines and not others: `default-ecc` (ECC on, NVLink off) and
  `default-nvlink-flit` (ECC and the flow-control CRC counter on; NVLink replay, recovery and data CRC off,
  as in the fleet of issue 12).

The groups and the DCGM 4.6 renames are the field catalog's (`app.dcgm_fields`), which the agent and the
predictor read too; a fleet on 4.6 names exposes the new names.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from app import dcgm_fields
from app.sim.fleet import metrics

DEFAULT_FIELDS = dcgm_fields.names(dcgm_fields.DEFAULT_COUNTERS)
ECC_FIELDS = dcgm_fields.names(dcgm_fields.ECC)
EXTENDED_FIELDS = dcgm_fields.names(dcgm_fields.EXTENDED_COUNTERS)
ALL_FIELDS = frozenset(metrics.all_family_names())

FIELD_SETS: Mapping[str, frozenset[str] | None] = {
    "full": None,
    "extended": EXTENDED_FIELDS,
    "dcp": dcgm_fields.names(dcgm_fields.DCP_COUNTERS),
    "default": DEFAULT_FIELDS,
    "default-ecc": DEFAULT_FIELDS | ECC_FIELDS,
    "default-nvlink-flit": DEFAULT_FIELDS | ECC_FIELDS | {dcgm_fields.NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL.name},
}
# The fields a drawn partial set may leave out (the default file's own fields are always there).
OPTIONAL_FIELDS: tuple[str, ...] = tuple(sorted(ALL_FIELDS - DEFAULT_FIELDS))


def exposed(fields: frozenset[str] | None, name: str) -> bool:
    """Whether a family (by its pre-4.6 name) is exposed; None exposes everything."""
    return fields is None or name in fields


def exported_name(name: str, *, dcgm_4_6: bool) -> str:
    """The family name an exporter on these names writes for a pre-4.6 field name."""
    return dcgm_fields.RENAMED_IN_4_6.get(name, name) if dcgm_4_6 else name


def missing_fields(fields: frozenset[str] | None, wanted: Iterable[str]) -> tuple[str, ...]:
    """Those of `wanted` (pre-4.6 names) that the set does not expose, in order."""
    return tuple(name for name in wanted if not exposed(fields, name))
