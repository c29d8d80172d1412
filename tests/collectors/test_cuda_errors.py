"""CUDA runtime and driver errors known by name, message or code, in any wrapper: the code table
collectors/catalog/cuda_errors.yaml read through the `table:` signatures of signatures/cuda.yaml."""

from __future__ import annotations

import io

import pytest
import yaml

from collectors.framework.code_tables import code_table
from collectors.framework.framing.wrappers import peel
from collectors.framework.signatures import CATALOG, catalog
from workbench.analysis.causes import load_causes

TABLE = code_table("cuda_errors")
RAW = yaml.safe_load((CATALOG.parent / "cuda_errors.yaml").read_text(encoding="utf-8"))

# How each program prints a runtime error: {name} the cudaError name, {code} its number, {msg} its string.
RUNTIME_WRAPPERS = {
    "pytorch": "RuntimeError: CUDA error: {msg}",
    "pytorch_accelerator": "torch.AcceleratorError: CUDA error: {msg}",
    "pytorch_legacy": "RuntimeError: cuda runtime error ({code}) : {msg} at /pytorch/aten/src/THC/THCGeneral.cpp:50",
    "cupy": "cupy_backends.cuda.api.runtime.CUDARuntimeError: {name}: {msg}",
    "triton": "RuntimeError: Triton Error [CUDA]: {msg}",
    "check_cuda_errors": 'CUDA error at train.cu:123 code={code}({name}) "cudaMalloc(&d, n)"',
    "gpuassert": "GPUassert: {msg} kernel.cu 42",
    "ggml": "CUDA error: {msg}\n  current device: 0, in function ggml_cuda_op at ggml-cuda.cu:2400",
    "ggml_alloc": "ggml_backend_cuda_buffer_type_alloc_buffer: allocating 144.00 MiB on device 0: "
                  "cudaMalloc failed: {msg}",
    "caffe": "F0412 08:00:00.1 1 syncedmem.cpp:56] Check failed: error == cudaSuccess ({code} vs. 0)  {msg}",
    "catboost": "(TCudaException) catboost/cuda/cuda_lib/cuda_base.h:245: CUDA error {code}: {msg}",
    "paddle": "OSError: (External) CUDA error({code}), {msg}.",
    "tensorrt": "[E] 1: [cudaResources.cpp::~ScopedCudaEvent::24] Error Code 1: Cuda Runtime ({msg})",
    "cri": "2025-01-02T03:04:05.123456789Z stderr F [rank3]: RuntimeError: CUDA error: {msg}",
}
# How each program prints a driver error (CUresult).
DRIVER_WRAPPERS = {
    "cupy_driver": "cupy_backends.cuda.api.driver.CUDADriverError: {name}: {msg}",
    "numba": "numba.cuda.cudadrv.driver.CudaAPIError: [{code}] Call to cuMemcpyDtoH results in {name}",
    "numba_unknown": "numba.cuda.cudadrv.driver.CudaAPIError: [{code}] Call to cuMemcpyDtoH results in "
                     "UNKNOWN_CUDA_ERROR",
    "jax": "E0101 00:00:00.1 1 cuda_executor.cc:1] failed call to cuInit: {name}: {msg}",
    "tensorflow": "E tensorflow/stream_executor/cuda/cuda_driver.cc:828] failed to allocate 32.00M (33554432 bytes) "
                  "from device: {name}: {msg}",
    "julia": "ERROR: LoadError: CUDA error: {msg} (code {code}, {short})",
    "pycuda": "pycuda._driver.LogicError: cuStreamSynchronize failed: {msg}",
    "candle": 'DriverError({name}, "{msg}")',
}
ERRORS = [  # (runtime name, driver name, cause)
    ("cudaErrorMemoryAllocation", "CUDA_ERROR_OUT_OF_MEMORY", "gpu_oom"),
    ("cudaErrorIllegalAddress", "CUDA_ERROR_ILLEGAL_ADDRESS", "app_gpu_fault"),
    ("cudaErrorLaunchFailure", "CUDA_ERROR_LAUNCH_FAILED", "app_gpu_fault"),
    ("cudaErrorAssert", "CUDA_ERROR_ASSERT", "app_gpu_fault"),
    ("cudaErrorECCUncorrectable", "CUDA_ERROR_ECC_UNCORRECTABLE", "ecc_uncorrectable"),
    ("cudaErrorSystemNotReady", "CUDA_ERROR_SYSTEM_NOT_READY", "fabric_manager_down"),
    ("cudaErrorNoDevice", "CUDA_ERROR_NO_DEVICE", "gpu_runtime_misconfigured"),
    ("cudaErrorSystemDriverMismatch", "CUDA_ERROR_SYSTEM_DRIVER_MISMATCH", "driver_stack_mismatch"),
    ("cudaErrorUnsupportedPtxVersion", "CUDA_ERROR_UNSUPPORTED_PTX_VERSION", "driver_stack_mismatch"),
    ("cudaErrorDevicesUnavailable", "CUDA_ERROR_DEVICE_UNAVAILABLE", "gpu_contention"),
    ("cudaErrorInvalidValue", "CUDA_ERROR_INVALID_VALUE", None),
    ("cudaErrorMisalignedAddress", "CUDA_ERROR_MISALIGNED_ADDRESS", "app_gpu_fault"),
]


def _one(line: str) -> dict:
    events = list(catalog().scan(io.BytesIO(f"{line}\n".encode())))
    assert len(events) == 1, f"{line!r}: {[(e.kind, e.attrs.get('signature')) for e in events]}"
    event = events[0]
    assert event.kind == "cuda_error" and event.layer == "gpu"
    return event.attrs


def _cases(wrappers: dict[str, str], api: int) -> list:
    return [pytest.param(names[api], names[2], template, id=f"{wrapper}-{names[api]}")
            for names in ERRORS for wrapper, template in wrappers.items()]


@pytest.mark.parametrize(("name", "cause", "template"), _cases(RUNTIME_WRAPPERS, 0) + _cases(DRIVER_WRAPPERS, 1))
def test_an_error_reads_the_same_in_every_wrapper(name, cause, template):
    entry = TABLE.by_name[name]
    line = template.format(name=name, code=entry.code, msg=entry.message.rstrip("."),
                           short=name.removeprefix("CUDA_"))
    attrs = _one(line.split("\n")[0])
    assert (attrs["name"], attrs["code"], attrs["api"]) == (entry.name, entry.code, entry.api), line
    assert attrs.get("causes") == ([cause] if cause else None), line
    assert attrs["error"] == entry.message and attrs["meaning"] == entry.meaning


def test_old_runtime_numbers_are_read_by_the_message_and_kept_as_printed():
    attrs = _one("THCudaCheck FAIL file=/pytorch/aten/src/THC/THCGeneral.cpp line=74 error=38 : "
                 "no CUDA-capable device is detected")
    assert (attrs["name"], attrs["code"], attrs["printed_code"]) == ("cudaErrorNoDevice", 100, 38)
    ecc = _one("RuntimeError: cuda runtime error (39) : uncorrectable ECC error encountered at "
               "/x/THCCachingHostAllocator.cpp:265")
    assert (ecc["name"], ecc["code"], ecc["printed_code"], ecc["causes"]) == (
        "cudaErrorECCUncorrectable", 214, 39, ["ecc_uncorrectable"])


def test_a_code_alone_is_read_in_the_api_the_line_names():
    numba = _one("numba.cuda.cudadrv.driver.CudaAPIError: [700] Call to cuMemcpyDtoH results in UNKNOWN_CUDA_ERROR")
    assert (numba["name"], numba["call"]) == ("CUDA_ERROR_ILLEGAL_ADDRESS", "cuMemcpyDtoH")
    assert _one("CUDA error 999: unknown error")["name"] == "cudaErrorUnknown"


@pytest.mark.parametrize("line", [
    "Out of memory: Killed process 4242 (python) total-vm:123kB, anon-rss:456kB",
    "Memory cgroup out of memory: Killed process 42 (python)",
    "MemoryError: Unable to allocate 184. MiB for an array with shape (64, 26, 26, 3, 371) and data type float32",
    "RuntimeError: DefaultCPUAllocator: can't allocate memory: you tried to allocate 1024 bytes. "
    "Error code 12 (Cannot allocate memory)",
    "ERROR: invalid argument --foo",
    "RuntimeError: CUDA error: CUBLAS_STATUS_ALLOC_FAILED when calling `cublasCreate(handle)`",
    "Search for `cudaErrorIllegalAddress' in https://docs.nvidia.com/cuda/cuda-runtime-api/group__CUDART__TYPES.html "
    "for more information.",
    "if (err != cudaSuccess) return err;",
])
def test_a_message_without_a_cuda_wrapper_is_not_a_cuda_error(line):
    assert [e for e in catalog().scan(io.BytesIO(f"{line}\n".encode())) if e.kind == "cuda_error"] == []


def test_every_code_of_the_table_is_known_by_its_name_and_by_its_message():
    for api, section in RAW["apis"].items():
        for raw in section["errors"]:
            entry = TABLE.by_name[raw["name"]]
            assert entry.api == api and entry.code == raw["code"]
            by_name = catalog().match(peel(f"CUDA call failed: {raw['name']}").message)
            assert by_name is not None and by_name[1]["code"] == raw["code"], raw["name"]
            wrapper = "CUDADriverError" if api == "driver" else "CUDARuntimeError"
            by_message = catalog().match(f"cupy_backends.cuda.api.x.{wrapper}: CUDA error: {raw['message']}")
            assert by_message is not None and by_message[1]["error"] == raw["message"], raw["name"]
            assert by_message[1]["api"] == api or by_message[1]["name"] != raw["name"]


def test_the_table_names_only_declared_causes_and_one_entry_per_code():
    causes = set(load_causes())
    for section in RAW["apis"].values():
        codes = [e["code"] for e in section["errors"]]
        assert len(codes) == len(set(codes))
        for entry in section["errors"]:
            assert entry.get("cause") is None or entry["cause"] in causes, entry["name"]
            assert entry["meaning"], entry["name"]


def test_severity_follows_the_table():
    line = b"CUDADriverError: CUDA_ERROR_NVLINK_UNCORRECTABLE: uncorrectable NVLink error\n"
    assert [e.severity for e in catalog().scan(io.BytesIO(line))] == ["critical"]
