"""The programs' own failure lines (collectors/catalog/signatures/programs.yaml): host memory exhaustion as
numpy, Python, C++, pyarrow and the OS print it, and NaN/Inf losses in each trainer's format, read in any
file, and told apart from the GPU's out-of-memory and from an RDMA registration's ENOMEM."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from collectors.framework.framing.wrappers import peel
from collectors.framework.signatures import catalog
from tests.conftest import ingest_timeline, run_cli


def _match(line: str) -> tuple[str, str, dict] | None:
    found = catalog().match(peel(line).message)
    return (found[0].id, found[0].kind, found[1]) if found else None


@pytest.mark.parametrize(("line", "program", "mib"), [
    ("numpy.core._exceptions._ArrayMemoryError: Unable to allocate 3.81 GiB for an array with shape (22500, 22500) "
     "and data type float64", "numpy", 3901.44),
    ("numpy._core._exceptions._ArrayMemoryError: Unable to allocate 94.9 MiB for an array with shape (2160, 3840, 3) "
     "and data type float32", "numpy", 94.9),
    ("terminate called after throwing an instance of 'std::bad_alloc'", "c++", None),
    ("  File \"train.py\", line 12, in <module>\nMemoryError", "python", None),
    ("OSError: [Errno 12] Cannot allocate memory", "os", None),
    ("pyarrow.lib.ArrowMemoryError: malloc of size 2147483648 failed", "pyarrow", None),
])
def test_host_memory_exhaustion_in_each_runtime_points_at_host_memory(line: str, program: str,
                                                                      mib: float | None) -> None:
    found = _match(line.splitlines()[-1])
    assert found is not None, line
    _, kind, attrs = found
    assert kind == "host_memory_exhausted" and attrs["causes"] == ["host_oom_kill"]
    assert attrs["program"] == program
    assert attrs.get("requested_mib") == mib


def test_numpy_names_the_shape_and_dtype_it_was_allocating() -> None:
    _, _, attrs = _match("numpy.core._exceptions._ArrayMemoryError: Unable to allocate 58.0 GiB for an array with "
                         "shape (176351, 176460) and data type uint16")
    assert (attrs["shape"], attrs["dtype"], attrs["exception"]) == (
        "176351, 176460", "uint16", "numpy.core._exceptions._ArrayMemoryError")


@pytest.mark.parametrize("line", [
    "torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 3.00 GiB. GPU 0 has a total capacity of "
    "23.65 GiB of which 1.66 GiB is free.",
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 MiB.",
    "node07:48211:48388 [1] NCCL WARN Call to ibv_reg_mr failed with error Cannot allocate memory",
])
def test_gpu_oom_and_rdma_enomem_are_not_host_memory(line: str) -> None:
    found = _match(line)
    assert found is None or found[1] != "host_memory_exhausted", found


@pytest.mark.parametrize(("line", "cause"), [
    ("numpy.core._exceptions._ArrayMemoryError: Unable to allocate 1.61 GiB for an array with shape (753, 536, 536) "
     "and data type float64", "host_oom_kill"),
    ("terminate called after throwing an instance of 'std::bad_alloc'", "host_oom_kill"),
    ("2022-02-09 20:28:32,418 - mmdet - INFO - Epoch [1][658/742]     lr: 5.000e-05, loss_cls: nan, loss: nan",
     "numeric_instability"),
])
def test_a_programs_failure_alone_in_any_file_ranks_its_cause_first(tmp_path: Path, line: str, cause: str) -> None:
    evidence = tmp_path / "evidence"
    evidence.mkdir()
    (evidence / "job.out").write_text(line + "\n")
    assert run_cli("ingest", tmp_path / "b.duckdb", evidence)[0] == 0
    code, out, err = run_cli("analyze", tmp_path / "b.duckdb", "--json")
    assert code == 0, err
    hypotheses = json.loads(out)["hypotheses"]
    assert hypotheses and hypotheses[0]["cause"] == cause


@pytest.mark.parametrize("line", [
    "2022-02-09 20:28:32,418 - mmdet - INFO - Epoch [1][658/742]     lr: 5.000e-05, loss_cls: nan, loss: nan",
    "Loss is nan, stopping training",
    "FloatingPointError: Minimum loss scale reached (0.0001). Your loss is probably exploding.",
    "Exception: Current loss scale already at minimum - cannot decrease scale anymore. Exiting run.",
    "RuntimeError: Function 'MulBackward0' returned nan values in its 0th output.",
    "ValueError: The loss returned in `training_step` is nan.",
])
def test_a_nan_loss_alone_in_any_file_ranks_numeric_instability_first(tmp_path: Path, line: str) -> None:
    evidence = tmp_path / "evidence"
    evidence.mkdir()
    (evidence / "job.out").write_text(line + "\n")
    code, out, err = run_cli("ingest", tmp_path / "b.duckdb", evidence)
    assert code == 0, err
    code, out, err = run_cli("analyze", tmp_path / "b.duckdb", "--json")
    assert code == 0, err
    hypotheses = json.loads(out)["hypotheses"]
    assert hypotheses and hypotheses[0]["cause"] == "numeric_instability"


def test_a_healthy_loss_line_is_not_a_nan() -> None:
    for line in ("{'loss': 2.0491, 'learning_rate': 0.0001961913563176343, 'epoch': 0.28}",
                 "Epoch 3: 100%|#####| 320/320 [00:21<00:00, loss=0.134, v_num=0]",
                 "loss_cls: 0.4412, loss_bbox: 0.2231, loss: 0.6643, nanoseconds: 12"):
        found = _match(line)
        assert found is None or found[1] != "nan_loss", (line, found)


def test_a_rank_logs_nan_line_is_one_event(tmp_path: Path) -> None:
    """The rank-log reader (torch_dist) already reads HF's dict; the programs' entry must not add a second."""
    log = tmp_path / "rank0.log"
    log.write_text("[rank0]: {'loss': nan, 'learning_rate': 1.9e-05, 'epoch': 0.42}\n")
    kinds = [e["kind"] for e in ingest_timeline(tmp_path / "b.duckdb", log)]
    assert kinds == ["nan_loss"]
