"""One bad item costs only itself: in a JSON, YAML or XML document or an archive, an item that cannot be
read is one counted skip (the artifact's ``skipped`` / ``skip_reasons``) or one refusal line, and every
other item is kept.

The documents are built from real samples of tests/corpus (INDEX.tsv): the ``kubectl describe`` events
of kubernetes#91600 as a ``kubectl get events -o json`` list, the pod states of gpu-operator#331 as a
``kubectl get pods -o json`` list, the vLLM metrics page of vllm#22227 as a ``query_range`` answer, the
``nvidia-smi -q -x`` of an RTX 4070 as a several-GPU document, corpus logs inside real zip and tar files.
Each test damages one item and compares with the same document without that item, so nothing is
hard-coded to the fixture. Before the fix each of them lost more than the one item (the rest of the
file, or the whole archive)."""

from __future__ import annotations

import copy
import io
import json
import re
import tarfile
import zipfile
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest

from collectors import k8s, nvidia_smi, prometheus, slurm
from collectors.base import Event, GpuInventory, ParseContext, SeriesPoint, Skipped
from collectors.prometheus import exposition
from tests.conftest import CORPUS
from workbench.ingest.session import FileResult, ingest_paths
from workbench.store.bundle import Bundle

MTIME = datetime(2020, 5, 30, 10, 0, tzinfo=timezone.utc)


def parse(module: Any, kind: str, text: str | bytes) -> list:
    data = text.encode() if isinstance(text, str) else text
    return list(module.parse(kind, io.BytesIO(data), ParseContext(host="capture-host", mtime=MTIME)))


def plain(rows: list) -> list[tuple]:
    """The rows that are not skips, as comparable values."""
    return [(type(r).__name__, repr(r)) for r in rows if not isinstance(r, Skipped)]


def skips(rows: list) -> list[str]:
    return [r.reason for r in rows if isinstance(r, Skipped)]


def ingest_one(tmp_path: Path, name: str, data: bytes) -> FileResult:
    """``data`` as a handed-over file through the real ingest; its one FileResult."""
    path = tmp_path / name
    path.write_bytes(data)
    with Bundle.create(tmp_path / f"{name}.duckdb") as bundle:
        (result,) = ingest_paths(bundle, [str(path)])
    return result


# ============================================================== kubectl get events -o json
_EVENT_ROW = re.compile(r"^\s+(?P<type>Normal|Warning)\s+(?P<reason>\S+)\s+"
                        r"(?P<age>\d+m(?: \(x(?P<count>\d+) over \S+\))?)"
                        r"\s+(?P<component>\w+), (?P<host>\S+)\s+(?P<message>.+)$")


def corpus_events() -> list[dict]:
    """The Events table of kubernetes#91600 as the v1 Event objects kubectl printed it from."""
    text = (CORPUS / "scheduler" / "k8s_91600_evicted_ephemeral_storage_events.txt").read_text()
    found = []
    for i, m in enumerate(_EVENT_ROW.match(line) for line in text.splitlines()):
        if m is None:
            continue
        found.append({"apiVersion": "v1", "kind": "Event", "type": m["type"], "reason": m["reason"],
                      "message": m["message"], "count": int(m["count"] or 1),
                      "source": {"component": m["component"], "host": m["host"]},
                      "involvedObject": {"kind": "Pod", "namespace": "kube-system", "name": "calico-node-x7k2p",
                                         "fieldPath": "spec.containers{calico-node}"},
                      "metadata": {"name": f"calico-node-x7k2p.{i:x}", "namespace": "kube-system"},
                      "firstTimestamp": "2020-05-30T09:42:00Z", "lastTimestamp": "2020-05-30T09:42:00Z"})
    assert len(found) == 4, "the corpus table changed"
    return found


def event_list(items: list) -> str:
    return json.dumps({"apiVersion": "v1", "kind": "List", "items": items, "metadata": {"resourceVersion": ""}},
                      indent=4)


def _drop(item: dict, *keys: str) -> dict:
    return {k: v for k, v in item.items() if k not in keys}


BAD_EVENTS = {
    "not an object": lambda e: "Evicted",
    "a null item": lambda e: None,
    "involvedObject a string": lambda e: e | {"involvedObject": "Pod/calico-node-x7k2p"},
    "lastTimestamp that does not parse": lambda e: _drop(e, "firstTimestamp") | {"lastTimestamp": "2020-05-31T25:61Z"},
    "lastTimestamp a number": lambda e: _drop(e, "firstTimestamp") | {"lastTimestamp": 1590831720},
    "count a string": lambda e: e | {"count": "two"},
    "source a list": lambda e: e | {"source": ["kubelet", "mgt04"]},
    "reason an object": lambda e: e | {"reason": {"text": "Evicted"}},
}


@pytest.mark.parametrize("bad", sorted(BAD_EVENTS))
def test_events_json_one_malformed_event_is_one_skip(bad, tmp_path):
    good = corpus_events() * 3  # 12 events, as from a busy node
    for n, item in enumerate(good):
        good[n] = copy.deepcopy(item) | {"metadata": {"name": f"calico-node-x7k2p.{n:x}"}}
    broken = copy.deepcopy(good)
    broken[5] = BAD_EVENTS[bad](broken[5])
    without = good[:5] + good[6:]
    rows = parse(k8s, "k8s_events_json", event_list(broken))
    assert plain(rows) == plain(parse(k8s, "k8s_events_json", event_list(without)))
    assert len(skips(rows)) == 1 and skips(rows)[0].startswith("malformed Kubernetes object")
    result = ingest_one(tmp_path, "events.json", event_list(broken).encode())
    assert (result.kind, result.events, result.skipped) == ("k8s_events_json", len(good) - 1, 1)
    assert sum(result.skip_reasons.values()) == 1


# ============================================================== kubectl get pods -o json
def corpus_pod(name: str) -> dict:
    """gpu-operator#331's container: waiting in CrashLoopBackOff, last terminated by OOMKilled."""
    text = (CORPUS / "scheduler" / "gpu-operator_331_crashloopbackoff_oomkilled.txt").read_text()
    state, reason, last, last_reason = (line.split(":", 1)[1].strip() for line in text.splitlines() if ":" in line)
    assert (state, last) == ("Waiting", "Terminated"), "the corpus sample changed"
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "gpu-operator"},
            "spec": {"nodeName": "ip-10-111-61-177.ec2.internal",
                     "containers": [{"name": "gpu-operator", "resources": {"limits": {"memory": "350Mi"}}}]},
            "status": {"phase": "Running", "containerStatuses": [{
                "name": "gpu-operator", "restartCount": 7,
                "state": {"waiting": {"reason": reason, "message": "back-off 5m0s restarting failed container"}},
                "lastState": {"terminated": {"reason": last_reason, "exitCode": 137,
                                             "startedAt": "2022-04-06T09:58:00Z",
                                             "finishedAt": "2022-04-06T10:01:02Z"}}}]}}


def _status(pod: dict, **status: Any) -> dict:
    pod = copy.deepcopy(pod)
    pod["status"]["containerStatuses"][0].update(status)
    return pod


BAD_PODS = {
    "status a string": lambda p: p | {"status": "Running"},
    "state a string": lambda p: _status(p, state="waiting"),
    "finishedAt that does not parse": lambda p: _status(p, lastState={"terminated": {
        "reason": "OOMKilled", "exitCode": 137, "finishedAt": "yesterday"}}),
    "exitCode a string": lambda p: _status(p, lastState={"terminated": {"reason": "OOMKilled", "exitCode": "137"}}),
    "containerStatuses a number": lambda p: p | {"status": {"containerStatuses": 1}},
    "nodeName an object": lambda p: p | {"spec": {"nodeName": {"name": "n1"}}},
}


@pytest.mark.parametrize("bad", sorted(BAD_PODS))
def test_pods_json_one_malformed_pod_is_one_skip(bad, tmp_path):
    good = [corpus_pod(f"gpu-operator-{n}") for n in range(6)]
    broken = copy.deepcopy(good)
    broken[2] = BAD_PODS[bad](broken[2])
    doc = {"apiVersion": "v1", "kind": "List", "items": broken}
    rows = parse(k8s, "k8s_pods_json", json.dumps(doc, indent=4))
    assert plain(rows) == plain(parse(k8s, "k8s_pods_json", json.dumps(doc | {"items": good[:2] + good[3:]})))
    assert len(skips(rows)) == 1
    result = ingest_one(tmp_path, "pods.json", json.dumps(doc, indent=4).encode())
    per_pod = len([r for r in parse(k8s, "k8s_pods_json", json.dumps(good[0])) if isinstance(r, Event)])
    assert per_pod == 2 and (result.events, result.skipped) == (per_pod * 5, 1)


def test_events_json_cut_at_the_deadline_keeps_the_complete_events(tmp_path):
    """kubectl killed at its deadline leaves a list that ends mid-event: the events before are kept."""
    good = corpus_events()
    text = event_list(good)
    cut = text[:text.index('"reason": "Evicted"')]  # inside the fourth event
    rows = parse(k8s, "k8s_events_json", cut)
    assert plain(rows) == plain(parse(k8s, "k8s_events_json", event_list(good[:3])))
    assert len(skips(rows)) == 1 and "cut short" in skips(rows)[0]


def test_events_json_damaged_item_in_the_middle_costs_only_that_item():
    good = corpus_events()
    text = event_list(good)
    start = text.index('"reason": "Started"')
    damaged = text[:start] + '"reason": "Started" "Started",' + text[start + len('"reason": "Started",'):]
    rows = parse(k8s, "k8s_events_json", damaged)
    assert plain(rows) == plain(parse(k8s, "k8s_events_json", event_list([good[0], *good[2:]])))
    assert len(skips(rows)) == 1


def test_watch_stream_of_events_with_one_damaged_object():
    """``kubectl get events --watch -o json`` prints one object after another, no list around them."""
    good = corpus_events()
    objects = [json.dumps(e, indent=4) for e in good]
    objects[1] = objects[1].replace('"kind": "Event"', '"kind": "Event" "Event"')
    rows = parse(k8s, "k8s_events_json", "\n".join(objects) + "\n")
    assert plain(rows) == plain(parse(k8s, "k8s_events_json", event_list([good[0], *good[2:]])))
    assert len(skips(rows)) == 1


def test_yaml_stream_with_one_broken_document():
    yaml = pytest.importorskip("yaml")
    pods = [corpus_pod(f"gpu-operator-{n}") for n in range(3)]
    parts = [yaml.safe_dump(p) for p in pods]
    broken = "---\n".join([parts[0], "metadata: [unclosed\n", parts[1], parts[2]])
    rows = parse(k8s, "k8s_yaml", broken)
    assert plain(rows) == plain(parse(k8s, "k8s_yaml", "---\n".join(parts)))
    assert len(skips(rows)) == 1


# ============================================================== Prometheus query_range
def corpus_matrix() -> dict:
    """vllm#22227's metrics page as the query_range answer for its series, two samples each."""
    text = (CORPUS / "latency" / "vllm_22227_request_decode_time_histogram_engine_label.prom").read_text()
    series = []
    for line in text.splitlines():
        if line.startswith("#") or not line.strip():
            continue
        name, labels, value, _ = exposition.parse_sample(line)
        series.append({"metric": {"__name__": name, **labels},
                       "values": [[1753900000, str(value)], [1753900015, str(value)]]})
    assert len(series) >= 5, "the corpus sample changed"
    return {"status": "success", "data": {"resultType": "matrix", "result": series}}


BAD_SERIES = {
    "not an object": lambda s: ["vllm:x", 1],
    "values a string": lambda s: s | {"values": "[[1753900000, 1]]"},
    "metric a list": lambda s: s | {"metric": ["__name__", "vllm:x"]},
}


@pytest.mark.parametrize("bad", sorted(BAD_SERIES))
def test_query_range_one_bad_series_is_one_skip(bad):
    doc = corpus_matrix()
    broken = copy.deepcopy(doc)
    broken["data"]["result"][2] = BAD_SERIES[bad](broken["data"]["result"][2])
    without = copy.deepcopy(doc)
    del without["data"]["result"][2]
    rows = parse(prometheus, "prom_api_json", json.dumps(broken))
    assert plain(rows) == plain(parse(prometheus, "prom_api_json", json.dumps(without)))
    assert len(skips(rows)) == 1


@pytest.mark.parametrize("bad", [["1753900015", "abc"], [10 ** 400, "1"], "1753900015", [1753900015]])
def test_query_range_one_bad_sample_is_one_skip(bad):
    doc = corpus_matrix()
    broken = copy.deepcopy(doc)
    broken["data"]["result"][1]["values"][1] = bad
    rows = parse(prometheus, "prom_api_json", json.dumps(broken))
    points = [r for r in parse(prometheus, "prom_api_json", json.dumps(doc)) if isinstance(r, SeriesPoint)]
    assert len([r for r in rows if isinstance(r, SeriesPoint)]) == len(points) - 1
    assert len(skips(rows)) == 1


def test_query_range_cut_short_keeps_the_complete_series():
    doc = corpus_matrix()
    text = json.dumps(doc)
    third = json.dumps(doc["data"]["result"][3])
    cut = text[:text.index(third) + len(third) // 2]
    rows = parse(prometheus, "prom_api_json", cut)
    head = copy.deepcopy(doc)
    head["data"]["result"] = head["data"]["result"][:3]
    assert plain(rows) == plain(parse(prometheus, "prom_api_json", json.dumps(head)))
    assert len(skips(rows)) == 1 and "cut short" in skips(rows)[0]


def test_json_lines_of_responses_with_one_bad_line():
    doc = corpus_matrix()
    lines = [json.dumps(doc | {"data": doc["data"] | {"result": [s]}}) for s in doc["data"]["result"]]
    lines[1] = lines[1][:40]
    rows = parse(prometheus, "prom_api_json", "\n".join(lines) + "\n")
    rest = doc | {"data": doc["data"] | {"result": [s for i, s in enumerate(doc["data"]["result"]) if i != 1]}}
    assert plain(rows) == plain(parse(prometheus, "prom_api_json", json.dumps(rest)))
    assert [r.line for r in rows if isinstance(r, Skipped)] == [2]


# ============================================================== sacct --json
def test_sacct_json_one_job_of_the_wrong_shape_is_one_skip():
    from tests.collectors.test_slurm import SACCT_JSON

    doc = json.loads(SACCT_JSON)
    jobs = doc["jobs"]
    assert len(jobs) >= 2
    broken = copy.deepcopy(doc)
    broken["jobs"].insert(1, copy.deepcopy(jobs[0]) | {"steps": 5})
    rows = parse(slurm, "sacct_json", json.dumps(broken))
    assert plain(rows) == plain(parse(slurm, "sacct_json", json.dumps(doc)))
    assert len(skips(rows)) == 1


# ============================================================== nvidia-smi -q -x
def corpus_xml(gpus: int) -> list[str]:
    """The RTX 4070's ``nvidia-smi -q -x`` (cut after </fabric> in the corpus, closed here) as a document of
    ``gpus`` GPUs at buses 01.. up."""
    lines = (CORPUS / "nvml" / "rtx4070_laptop_575_nvidia-smi-q-x_partial.xml").read_text().splitlines()
    first = next(i for i, line in enumerate(lines) if line.strip().startswith("<gpu "))
    head, gpu = lines[:first], [*lines[first:], "\t</gpu>"]
    out = list(head)
    for n in range(gpus):
        out += [line.replace("00000000:01:00.0", f"00000000:{n + 1:02x}:00.0") for line in gpu]
    return [*out, "</nvidia_smi_log>"]


def _gpus(rows: list) -> list[str]:
    return [r.gpu for r in rows if isinstance(r, GpuInventory)]


def test_xml_one_malformed_gpu_keeps_the_others():
    lines = corpus_xml(4)
    starts = [i for i, line in enumerate(lines) if line.strip().startswith("<gpu ")]
    broken = list(lines)
    broken[starts[1] + 2] = broken[starts[1] + 2].replace("</product_brand>", "<product_brand>")  # never closed
    rows = parse(nvidia_smi, "nvidia_smi_xml", "\n".join(broken) + "\n")
    assert _gpus(rows) == ["0000:01:00.0", "0000:02:00.0", "0000:03:00.0", "0000:04:00.0"]
    whole = parse(nvidia_smi, "nvidia_smi_xml", "\n".join(lines) + "\n")
    others = [r for r in plain(rows) if "0000:02:00.0" not in r[1]]
    assert others == [r for r in plain(whole) if "0000:02:00.0" not in r[1]], "the other GPUs read as if whole"
    assert len(skips(rows)) == 1 and "not well-formed" in skips(rows)[0]


def test_xml_cut_at_the_deadline_keeps_the_complete_gpus():
    """A hung nvidia-smi killed at its deadline leaves a document that stops mid-GPU."""
    lines = corpus_xml(4)
    third = [i for i, line in enumerate(lines) if line.strip().startswith("<gpu ")][2]
    rows = parse(nvidia_smi, "nvidia_smi_xml", "\n".join(lines[:third + 40]) + "\n")
    assert _gpus(rows)[:2] == ["0000:01:00.0", "0000:02:00.0"] and _gpus(rows)[2] == "0000:03:00.0"
    assert not skips(rows)


def test_xml_entity_expansion_is_still_refused_and_costs_one_gpu():
    lines = corpus_xml(3)
    decl = ['<!DOCTYPE nvidia_smi_log [', '<!ENTITY a0 "aaaaaaaaaaaaaaaaaaaa">',
            *(f'<!ENTITY a{i} "{f"&a{i - 1};" * 10}">' for i in range(1, 9)), "]>"]
    doctype = next(i for i, line in enumerate(lines) if line.startswith("<!DOCTYPE"))
    first = next(i for i, line in enumerate(lines) if line.strip().startswith("<product_name>"))
    bomb = lines[:doctype] + decl + lines[doctype + 1:first] + ["<product_name>&a8;</product_name>"] + lines[first + 1:]
    rows = parse(nvidia_smi, "nvidia_smi_xml", "\n".join(bomb) + "\n")
    assert len(_gpus(rows)) == 3 and all(len(repr(r)) < 20_000 for r in rows)
    assert len(skips(rows)) == 1


# ============================================================== archives
def corpus_members() -> dict[str, bytes]:
    return {f"node{n:02d}/{path.name}": path.read_bytes()
            for n, path in enumerate(sorted((CORPUS / "kernel").iterdir())[:5])}


def _stored(tmp_path: Path, archive: Path) -> tuple[dict[str, bytes], list]:
    """What an ingest of ``archive`` stored (member name -> bytes) and its refusals."""
    with Bundle.create(tmp_path / "b.duckdb") as bundle:
        results = ingest_paths(bundle, [str(archive)])
        stored = {a["source"].split("!", 1)[1]: b"".join(bundle.artifact_bytes(a["sha256"]))
                  for a in bundle.artifacts()}
    return stored, [r for r in results if r.status == "error"]


def _write_zip(path: Path, members: dict[str, bytes], method: int) -> None:
    with zipfile.ZipFile(path, "w", method) as zf:
        for name, data in members.items():
            zf.writestr(name, data)


@pytest.mark.parametrize("method", [zipfile.ZIP_DEFLATED, zipfile.ZIP_STORED], ids=["deflated", "stored"])
def test_zip_cut_in_its_last_member_keeps_the_earlier_ones(tmp_path, method):
    members = corpus_members()
    whole = tmp_path / "whole.zip"
    _write_zip(whole, members, method)
    data = whole.read_bytes()
    last = list(members)[-1]
    with zipfile.ZipFile(whole) as zf:
        info = zf.getinfo(last)
    cut = tmp_path / "logs.zip"
    cut.write_bytes(data[:info.header_offset + 30 + len(last) + info.compress_size // 2])
    stored, errors = _stored(tmp_path, cut)
    earlier = dict(list(members.items())[:-1])
    assert {k: v for k, v in stored.items() if k in earlier} == earlier
    assert set(stored) <= set(members)
    if last in stored:  # what came of the member the cut fell in: its first bytes, and said so
        assert members[last].startswith(stored[last]) and len(stored[last]) < len(members[last])
    assert [r.path for r in errors] == [str(cut)]
    assert f"kept the {len(earlier)} complete file(s)" in errors[0].error and repr(last) in errors[0].error


def test_tar_gz_cut_in_its_last_member_keeps_the_earlier_ones(tmp_path):
    members = {name: data * 40 for name, data in corpus_members().items()}  # members past the 64 KiB reads
    whole = tmp_path / "whole.tar.gz"
    with tarfile.open(whole, "w:gz") as tar:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    data = whole.read_bytes()
    cut = tmp_path / "logs.tar.gz"
    cut.write_bytes(data[:int(len(data) * 0.9)])
    stored, errors = _stored(tmp_path, cut)
    complete = {k: v for k, v in stored.items() if members[k] == v}
    assert list(complete) == list(members)[:len(complete)] and len(complete) >= 3
    partial = [k for k in stored if k not in complete]
    assert all(members[k].startswith(stored[k]) for k in partial) and len(partial) <= 1
    assert [r.path for r in errors] == [str(cut)]
    assert f"kept the {len(complete)} file(s) before the damage" in errors[0].error
    assert f"cut in member {len(complete) + 1}" in errors[0].error


def test_tar_gz_cut_inside_its_first_header_is_one_refusal_not_a_crash(tmp_path):
    whole = tmp_path / "whole.tar.gz"
    with tarfile.open(whole, "w:gz") as tar:
        for name, data in corpus_members().items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    cut = tmp_path / "logs.tar.gz"
    cut.write_bytes(whole.read_bytes()[:60])
    stored, errors = _stored(tmp_path, cut)
    assert stored == {} and [r.path for r in errors] == [str(cut)] and "not a readable tar" in errors[0].error


def test_zip_inside_a_tarball_cut_short_is_still_read(tmp_path):
    members = corpus_members()
    inner = tmp_path / "node.zip"
    _write_zip(inner, members, zipfile.ZIP_DEFLATED)
    cut_inner = inner.read_bytes()[: inner.stat().st_size * 3 // 4]
    outer = tmp_path / "incident.tar"
    with tarfile.open(outer, "w") as tar:
        info = tarfile.TarInfo("node.zip")
        info.size = len(cut_inner)
        tar.addfile(info, io.BytesIO(cut_inner))
    stored, errors = _stored(tmp_path, outer)
    intact = [k for k, v in stored.items() if members.get(k.split("!")[-1]) == v]
    assert len(intact) >= 2 and any("truncated or damaged zip" in r.error for r in errors)
