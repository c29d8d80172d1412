"""``nvidia-smi -q`` text for the demo's nodes, in the layout of the 550-series driver.

Only what a responder reads off it is varied (identity, PCIe link, ECC, remapped rows, power,
clocks, utilization); the rest is the fixed boilerplate every real page carries.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime


@dataclass
class Gpu:
    """One GPU's readings at snapshot time."""

    index: int
    bus: str
    uuid: str
    serial: str
    util: int
    mem_used: int
    temp: int
    power: float
    replays: int = 0
    pcie_gen: int = 5
    pcie_width: int = 16
    ecc_corrected: int = 0
    pid: int | None = None


def page(gpus: list[Gpu], when: datetime, *, driver: str = "550.90.07", cuda: str = "12.4",
         missing: list[str] | None = None) -> str:
    """The whole ``nvidia-smi -q`` output; ``missing`` bus ids print nvidia-smi's handle error first."""
    lines = [f"Unable to determine the device handle for GPU {bus.upper()}: Unknown Error." for bus in missing or []]
    lines += ["", "==============NVSMI LOG==============", "",
              f"Timestamp                                 : {when:%a %b %d %H:%M:%S %Y}",
              f"Driver Version                            : {driver}",
              f"CUDA Version                              : {cuda}", "",
              f"Attached GPUs                             : {len(gpus) + len(missing or [])}"]
    for gpu in gpus:
        lines += _gpu(gpu, driver)
        lines.append("")
    return "\n".join(lines) + "\n"


def _kv(indent: int, key: str, value: object) -> str:
    return f"{' ' * indent}{key:<{42 - indent}}: {value}"


def _gpu(g: Gpu, driver: str) -> list[str]:
    bus_full = "0000" + g.bus
    state = "P0" if g.util > 10 else "P8"
    return [
        f"GPU {bus_full.upper()}",
        _kv(4, "Product Name", "NVIDIA H100 80GB HBM3"),
        _kv(4, "Product Brand", "NVIDIA"),
        _kv(4, "Product Architecture", "Hopper"),
        _kv(4, "Display Mode", "Disabled"),
        _kv(4, "Display Active", "Disabled"),
        _kv(4, "Persistence Mode", "Enabled"),
        _kv(4, "Addressing Mode", "None"),
        "    MIG Mode",
        _kv(8, "Current", "Disabled"),
        _kv(8, "Pending", "Disabled"),
        _kv(4, "Accounting Mode", "Disabled"),
        _kv(4, "Serial Number", g.serial),
        _kv(4, "GPU UUID", g.uuid),
        _kv(4, "Minor Number", g.index),
        _kv(4, "VBIOS Version", "96.00.99.00.01"),
        _kv(4, "MultiGPU Board", "No"),
        _kv(4, "Board ID", f"0x{int(g.bus.split(':')[1], 16) << 8:x}"),
        _kv(4, "GPU Part Number", "2330-885-A1"),
        _kv(4, "Module ID", g.index + 1),
        "    GPU Reset Status",
        _kv(8, "Reset Required", "No"),
        _kv(8, "Drain and Reset Recommended", "No"),
        _kv(4, "GSP Firmware Version", driver),
        "    PCI",
        _kv(8, "Bus", f"0x{g.bus.split(':')[1]}"),
        _kv(8, "Device", "0x00"),
        _kv(8, "Domain", "0x0000"),
        _kv(8, "Device Id", "0x233010DE"),
        _kv(8, "Bus Id", bus_full.upper()),
        _kv(8, "Sub System Id", "0x16C110DE"),
        "        GPU Link Info",
        "            PCIe Generation",
        _kv(16, "Max", 5),
        _kv(16, "Current", g.pcie_gen),
        _kv(16, "Device Current", g.pcie_gen),
        _kv(16, "Device Max", 5),
        _kv(16, "Host Max", 5),
        "            Link Width",
        _kv(16, "Max", "16x"),
        _kv(16, "Current", f"{g.pcie_width}x"),
        _kv(8, "Replays Since Reset", g.replays),
        _kv(8, "Replay Number Rollovers", 0),
        _kv(8, "Tx Throughput", f"{g.util * 1200} KB/s"),
        _kv(8, "Rx Throughput", f"{g.util * 1100} KB/s"),
        _kv(4, "Fan Speed", "N/A"),
        _kv(4, "Performance State", state),
        "    Clocks Event Reasons",
        _kv(8, "Idle", "Active" if state == "P8" else "Not Active"),
        _kv(8, "Applications Clocks Setting", "Not Active"),
        _kv(8, "SW Power Cap", "Not Active"),
        _kv(8, "HW Slowdown", "Not Active"),
        _kv(12, "HW Thermal Slowdown", "Not Active"),
        _kv(12, "HW Power Brake Slowdown", "Not Active"),
        _kv(8, "Sync Boost", "Not Active"),
        _kv(8, "SW Thermal Slowdown", "Not Active"),
        _kv(8, "Display Clock Setting", "Not Active"),
        "    FB Memory Usage",
        _kv(8, "Total", "81559 MiB"),
        _kv(8, "Reserved", "328 MiB"),
        _kv(8, "Used", f"{g.mem_used} MiB"),
        _kv(8, "Free", f"{81559 - 328 - g.mem_used} MiB"),
        _kv(4, "Compute Mode", "Default"),
        "    Utilization",
        _kv(8, "Gpu", f"{g.util} %"),
        _kv(8, "Memory", f"{g.util // 2} %"),
        _kv(8, "Encoder", "0 %"),
        _kv(8, "Decoder", "0 %"),
        "    ECC Mode",
        _kv(8, "Current", "Enabled"),
        _kv(8, "Pending", "Enabled"),
        "    ECC Errors",
        "        Volatile",
        _kv(12, "SRAM Correctable", 0),
        _kv(12, "SRAM Uncorrectable Parity", 0),
        _kv(12, "SRAM Uncorrectable SEC-DED", 0),
        _kv(12, "DRAM Correctable", g.ecc_corrected),
        _kv(12, "DRAM Uncorrectable", 0),
        "        Aggregate",
        _kv(12, "SRAM Correctable", 0),
        _kv(12, "SRAM Uncorrectable Parity", 0),
        _kv(12, "SRAM Uncorrectable SEC-DED", 0),
        _kv(12, "DRAM Correctable", g.ecc_corrected),
        _kv(12, "DRAM Uncorrectable", 0),
        _kv(12, "SRAM Threshold Exceeded", "No"),
        "    Retired Pages",
        _kv(8, "Single Bit ECC", "N/A"),
        _kv(8, "Double Bit ECC", "N/A"),
        _kv(8, "Pending Page Blacklist", "N/A"),
        "    Remapped Rows",
        _kv(8, "Correctable Error", 0),
        _kv(8, "Uncorrectable Error", 0),
        _kv(8, "Pending", "No"),
        _kv(8, "Remapping Failure Occurred", "No"),
        "    Temperature",
        _kv(8, "GPU Current Temp", f"{g.temp} C"),
        _kv(8, "GPU T.Limit Temp", "N/A"),
        _kv(8, "GPU Shutdown Temp", "92 C"),
        _kv(8, "GPU Slowdown Temp", "89 C"),
        _kv(8, "GPU Max Operating Temp", "87 C"),
        _kv(8, "Memory Current Temp", f"{g.temp + 6} C"),
        _kv(8, "Memory Max Operating Temp", "95 C"),
        "    GPU Power Readings",
        _kv(8, "Power Draw", f"{g.power:.2f} W"),
        _kv(8, "Current Power Limit", "700.00 W"),
        _kv(8, "Requested Power Limit", "700.00 W"),
        _kv(8, "Default Power Limit", "700.00 W"),
        _kv(8, "Min Power Limit", "200.00 W"),
        _kv(8, "Max Power Limit", "700.00 W"),
        "    Clocks",
        _kv(8, "Graphics", f"{1980 if state == 'P0' else 345} MHz"),
        _kv(8, "SM", f"{1980 if state == 'P0' else 345} MHz"),
        _kv(8, "Memory", f"{2619 if state == 'P0' else 1593} MHz"),
        _kv(8, "Video", f"{1545 if state == 'P0' else 765} MHz"),
        "    Max Clocks",
        _kv(8, "Graphics", "1980 MHz"),
        _kv(8, "SM", "1980 MHz"),
        _kv(8, "Memory", "2619 MHz"),
        _kv(8, "Video", "1545 MHz"),
        "    Fabric",
        _kv(8, "State", "Completed"),
        _kv(8, "Status", "Success"),
    ] + _processes(g)


def _processes(g: Gpu) -> list[str]:
    if g.pid is None:
        return ["    Processes                             : None"]
    return ["    Processes",
            _kv(8, "GPU instance ID", "N/A"),
            _kv(8, "Compute instance ID", "N/A"),
            _kv(8, "Process ID", g.pid),
            _kv(12, "Type", "C"),
            _kv(12, "Name", "/usr/bin/python3"),
            _kv(12, "Used GPU Memory", f"{g.mem_used - 512} MiB")]
