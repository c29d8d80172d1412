"""Hardware layer causes: the kernel's PCIe/Xid/SXid/MCE lines, the BMC's event log, GPU telemetry."""

# ruff: noqa: E501  (log lines are kept whole, as the tools print them)

from __future__ import annotations

from datetime import datetime, timedelta

from workbench.prevention.drill.registry import fault
from workbench.prevention.drill.serving import Service
from workbench.prevention.drill.training import Job, uuid


def _aer(job: Job, when: datetime, severity: str, kind: str, status: str, bit: str) -> None:
    d = job.d
    bus = d.buses[d.local]
    port = f"0000:{int(bus, 16) - 1:02x}:00.0"
    what = {"Corrected": "Corrected", "Uncorrected (Non-Fatal)": "Uncorrected (Non-Fatal)",
            "Uncorrected (Fatal)": "Uncorrected (Fatal)"}[severity]
    job.dmesg(d.culprit, when, f"pcieport {port}: AER: {what} error received: 0000:{bus}:00.0",
              f"nvidia 0000:{bus}:00.0: PCIe Bus Error: severity={severity}, type={kind}",
              f"nvidia 0000:{bus}:00.0:   device [10de:2330] error status/mask={status}/00000000",
              f"nvidia 0000:{bus}:00.0:    {bit}")


@fault("gpu_fell_off_bus", "training")
def gpu_fell_off_bus_training(job: Job) -> None:
    """PCIe errors on one GPU's link, then the GPU falls off the bus (Xid 79): its rank dies, the others time out."""
    d = job.d
    d.title = f"Job {d.job} failed: collective timeouts on every rank"
    bus = d.buses[d.local]
    for k in range(d.rng.randint(1, 3)):
        early = d.fault - timedelta(seconds=d.rng.randint(60, 600) * (k + 1))
        d.first_sign = min(early, d.first_sign or early)  # the first non-fatal error before the fatal one
        _aer(job, early, "Uncorrected (Non-Fatal)",
             "Transaction Layer, (Requester ID)", "00004000", "[14] CmpltTO                (First)")
    _aer(job, d.fault, "Uncorrected (Fatal)", "Transaction Layer, (Receiver ID)", "00000020", "[ 5] SDES                   (First)")
    job.dmesg(d.culprit, d.fault + timedelta(microseconds=912), f"NVRM: GPU at PCI:0000:{bus}:00: {uuid(d, d.culprit, d.local)}",
              f"NVRM: Xid (PCI:0000:{bus}:00): 79, pid=0, GPU has fallen off the bus.",
              f"NVRM: GPU 0000:{bus}:00.0: GPU has fallen off the bus.")
    job.missing_gpu = True
    job.drain(d.culprit, d.fault + timedelta(minutes=4, seconds=d.rng.randint(0, 59)),
              f"NHC: GPU 0000:{bus}:00.0 missing (nvidia-smi: Unknown Error)")
    job.stop(d.fault)


@fault("pcie_link_degraded", "training")
def pcie_link_degraded_training(job: Job) -> None:
    """A GPU's PCIe link throws a burst of uncorrectable AER errors; the driver cannot recover and the rank's next access faults."""
    d = job.d
    d.title = f"Job {d.job} failed: a rank died"
    for k in range(d.rng.randint(3, 6)):
        _aer(job, d.fault + timedelta(seconds=k * d.rng.randint(2, 20)), "Uncorrected (Non-Fatal)",
             "Transaction Layer, (Requester ID)", "00004000", "[14] CmpltTO                (First)")
    job.stop(d.fault + timedelta(seconds=90))


@fault("nvlink_error", "training")
def nvlink_error_training(job: Job) -> None:
    """A fatal NVLink error (Xid 74) on one GPU: intra-node collectives fail and the job stalls."""
    d = job.d
    d.title = f"Job {d.job} hung: collective timeouts on every rank"
    link = d.rng.randint(0, 17)
    job.dmesg(d.culprit, d.fault, f"NVRM: Xid (PCI:0000:{d.buses[d.local]}:00): 74, pid='<unknown>', name=<unknown>, NVLink: fatal error detected on link {link}(0x0, 0x0, 0x10000, 0x0, 0x0, 0x0, 0x0)")
    job.stop(d.fault)


@fault("row_remap_failure", "training")
def row_remap_failure_training(job: Job) -> None:
    """An uncorrectable ECC error on a GPU with no spare rows left: the row remap fails (Xid 64)."""
    d = job.d
    d.title = f"Job {d.job} failed: a rank died"
    bus = d.buses[d.local]
    job.dmesg(d.culprit, d.fault, f"NVRM: Xid (PCI:0000:{bus}:00): 94, pid={d.pid(d.rank)}, name=python3, Contained: CE User Channel (0x9). RST: No, D-RST: No")
    job.dmesg(d.culprit, d.fault + timedelta(milliseconds=3),
              f"NVRM: Xid (PCI:0000:{bus}:00): 64, pid='<unknown>', name=<unknown>, Row Remapper Error: (0x0000000000b2{d.rng.randint(0, 0xfff):03x}40) - All reserved rows for bank are remapped")
    job.stop(d.fault)


@fault("nvswitch_fault", "training")
def nvswitch_fault_training(job: Job) -> None:
    """An NVSwitch reports fatal SXids: every GPU of the node loses its NVLink peers."""
    d = job.d
    d.title = f"Job {d.job} hung: collective timeouts on every rank"
    d.place_gpu = False
    for k in range(2):
        job.dmesg(d.culprit, d.fault + timedelta(milliseconds=k * 3),
                  f"nvidia-nvswitch{k}: SXid (PCI:0000:{0x05 + k:02x}:00.0): 24007, Fatal, Link {d.rng.randint(0, 63)} sourcetrack timeout error (First)",
                  f"nvidia-nvswitch{k}: SXid (PCI:0000:{0x05 + k:02x}:00.0): 24007, Severity 1 Engine instance 0 Sub-engine instance 00")
    job.stop(d.fault, dead={r for r in range(d.nranks) if d.host_of(r) == d.culprit})


def _throttle(job: Job, reason: str, temp: int, power: float, clock: int) -> None:
    d = job.d
    job.slow_from, job.slow_s = d.fault, 1.05 * 1980 / clock

    def edit(when: datetime, row: dict[str, object]) -> None:
        if when >= d.fault:
            row.update(temp=temp, power=power, clock=clock, **{reason: "Active"})
            if reason == "hw_thermal":
                row["sw_thermal"] = "Active"
    job.samples = edit
    job.state, job.exit_code = "TIMEOUT", "0:0"
    job.finish(d.fault + timedelta(hours=d.rng.randint(2, 4), minutes=d.rng.randint(0, 59)))
    d.add(f"slurm/job-{d.job}.err", f"slurmstepd: error: *** JOB {d.job} ON {d.hosts[0]} CANCELLED AT {job.end:%Y-%m-%dT%H:%M:%S} DUE TO TIME LIMIT ***")


@fault("thermal_throttling", "training")
def thermal_throttling_training(job: Job) -> None:
    """One busy GPU runs hot and clocks down: its rank paces every step and the job runs into its time limit."""
    job.d.title = f"Job {job.d.job} hit its time limit: steps slowed down"
    _throttle(job, "hw_thermal", 91 + job.d.rng.randint(0, 4), 521.33, 1410)


@fault("power_throttling", "training")
def power_throttling_training(job: Job) -> None:
    """The platform's power brake holds one busy GPU below its clocks: its rank paces every step."""
    job.d.title = f"Job {job.d.job} hit its time limit: steps slowed down"
    _throttle(job, "hw_power_brake", 71, 301.5, 1095)


@fault("psu_or_fan_failure", "training")
def psu_or_fan_failure_training(job: Job) -> None:
    """A power supply fails (the BMC logs it); the node loses power redundancy and its GPUs drop out."""
    d = job.d
    d.title = f"Job {d.job} failed: ranks lost"
    d.place_gpu = False
    when = d.fault - timedelta(seconds=d.rng.randint(2, 30))
    d.first_sign = when.replace(microsecond=0)  # the supply failing, as the SEL stamps it
    sel = [f"   1 | {d.start - timedelta(days=3):%m/%d/%Y} | 04:10:22 | Power Unit Pwr Unit Status | Power off/down | Deasserted",
           f"   2 | {when:%m/%d/%Y} | {when:%H:%M:%S} | Power Supply PS{d.rng.randint(1, 4)} Status | Failure detected () | Asserted",
           f"   3 | {when:%m/%d/%Y} | {when + timedelta(seconds=2):%H:%M:%S} | Power Supply PS2 Status | Power Supply AC lost | Asserted"]
    d.add(f"{d.culprit}/ipmitool-sel-elist.txt", *sel)
    job.stop(d.fault, dead={r for r in range(d.nranks) if d.host_of(r) == d.culprit})
    job.state = "NODE_FAIL"


@fault("host_hardware_error", "training")
def host_hardware_error_training(job: Job) -> None:
    """The host's memory reports an uncorrectable error (MCE/EDAC); the ranks on it crash."""
    d = job.d
    d.title = f"Job {d.job} failed: ranks lost"
    d.place_gpu = False
    mc = d.rng.randint(0, 7)
    job.dmesg(d.culprit, d.fault, "mce: [Hardware Error]: Machine check events logged",
              f"EDAC skx MC{mc}: HANDLING MCE MEMORY ERROR",
              f"EDAC skx MC{mc}: CPU {d.rng.randint(0, 63)}: Machine Check Event: 0 Bank {d.rng.randint(5, 12)}: fc00010001010092",
              f"EDAC MC{mc}: 1 UE memory read error on CPU_SrcID#0_MC#{mc}_Chan#0_DIMM#0 (channel:0 slot:0 page:0x{d.rng.randint(0, 0xfffff):x} offset:0x0 grain:32 -  err_code:0x0000:0x0090)")
    job.stop(d.fault, dead={r for r in range(d.nranks) if d.host_of(r) == d.culprit})


@fault("gpu_fell_off_bus", "inference")
def gpu_fell_off_bus_inference(svc: Service) -> None:
    """One replica's GPU falls off the bus (Xid 79): its engine dies and the pod cannot start again on that node."""
    d = svc.d
    d.title = f"{svc.model}: 5xx errors, a replica down"
    d.place_gpu = True
    bus = d.buses[d.local]
    svc.kernel(d.culprit, d.fault - timedelta(milliseconds=700),
               f"pcieport 0000:{int(bus, 16) - 1:02x}:00.0: AER: Uncorrected (Fatal) error received: 0000:{bus}:00.0",
               f"nvidia 0000:{bus}:00.0: PCIe Bus Error: severity=Uncorrected (Fatal), type=Transaction Layer, (Receiver ID)",
               f"NVRM: Xid (PCI:0000:{bus}:00): 79, pid=0, GPU has fallen off the bus.",
               f"NVRM: GPU 0000:{bus}:00.0: GPU has fallen off the bus.")
    svc.engine_log(d.fault, "async_llm_engine.py:64] Engine background task failed",
                   "async_llm_engine.py:64] RuntimeError: CUDA error: unspecified launch failure",
                   "client.py:269] AsyncEngineDeadError: Background loop has errored already.")
    svc.replica_restarts(gone_s=3600)
