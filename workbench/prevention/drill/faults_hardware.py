"""Hardware layer causes: the kernel's PCIe/Xid/SXid/MCE lines, the BMC's event log, GPU telemetry."""

# ruff: noqa: E501  (log lines are kept whole, as the tools print them)

from __future__ import annotations

from datetime import datetime, timedelta

from workbench.prevention.drill.registry import fault
from workbench.prevention.drill.serving import Service
from workbench.prevention.drill.signs import first_slow_step
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
    taken: list[datetime] = []

    def edit(when: datetime, row: dict[str, object]) -> None:
        if when >= d.fault:
            if d.first_sign is None:  # the rank logs are written by now: the first slow step or this sample
                stamp = when.replace(microsecond=(len(taken) * 37 + d.local) % 1000 * 1000)
                step = first_slow_step(d, d.rank, 0.296 * 1.05 * 1000)
                d.first_sign = min(stamp, step) if step else stamp
            row.update(temp=temp, power=power, clock=clock, **{reason: "Active"})
            if reason == "hw_thermal":
                row["sw_thermal"] = "Active"
        taken.append(when)
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
    d.first_sign = d.fault - timedelta(milliseconds=700)
    svc.kernel(d.culprit, d.fault - timedelta(milliseconds=700),
               f"pcieport 0000:{int(bus, 16) - 1:02x}:00.0: AER: Uncorrected (Fatal) error received: 0000:{bus}:00.0",
               f"nvidia 0000:{bus}:00.0: PCIe Bus Error: severity=Uncorrected (Fatal), type=Transaction Layer, (Receiver ID)",
               f"NVRM: Xid (PCI:0000:{bus}:00): 79, pid=0, GPU has fallen off the bus.",
               f"NVRM: GPU 0000:{bus}:00.0: GPU has fallen off the bus.")
    svc.engine_log(d.fault, "async_llm_engine.py:64] Engine background task failed",
                   "async_llm_engine.py:64] RuntimeError: CUDA error: unspecified launch failure",
                   "client.py:269] AsyncEngineDeadError: Background loop has errored already.")
    svc.replica_restarts(gone_s=3600)


def _engine_dies(svc: Service, error: str, *, gone_s: float = 150.0) -> None:
    """The victim's vLLM 0.6 engine loop dies of ``error`` at the fault and its container restarts."""
    svc.engine_log(svc.d.fault, "async_llm_engine.py:64] Engine background task failed", f"async_llm_engine.py:64] {error}",
                   "client.py:269] AsyncEngineDeadError: Background loop has errored already.")
    svc.replica_restarts(gone_s=gone_s)


def _aer_lines(bus: str, severity: str, kind: str, status: str, bit: str) -> list[str]:
    """One AER record of a GPU's link as the kernel prints it (the root port, then the device's lines)."""
    return [f"pcieport 0000:{int(bus, 16) - 1:02x}:00.0: AER: {severity} error received: 0000:{bus}:00.0",
            f"nvidia 0000:{bus}:00.0: PCIe Bus Error: severity={severity}, type={kind}",
            f"nvidia 0000:{bus}:00.0:   device [10de:2330] error status/mask={status}/00000000",
            f"nvidia 0000:{bus}:00.0:    {bit}"]


@fault("pcie_link_degraded", "inference")
def pcie_link_degraded_inference(svc: Service) -> None:
    """One replica's GPU link throws a burst of uncorrectable AER errors; a minute later its engine faults and restarts."""
    d = svc.d
    d.title = f"{svc.model}: 5xx errors, a replica restarted"
    d.place_gpu = True
    bus = d.buses[d.local]
    first = d.fault - timedelta(seconds=d.rng.randint(40, 90))
    for k in range(d.rng.randint(3, 6)):
        svc.kernel(d.culprit, first + timedelta(seconds=k * d.rng.randint(2, 9)),
                   *_aer_lines(bus, "Uncorrected (Non-Fatal)", "Transaction Layer, (Requester ID)", "00004000",
                               "[14] CmpltTO                (First)"))
    d.first_sign = first
    _engine_dies(svc, "RuntimeError: CUDA error: unspecified launch failure")


@fault("nvlink_error", "inference")
def nvlink_error_inference(svc: Service) -> None:
    """A fatal NVLink error (Xid 74) on one GPU of a tensor-parallel replica: its all-reduce fails and the engine dies."""
    d = svc.d
    d.title = f"{svc.model}: 5xx errors, a replica restarted"
    d.place_gpu = True
    svc.kernel(d.culprit, d.fault - timedelta(milliseconds=600),
               f"NVRM: Xid (PCI:0000:{d.buses[d.local]}:00): 74, pid='<unknown>', name=<unknown>, NVLink: fatal error detected on link {d.rng.randint(0, 17)}(0x0, 0x0, 0x10000, 0x0, 0x0, 0x0, 0x0)")
    d.first_sign = d.fault - timedelta(milliseconds=600)
    _engine_dies(svc, "RuntimeError: NCCL error: unhandled cuda error (run with NCCL_DEBUG=INFO for details), NCCL version 2.20.5")


@fault("row_remap_failure", "inference")
def row_remap_failure_inference(svc: Service) -> None:
    """An uncorrectable ECC error on a replica's GPU that has no spare rows left: the remap fails (Xid 64), the engine dies."""
    d = svc.d
    d.title = f"{svc.model}: 5xx errors, a replica restarted"
    d.place_gpu = True
    bus, when = d.buses[d.local], d.fault - timedelta(milliseconds=250)
    svc.kernel(d.culprit, when,
               f"NVRM: Xid (PCI:0000:{bus}:00): 94, pid={d.rng.randint(2000, 9000)}, name=python3, Contained: CE User Channel (0x9). RST: No, D-RST: No",
               f"NVRM: Xid (PCI:0000:{bus}:00): 64, pid='<unknown>', name=<unknown>, Row Remapper Error: (0x0000000000b2{d.rng.randint(0, 0xfff):03x}40) - All reserved rows for bank are remapped")
    d.first_sign = when
    _engine_dies(svc, "RuntimeError: CUDA error: uncorrectable ECC error encountered", gone_s=3600)


@fault("nvswitch_fault", "inference")
def nvswitch_fault_inference(svc: Service) -> None:
    """An NVSwitch of one node reports fatal SXids: its tensor-parallel replica loses NVLink between its GPUs and dies."""
    d = svc.d
    d.title = f"{svc.model}: 5xx errors, a replica down"
    when = d.fault - timedelta(milliseconds=500)
    for k in range(2):
        svc.kernel(d.culprit, when,
                   f"nvidia-nvswitch{k}: SXid (PCI:0000:{0x05 + k:02x}:00.0): 24007, Fatal, Link {d.rng.randint(0, 63)} sourcetrack timeout error (First)",
                   f"nvidia-nvswitch{k}: SXid (PCI:0000:{0x05 + k:02x}:00.0): 24007, Severity 1 Engine instance 0 Sub-engine instance 00")
    d.first_sign = when
    _engine_dies(svc, "RuntimeError: NCCL error: unhandled cuda error (run with NCCL_DEBUG=INFO for details), NCCL version 2.20.5",
                 gone_s=3600)


@fault("host_hardware_error", "inference")
def host_hardware_error_inference(svc: Service) -> None:
    """A node's memory reports an uncorrectable error (MCE/EDAC); the vLLM process on it is killed and restarts."""
    d = svc.d
    d.title = f"{svc.model}: 5xx errors, a replica restarted"
    mc, when = d.rng.randint(0, 7), d.fault - timedelta(milliseconds=300)
    svc.kernel(d.culprit, when, "mce: [Hardware Error]: Machine check events logged",
               f"EDAC skx MC{mc}: HANDLING MCE MEMORY ERROR",
               f"EDAC skx MC{mc}: CPU {d.rng.randint(0, 63)}: Machine Check Event: 0 Bank {d.rng.randint(5, 12)}: fc00010001010092",
               f"EDAC MC{mc}: 1 UE memory read error on CPU_SrcID#0_MC#{mc}_Chan#0_DIMM#0 (channel:0 slot:0 page:0x{d.rng.randint(0, 0xfffff):x} offset:0x0 grain:32 -  err_code:0x0000:0x0090)",
               f"Memory failure: 0x{d.rng.randint(0, 0xfffff):x}: Sending SIGBUS to python3:{d.rng.randint(2000, 9000)} due to hardware memory corruption")
    d.first_sign = when
    svc.replica_restarts()


@fault("psu_or_fan_failure", "inference")
def psu_or_fan_failure_inference(svc: Service) -> None:
    """A node's power supply fails (the BMC logs it) and the node powers off: its replica is gone, the node NotReady."""
    d = svc.d
    d.title = f"{svc.model}: latency up, a replica gone"
    when = d.fault - timedelta(seconds=d.rng.randint(2, 20))
    d.add(f"{d.culprit}/ipmitool-sel-elist.txt",
          f"   1 | {d.start - timedelta(days=3):%m/%d/%Y} | 04:10:22 | Power Unit Pwr Unit Status | Power off/down | Deasserted",
          f"   2 | {when:%m/%d/%Y} | {when:%H:%M:%S} | Power Supply PS{d.rng.randint(1, 4)} Status | Failure detected () | Asserted",
          f"   3 | {when:%m/%d/%Y} | {when + timedelta(seconds=2):%H:%M:%S} | Power Supply PS2 Status | Power Supply AC lost | Asserted")
    d.first_sign = when.replace(microsecond=0)
    svc.event(d.fault + timedelta(seconds=40), "NodeNotReady", f"Node {d.culprit} status is now: NodeNotReady", kind="Node",
              obj=d.culprit, node=d.culprit, typ="Normal", component="node-controller")
    svc.replica_gone()


def _samples(svc: Service, reason: str, temp: int, power: float, clock: int) -> None:
    """``nvidia-smi --query-gpu … -l 30`` on every node (the file training drills keep too): the
    culprit GPU clocks down from the fault on with ``reason`` active, busy; the victim's requests slow."""
    d = svc.d
    header = ("timestamp, index, pci.bus_id, utilization.gpu [%], temperature.gpu, power.draw [W], clocks.sm [MHz], "
              "clocks_throttle_reasons.sw_power_cap, clocks_throttle_reasons.hw_thermal_slowdown, "
              "clocks_throttle_reasons.sw_thermal_slowdown, clocks_throttle_reasons.hw_power_brake_slowdown")
    for h, node in enumerate(d.hosts):
        rows, when, k = [header], svc.t0 + timedelta(seconds=11 + h), 0
        while when < svc.t0 + timedelta(minutes=15):
            for i, bus in enumerate(d.buses):
                row: dict[str, object] = {"util": 92 - (k + i) % 5, "temp": 66 + (k * 3 + i + h) % 6,
                                          "power": 610.0 + (k * 7 + i * 3) % 23, "clock": 1980,
                                          "sw_power_cap": "Not Active", "hw_thermal": "Not Active",
                                          "sw_thermal": "Not Active", "hw_power_brake": "Not Active"}
                if node == d.culprit and i == d.local and when >= d.fault:
                    if d.first_sign is None:  # the first throttled sample, at the stamp it is written with
                        d.first_sign = when.replace(microsecond=(k * 37 + i) % 1000 * 1000)
                    row.update(util=99, temp=temp, power=power, clock=clock, **{reason: "Active"})
                    if reason == "hw_thermal":
                        row["sw_thermal"] = "Active"
                rows.append(f"{when:%Y/%m/%d %H:%M:%S}.{(k * 37 + i) % 1000:03d}, {i}, 00000000:{bus.upper()}:00.0, "
                            f"{row['util']} %, {row['temp']}, {row['power']:.2f} W, {row['clock']} MHz, {row['sw_power_cap']}, "
                            f"{row['hw_thermal']}, {row['sw_thermal']}, {row['hw_power_brake']}")
            when += timedelta(seconds=30)
            k += 1
        d.add(f"{node}/gpu-query.csv", *rows)
    slow = 1980 / clock

    def effect(p: int, t: datetime, s: dict[str, float]) -> None:
        if p == svc.victim and d.first_sign and t >= d.first_sign:  # the replica slows once its GPU clocks down
            s["latency"] = slow
            s["slow"] = max(s["slow"], 0.1)
            s["waiting"] += 20
    svc.effects.append(effect)


@fault("thermal_throttling", "inference")
def thermal_throttling_inference(svc: Service) -> None:
    """One replica's busy GPU runs hot and clocks down: the whole tensor-parallel replica slows with it."""
    svc.d.title = f"{svc.model}: latency up on one replica"
    svc.d.place_gpu = True
    _samples(svc, "hw_thermal", 92 + svc.d.rng.randint(0, 3), 498.2, 1350)


@fault("power_throttling", "inference")
def power_throttling_inference(svc: Service) -> None:
    """The platform's power brake holds one replica's busy GPU below its clocks: that replica slows."""
    svc.d.title = f"{svc.model}: latency up on one replica"
    svc.d.place_gpu = True
    _samples(svc, "hw_power_brake", 70, 288.5, 1065)
