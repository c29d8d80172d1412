"""One GPU-id normaliser (collectors.base.normalize_pci, and gpu_id built on it): every spelling a
source prints of one bus id is one key, so a GPU named by dmesg, nvidia-smi and NVML joins."""

import pytest

from collectors.base import gpu_id, normalize_pci


@pytest.mark.parametrize("text", ["00000000:BA:80.0", "0000:ba:80.0", "000:BA:80.0", "PCI:0000:ba:80",
                                  "GPU 00000000:BA:80.0", "ba:80.0"])
def test_every_spelling_of_one_bus_id_is_one_key(text: str) -> None:
    assert normalize_pci(text) == "0000:ba:80.0"


def test_a_three_digit_domain_keeps_its_bus_and_device() -> None:
    # Read as a missing domain, "000:BA:80.0" was bus 00 device ba: another GPU.
    assert normalize_pci("001:3B:00.1") == "0001:3b:00.1"


def test_gpu_id_keeps_what_is_not_a_bus_id() -> None:
    assert gpu_id("00000000:5D:00.0") == gpu_id("0000:5d:00.0") == "0000:5d:00.0"
    assert gpu_id("GPU-483e6bb6-bb11") == "GPU-483e6bb6-bb11"
    assert gpu_id("index:3") == "index:3"
    assert gpu_id("") is None and gpu_id(None) is None
