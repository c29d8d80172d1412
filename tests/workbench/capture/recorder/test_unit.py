"""`gpuwb record --print-unit`: a systemd unit that starts the recorder again with the options given."""

from __future__ import annotations

import shlex

from tests.conftest import run_cli


def test_print_unit_spells_out_the_options_and_restarts_the_recorder(tmp_path) -> None:
    code, text, err = run_cli("record", "--print-unit", "--out", tmp_path, "--kernel-log", "/var/log/kern.log",
                              "--watch", "/scratch/job*/rank*.log", "--window", "45m", "--max-disk", "1GB")
    assert code == 0, err
    sections = [line for line in text.splitlines() if line.startswith("[")]
    assert sections == ["[Unit]", "[Service]", "[Install]"]
    (exec_line,) = [line for line in text.splitlines() if line.startswith("ExecStart=")]
    argv = shlex.split(exec_line.removeprefix("ExecStart="))
    assert argv[argv.index("record") + 1:argv.index("record") + 3] == ["--out", str(tmp_path)]
    assert argv[argv.index("--window") + 1] == "2700s" and argv[argv.index("--max-disk") + 1] == str(1 << 30)
    assert argv[argv.index("--watch") + 1] == "/scratch/job*/rank*.log"
    assert "Restart=always" in text and "WantedBy=multi-user.target" in text


def test_print_unit_without_out_uses_the_state_directory() -> None:
    code, text, _ = run_cli("record", "--print-unit")
    assert code == 0 and "--out /var/lib/gpuwb/record" in text


def test_print_unit_wires_the_exporter(tmp_path) -> None:
    code, text, err = run_cli("record", "--print-unit", "--out", tmp_path, "--textfile-dir",
                              "/var/lib/node_exporter/textfile_collector", "--metrics-hold", "2m", "--host", "gpu-7")
    assert code == 0, err
    (exec_line,) = [line for line in text.splitlines() if line.startswith("ExecStart=")]
    argv = shlex.split(exec_line.removeprefix("ExecStart="))
    assert argv[argv.index("--textfile-dir") + 1] == "/var/lib/node_exporter/textfile_collector"
    assert argv[argv.index("--metrics-hold") + 1] == "120s" and argv[argv.index("--host") + 1] == "gpu-7"


def test_print_daemonset_is_a_valid_daemonset_that_names_the_node_and_mounts_what_it_reads() -> None:
    import kubernetes_validate
    import yaml

    code, text, err = run_cli("record", "--print-daemonset", "--image", "registry.local/gpuwb:1.0",
                              "--textfile-dir", "/var/lib/node_exporter/textfile_collector",
                              "--watch", "/scratch/job*/rank*.log", "--kernel-log", "/var/log/kern.log")
    assert code == 0, err
    doc = yaml.safe_load(text)
    kubernetes_validate.validate(doc, "1.30", strict=True)
    assert doc["kind"] == "DaemonSet" and doc["metadata"]["namespace"] == "gpuwb"
    pod = doc["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    argv = container["command"]
    assert argv[:2] == ["gpuwb", "record"] and argv[argv.index("--host") + 1] == "$(NODE_NAME)"
    assert argv[argv.index("--textfile-dir") + 1] == "/var/lib/node_exporter/textfile_collector"
    assert {"name": "NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}} in container["env"]
    mounts = {m["mountPath"]: m.get("readOnly", False) for m in container["volumeMounts"]}
    assert mounts["/var/lib/node_exporter/textfile_collector"] is False and mounts["/var/lib/gpuwb/record"] is False
    assert mounts["/scratch"] is True and mounts["/var/log"] is True and mounts["/dev/kmsg"] is True
    assert pod["tolerations"] == [{"operator": "Exists"}], "a quarantined node keeps its recorder"
    assert container["securityContext"]["capabilities"]["drop"] == ["ALL"]


def test_print_daemonset_refuses_what_kubernetes_or_the_recorder_could_not_run() -> None:
    for args, word in ((("--print-daemonset",), "needs --image"),
                       (("--print-daemonset", "--image", "img", "--namespace", "Bad_NS"), "--namespace"),
                       (("--print-daemonset", "--image", "img", "--watch", "/*.log"), "other than /"),
                       (("--image", "img", "--out", "/tmp/x"), "--image goes with --print-daemonset"),
                       (("--print-daemonset", "--print-unit", "--image", "img"), "not both")):
        code, _, err = run_cli("record", *args)
        assert code == 2 and word in err and len(err.strip().splitlines()) == 1, (args, err)


def test_printed_services_export_the_counter_where_node_exporter_reads_by_default() -> None:
    code, text, _ = run_cli("record", "--print-unit")
    (exec_line,) = [line for line in text.splitlines() if line.startswith("ExecStart=")]
    argv = shlex.split(exec_line.removeprefix("ExecStart="))
    assert code == 0 and argv[argv.index("--textfile-dir") + 1] == "/var/lib/prometheus/node-exporter"
    import yaml

    code, text, _ = run_cli("record", "--print-daemonset", "--image", "img")
    command = yaml.safe_load(text)["spec"]["template"]["spec"]["containers"][0]["command"]
    assert code == 0 and command[command.index("--textfile-dir") + 1] == "/var/lib/node_exporter/textfile_collector"
    code, text, _ = run_cli("record", "--print-unit", "--metrics-port", "9101")
    assert "--textfile-dir" not in text and "--metrics-port 9101" in text
