#!/usr/bin/env python3
"""Check the agent's NVML readings against `nvidia-smi -q -x` on a machine with real NVIDIA GPUs.

Run by hand (or by the device check), never by pytest:

    python tests/gpu/check_real_gpu.py [--show-metrics] [--events-s 2]

It reads every GPU once through the agent's own collector (app.agent.readings, the real `pynvml`), prints
those readings and the dcgm-exporter text the agent would serve, then runs `nvidia-smi -q -x` and compares
identity, temperatures, power, ECC totals, remapped rows, pending retirement and PCIe replays per GPU. It
prints a table and exits 1 on any mismatch beyond tolerance (2 when it cannot compare at all). Needs only
the agent package and nvidia-ml-py: it imports nothing that pulls in aiohttp, gRPC or pydantic.
"""

from __future__ import annotations

import argparse
import importlib.util
import queue
import shutil
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

if importlib.util.find_spec("app") is None:  # run from a checkout without installing the package
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from app.agent import exposition
from app.agent import nvml as nvml_port
from app.agent.devices import Gpu, discover_gpus
from app.agent.events import EventWatcher
from app.agent.model import Field, GpuEvent, GpuReading
from app.agent.readings import GpuReader

EXIT_OK, EXIT_MISMATCH, EXIT_CANNOT_COMPARE = 0, 1, 2

# nvidia-smi's clock-reason element suffixes and NVML's bit for each (report only: they change by the ms).
REASON_BITS = {
    "gpu_idle": 0x1,
    "applications_clocks_setting": 0x2,
    "sw_power_cap": 0x4,
    "hw_slowdown": 0x8,
    "sync_boost": 0x10,
    "sw_thermal_slowdown": 0x20,
    "hw_thermal_slowdown": 0x40,
    "hw_power_brake_slowdown": 0x80,
    "display_clock_setting": 0x100,
}


@dataclass(frozen=True)
class Row:
    gpu: int
    quantity: str
    agent: str
    smi: str
    verdict: str  # ok | MISMATCH | info | skipped


@dataclass(frozen=True)
class Tolerances:
    temp_c: float
    power_w: float
    power_ratio: float
    replay_growth: int


# --- nvidia-smi ---------------------------------------------------------------------------------------


def run_smi() -> ET.Element | None:
    binary = shutil.which("nvidia-smi")
    if binary is None:
        return None
    done = subprocess.run([binary, "-q", "-x"], capture_output=True, text=True, timeout=120, check=False)
    if done.returncode != 0:
        print(f"nvidia-smi -q -x failed ({done.returncode}): {done.stderr.strip()}")
        return None
    return ET.fromstring(done.stdout)


def text_at(node: ET.Element, *paths: str) -> str | None:
    """The first of the paths that exists and holds a value (not N/A)."""
    for path in paths:
        found = node.find(path)
        if found is not None and found.text and found.text.strip() not in {"N/A", "[N/A]", "Not Supported"}:
            return found.text.strip()
    return None


def number_at(node: ET.Element, *paths: str) -> float | None:
    text = text_at(node, *paths)
    if text is None:
        return None
    try:
        return float(text.split()[0])
    except ValueError:
        return None


def yes_no(node: ET.Element, path: str) -> int | None:
    text = text_at(node, path)
    return None if text is None else int(text.lower() == "yes")


def ecc_totals(gpu: ET.Element, scope: str) -> tuple[int | None, int | None]:
    """(corrected, uncorrected) summed over SRAM and DRAM (R5xx+ schema) or the old single/double-bit totals."""
    base = f"ecc_errors/{scope}"
    old_sbe = number_at(gpu, f"{base}/single_bit/total")
    old_dbe = number_at(gpu, f"{base}/double_bit/total")
    if old_sbe is not None or old_dbe is not None:
        return _int(old_sbe), _int(old_dbe)
    corrected = [number_at(gpu, f"{base}/sram_correctable"), number_at(gpu, f"{base}/dram_correctable")]
    uncorrected = [
        number_at(gpu, f"{base}/sram_uncorrectable"),
        number_at(gpu, f"{base}/sram_uncorrectable_parity"),
        number_at(gpu, f"{base}/sram_uncorrectable_secded"),
        number_at(gpu, f"{base}/dram_uncorrectable"),
    ]
    return _sum(corrected), _sum(uncorrected)


def _sum(values: Sequence[float | None]) -> int | None:
    present = [v for v in values if v is not None]
    return int(sum(present)) if present else None


def _int(value: float | None) -> int | None:
    return None if value is None else int(value)


def clock_reasons(gpu: ET.Element) -> int | None:
    for group, prefix in (
        ("clocks_event_reasons", "clocks_event_reason_"),
        ("clocks_throttle_reasons", "clocks_throttle_reason_"),
    ):
        node = gpu.find(group)
        if node is None:
            continue
        mask = 0
        for child in node:
            bit = REASON_BITS.get(child.tag.removeprefix(prefix))
            if bit and (child.text or "").strip() == "Active":
                mask |= bit
        return mask
    return None


# --- comparison ---------------------------------------------------------------------------------------


def compare_gpu(gpu: Gpu, reading: GpuReading | None, smi: ET.Element, tol: Tolerances) -> list[Row]:
    index = gpu.identity.index
    rows: list[Row] = []

    def add(quantity: str, agent: object, other: object, check: Callable[[], bool] | None) -> None:
        if agent is None or other is None:
            verdict = "skipped"
        elif check is None:
            verdict = "info"
        else:
            verdict = "ok" if check() else "MISMATCH"
        rows.append(Row(index, quantity, _show(agent), _show(other), verdict))

    identity = gpu.identity
    smi_bus = smi.get("id", "")
    add("uuid", identity.uuid, text_at(smi, "uuid"), lambda: identity.uuid == text_at(smi, "uuid"))
    add("pci_bus_id", identity.pci_bus_id, smi_bus, lambda: _bus(identity.pci_bus_id) == _bus(smi_bus))
    add(
        "model",
        identity.model,
        text_at(smi, "product_name"),
        lambda: identity.model == text_at(smi, "product_name"),
    )
    if reading is None:
        rows.append(Row(index, "readings", "GPU lost", "-", "MISMATCH"))
        return rows

    def close(field: Field, value: float | None, within: float) -> None:
        mine = reading.get(field)
        add(field.value, mine, value, lambda: abs(float(mine or 0) - float(value or 0)) <= within)

    def exact(field: Field, value: float | None) -> None:
        mine = reading.get(field)
        add(field.value, mine, value, lambda: int(mine or 0) == int(value or 0))

    close(Field.GPU_TEMP, number_at(smi, "temperature/gpu_temp"), tol.temp_c)
    close(Field.MEMORY_TEMP, number_at(smi, "temperature/memory_temp"), tol.temp_c)
    power = number_at(
        smi,
        "gpu_power_readings/power_draw",
        "gpu_power_readings/instant_power_draw",
        "gpu_power_readings/average_power_draw",
        "power_readings/power_draw",
    )
    close(Field.POWER_USAGE, power, max(tol.power_w, tol.power_ratio * (power or 0)))
    vol_sbe, vol_dbe = ecc_totals(smi, "volatile")
    agg_sbe, agg_dbe = ecc_totals(smi, "aggregate")
    exact(Field.ECC_SBE_VOL_TOTAL, vol_sbe)
    exact(Field.ECC_DBE_VOL_TOTAL, vol_dbe)
    exact(Field.ECC_SBE_AGG_TOTAL, agg_sbe)
    exact(Field.ECC_DBE_AGG_TOTAL, agg_dbe)
    exact(Field.CORRECTABLE_REMAPPED_ROWS, number_at(smi, "remapped_rows/remapped_row_corr"))
    exact(Field.UNCORRECTABLE_REMAPPED_ROWS, number_at(smi, "remapped_rows/remapped_row_unc"))
    exact(Field.ROW_REMAP_PENDING, yes_no(smi, "remapped_rows/remapped_row_pending"))
    exact(Field.ROW_REMAP_FAILURE, yes_no(smi, "remapped_rows/remapped_row_failure"))
    exact(Field.RETIRED_PENDING, yes_no(smi, "retired_pages/pending_retirement"))
    replays = number_at(smi, "pci/replay_counter")
    mine = reading.get(Field.PCIE_REPLAY_COUNTER)
    # A counter: nvidia-smi reads after the agent, so it may only have grown.
    add(
        Field.PCIE_REPLAY_COUNTER.value,
        mine,
        replays,
        lambda: 0 <= int(replays or 0) - int(mine or 0) <= tol.replay_growth,
    )
    reasons = reading.get(Field.CLOCK_THROTTLE_REASONS)
    add(Field.CLOCK_THROTTLE_REASONS.value, _hex(reasons), _hex(clock_reasons(smi)), None)
    for field in (
        Field.NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL,
        Field.NVLINK_CRC_DATA_ERROR_COUNT_TOTAL,
        Field.NVLINK_REPLAY_ERROR_COUNT_TOTAL,
        Field.NVLINK_RECOVERY_ERROR_COUNT_TOTAL,
    ):
        add(field.value, reading.get(field), "(see nvidia-smi nvlink -e)", None)
    return rows


def _bus(bus_id: str) -> str:
    """nvidia-smi and NVML agree on 00000000:19:00.0, but be lenient on case and domain width."""
    domain, _, rest = bus_id.upper().partition(":")
    return f"{int(domain, 16):08X}:{rest}" if rest else bus_id.upper()


def _hex(value: float | None) -> str | None:
    return None if value is None else f"0x{int(value):x}"


def _show(value: object) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.3f}".rstrip("0").rstrip(".")
    return str(value)


def print_table(rows: Sequence[Row]) -> None:
    headers = ("gpu", "quantity", "agent (NVML)", "nvidia-smi", "verdict")
    cells = [(str(r.gpu), r.quantity, r.agent, r.smi, r.verdict) for r in rows]
    widths = [max(len(h), *(len(c[i]) for c in cells)) if cells else len(h) for i, h in enumerate(headers)]
    line = "  ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True))
    print(line)
    print("-" * len(line))
    for cell in cells:
        print("  ".join(c.ljust(w) for c, w in zip(cell, widths, strict=True)))


# --- the run ------------------------------------------------------------------------------------------


def watch_events(nvml: nvml_port.NvmlLibrary, gpus: Sequence[Gpu], seconds: float) -> None:
    """Register the agent's event mask on every GPU and listen briefly: proves registration works here."""
    received: queue.Queue[GpuEvent] = queue.Queue()
    watcher = EventWatcher(nvml, gpus, deliver=received.put, wait_ms=200)
    for item in watcher.start():
        status = f"error: {item.error}" if item.error else "ok"
        print(f"GPU {item.gpu}: NVML events registered mask=0x{item.mask:x} ({status})")
    time.sleep(seconds)
    watcher.stop()
    while not received.empty():
        print(f"event during the check: {received.get().message}")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--show-metrics", action="store_true", help="print the dcgm-exporter text too")
    parser.add_argument("--events-s", type=float, default=1.0, help="seconds to listen for NVML events")
    parser.add_argument("--temp-c", type=float, default=3.0, help="temperature tolerance (C)")
    parser.add_argument("--power-w", type=float, default=25.0, help="absolute power tolerance (W)")
    parser.add_argument("--power-ratio", type=float, default=0.15, help="relative power tolerance")
    parser.add_argument("--replay-growth", type=int, default=5, help="PCIe replays allowed between reads")
    args = parser.parse_args(argv)
    tol = Tolerances(args.temp_c, args.power_w, args.power_ratio, args.replay_growth)

    try:
        import pynvml  # noqa: PLC0415 - the point of this script is the real binding
    except ImportError:
        print("nvidia-ml-py (module pynvml) is not installed")
        return EXIT_CANNOT_COMPARE
    nvml: nvml_port.NvmlLibrary = pynvml
    try:
        driver = nvml_port.start_nvml(nvml)
        gpus = discover_gpus(nvml)
    except nvml_port.NvmlUnavailableError as exc:
        print(f"cannot start NVML: {exc}")
        return EXIT_CANNOT_COMPARE
    try:
        print(f"driver {driver}, {len(gpus)} GPU(s), nvidia-ml-py at {pynvml.__file__}")
        reader = GpuReader(nvml)
        readings: dict[int, GpuReading | None] = {}
        for gpu in gpus:
            try:
                readings[gpu.identity.index] = reader.read(gpu)
            except nvml_port.GpuLostError:
                readings[gpu.identity.index] = None
        smi = run_smi()
        for gpu in gpus:
            reading = readings[gpu.identity.index]
            shown = {f.value: v for f, v in reading.values.items()} if reading else "GPU lost"
            print(f"GPU {gpu.identity.index} {gpu.identity.uuid} {gpu.identity.model}: {shown}")
        if args.show_metrics:
            samples = tuple(
                exposition.GpuSample(gpu=g.identity, reading=readings[g.identity.index]) for g in gpus
            )
            print(exposition.render(exposition.Snapshot(samples, driver), hostname="check-real-gpu"))
        if args.events_s > 0:
            watch_events(nvml, gpus, args.events_s)
    finally:
        nvml_port.call_optional(nvml, nvml.nvmlShutdown)

    if smi is None:
        print("nvidia-smi is not available: nothing to compare against")
        return EXIT_CANNOT_COMPARE
    by_bus = {_bus(node.get("id", "")): node for node in smi.findall("gpu")}
    rows: list[Row] = []
    for gpu in gpus:
        node = by_bus.get(_bus(gpu.identity.pci_bus_id))
        if node is None:
            rows.append(
                Row(
                    gpu.identity.index, "pci_bus_id", gpu.identity.pci_bus_id, "not in nvidia-smi", "MISMATCH"
                )
            )
            continue
        rows.extend(compare_gpu(gpu, readings[gpu.identity.index], node, tol))
    if len(by_bus) != len(gpus):
        rows.append(Row(-1, "GPU count", str(len(gpus)), str(len(by_bus)), "MISMATCH"))
    print()
    print_table(rows)
    bad = [r for r in rows if r.verdict == "MISMATCH"]
    compared = [r for r in rows if r.verdict == "ok"]
    print(
        f"\n{len(compared)} matched, {len(bad)} mismatched, {len(rows) - len(compared) - len(bad)} info/skipped"
    )
    return EXIT_MISMATCH if bad else EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
