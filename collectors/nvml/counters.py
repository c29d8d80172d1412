"""A GPU reading's error counters as ``series`` points, under dcgm-exporter's field names.

NVLink, PCIe-replay and ECC counters only ever grow until a reset, so what an incident needs from them is
that they grew: between two readings, two pasted outputs, two captures. Written as series (the same form
as the InfiniBand and NIC counters, class ``error``), one derivation
(workbench/ingest/derivations/counter_deltas.py) sees the growth of every counter of every source, and a
monitoring rule (rules/alerts.yaml) names the same series. Every GPU reader's samples pass through
HealthTracker.observe, which adds these points: NVML, every nvidia-smi form, DCGM, the bug report.
"""

from __future__ import annotations

from collectors.base import GpuSample, SeriesPoint

SAMPLE_COUNTERS = (("pcie_replay", "DCGM_FI_DEV_PCIE_REPLAY_COUNTER"),
                   ("ecc_volatile_corrected", "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL"),
                   ("ecc_volatile_uncorrected", "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL"),
                   ("ecc_aggregate_corrected", "DCGM_FI_DEV_ECC_SBE_AGG_TOTAL"),
                   ("ecc_aggregate_uncorrected", "DCGM_FI_DEV_ECC_DBE_AGG_TOTAL"))
"""gpu_sample column -> dcgm-exporter field."""

NVLINK_SERIES = {"replay": "DCGM_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL",
                 "recovery": "DCGM_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL",
                 "crc_flit": "DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL",
                 "crc": "DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL",
                 "crc_data": "DCGM_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_TOTAL",
                 "data_crc": "DCGM_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_TOTAL"}
"""NVLink counter (NVML's NVML_NVLINK_ERROR_DL_*, nvidia-smi nvlink -e's ``Replay/Recovery/CRC Errors``)
-> dcgm-exporter's per-GPU total (``CRC`` alone is the flit CRC, as nvidia-smi counts it)."""


def counter_points(sample: GpuSample) -> list[SeriesPoint]:
    """The reading's counters, each a point labelled with the GPU's key and ``class: error``; none for a
    reading without a time (a point needs one) or a counter the source did not report. NVLink counters are
    summed over links per kind; a kind no link reported is 0 once the links were read (GpuSample.extra
    keeps only the non-zero ones)."""
    if sample.ts is None:
        return []
    labels = {"gpu": sample.gpu, "class": "error"}
    points = [SeriesPoint(ts=sample.ts, name=name, value=float(value), host=sample.host, labels=dict(labels))
              for column, name in SAMPLE_COUNTERS if (value := getattr(sample, column)) is not None]
    if sample.nvlink_errors is not None:
        totals: dict[str, int] = {}
        for per_link in (sample.extra.get("nvlink_errors") or {}).values():
            for counter, value in (per_link or {}).items():
                if counter in NVLINK_SERIES and isinstance(value, int):
                    name = NVLINK_SERIES[counter]
                    totals[name] = totals.get(name, 0) + value
        for name in sorted(set(NVLINK_SERIES.values())):
            points.append(SeriesPoint(ts=sample.ts, name=name, value=float(totals.get(name, 0)), host=sample.host,
                                      labels=dict(labels)))
    return points
