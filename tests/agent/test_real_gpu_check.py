"""The real-GPU check script's comparison against `nvidia-smi -q -x`, exercised on canned XML."""

from __future__ import annotations

import xml.etree.ElementTree as ET

from app.agent.devices import discover_gpus
from app.agent.readings import GpuReader
from tests.agent.fake_pynvml import FakeNvml, make_gpu
from tests.gpu import check_real_gpu as check

TOLERANCES = check.Tolerances(temp_c=3, power_w=25, power_ratio=0.15, replay_growth=5)

SMI_R550 = """<?xml version="1.0" ?>
<nvidia_smi_log><driver_version>550.54.15</driver_version>
<gpu id="00000000:18:00.0">
  <product_name>NVIDIA H100 80GB HBM3</product_name>
  <uuid>GPU-00000000-aaaa-bbbb-cccc-000000000000</uuid>
  <ecc_errors>
    <volatile><sram_correctable>1</sram_correctable><sram_uncorrectable_parity>0</sram_uncorrectable_parity>
      <sram_uncorrectable_secded>0</sram_uncorrectable_secded><dram_correctable>{sbe_dram}</dram_correctable>
      <dram_uncorrectable>0</dram_uncorrectable></volatile>
    <aggregate><sram_correctable>1</sram_correctable><sram_uncorrectable_parity>0</sram_uncorrectable_parity>
      <sram_uncorrectable_secded>0</sram_uncorrectable_secded><dram_correctable>9</dram_correctable>
      <dram_uncorrectable>2</dram_uncorrectable></aggregate>
  </ecc_errors>
  <retired_pages><pending_retirement>N/A</pending_retirement></retired_pages>
  <remapped_rows><remapped_row_corr>3</remapped_row_corr><remapped_row_unc>1</remapped_row_unc>
    <remapped_row_pending>Yes</remapped_row_pending><remapped_row_failure>No</remapped_row_failure></remapped_rows>
  <temperature><gpu_temp>41 C</gpu_temp><memory_temp>{memory_temp}</memory_temp></temperature>
  <clocks_event_reasons><clocks_event_reason_gpu_idle>Active</clocks_event_reason_gpu_idle>
    <clocks_event_reason_sw_power_cap>Not Active</clocks_event_reason_sw_power_cap></clocks_event_reasons>
  <gpu_power_readings><power_draw>80.00 W</power_draw></gpu_power_readings>
  <pci><replay_counter>2</replay_counter></pci>
</gpu></nvidia_smi_log>"""


def agent_view() -> tuple[object, object]:
    gpu = make_gpu(0, power_mw=71_234, remapped_rows=(3, 1, 1, 0), pcie_replays=2, clocks_event_reasons=0x1)
    gpu.ecc = {(0, 0): 5, (1, 0): 0, (0, 1): 10, (1, 1): 2}
    nvml = FakeNvml([gpu])
    nvml.nvmlInit()
    found = discover_gpus(nvml)[0]
    return found, GpuReader(nvml).read(found)


def verdicts(xml: str) -> dict[str, str]:
    gpu, reading = agent_view()
    node = ET.fromstring(xml).find("gpu")
    assert node is not None
    rows = check.compare_gpu(gpu, reading, node, TOLERANCES)  # type: ignore[arg-type]
    return {row.quantity: row.verdict for row in rows}


def test_matching_readings_pass() -> None:
    found = verdicts(SMI_R550.format(sbe_dram=4, memory_temp="51 C"))

    assert "MISMATCH" not in found.values(), found
    assert found["uuid"] == found["pci_bus_id"] == found["DCGM_FI_DEV_ECC_SBE_VOL_TOTAL"] == "ok"
    assert found["DCGM_FI_DEV_POWER_USAGE"] == "ok"  # 71.2 W vs 80 W is inside 25 W
    assert found["DCGM_FI_DEV_RETIRED_PENDING"] == "skipped"  # N/A on a remapper GPU
    assert found["DCGM_FI_DEV_CLOCK_THROTTLE_REASONS"] == "info"


def test_a_differing_counter_is_a_mismatch() -> None:
    found = verdicts(SMI_R550.format(sbe_dram=7, memory_temp="80 C"))

    assert found["DCGM_FI_DEV_ECC_SBE_VOL_TOTAL"] == "MISMATCH"
    assert found["DCGM_FI_DEV_MEMORY_TEMP"] == "MISMATCH"


def test_old_driver_ecc_schema_is_understood() -> None:
    node = ET.fromstring(
        "<gpu><ecc_errors><volatile><single_bit><total>4</total></single_bit>"
        "<double_bit><total>1</total></double_bit></volatile></ecc_errors></gpu>"
    )

    assert check.ecc_totals(node, "volatile") == (4, 1)
    assert check.ecc_totals(node, "aggregate") == (None, None)
