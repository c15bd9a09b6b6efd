"""Which flavors and images setup offers: real-shaped lists as Nova (2.61+) and Glance return them."""

import pytest

from gpu_rent.setup.catalog import GpuFlavor, find_flavor, find_image, gpu_flavor, gpu_flavors, usable_images


def flavor(fid, name, vcpus, ram, **specs):
    return {"id": fid, "name": name, "vcpus": vcpus, "ram": ram, "extra_specs": specs}


# Selectel: numeric ids and names; the GPU is told only by the PCI passthrough alias
SELECTEL = [
    flavor("1011", "1011", 1, 1024, **{"aggregate_instance_extra_specs:pool": "ru-7a", "hw:cpu_policy": "shared"}),
    flavor("1311", "1311", 4, 16384, **{"hw:cpu_policy": "dedicated"}),
    flavor("3021", "3021", 8, 65536, **{"pci_passthrough:alias": "GPU-A100:1", "hw:cpu_policy": "dedicated"}),
    flavor("3022", "3022", 16, 131072, **{"pci_passthrough:alias": "GPU-A100:2"}),
    flavor("3041", "3041", 4, 32768, **{"pci_passthrough:alias": "GPU-L4:1"}),
    flavor("4011", "4011", 2, 8192),
]
# a public cloud that names its flavors
NAMED = [
    flavor("0a1b", "m1.small", 1, 2048),
    flavor("0a1c", "m1.xlarge", 8, 16384),
    flavor("0a1d", "g1.a100.1", 12, 98304),
    flavor("0a1e", "g2.h100.8", 96, 786432),
    flavor("0a1f", "c1.2xlarge-1xRTX4090", 16, 65536),
    flavor("0a20", "vgpu.large", 8, 32768, **{"resources:VGPU": "1"}),
    flavor("0a21", "x1.trait", 8, 32768, **{"trait:CUSTOM_NVIDIA_GPU": "required"}),
]


# the test ground's flavors, as `openstack flavor list --long` shows them to the member user
def ground(fid, name, vcpus, ram, count, model, resource):
    specs = {"gpu:count": count, "gpu:model": model, f"resources:CUSTOM_GPU_{resource}": "1"}
    return flavor(fid, name, vcpus, ram, **specs)


GROUND = [
    ground("29d2", "gpu.a100.1", 12, 98304, "1", "A100-80GB", "A100"),
    flavor("cdc3", "m1.small", 1, 2048),
    ground("d975", "gpu.h100.8", 96, 65536, "8", "H100-80GB", "L4"),
    ground("e703", "gpu.l4.1", 8, 32768, "1", "L4-24GB", "L4"),
    ground("f486", "gpu.a10.1", 8, 32768, "1", "A10-24GB", "A10"),
]


def test_selectel_gpu_flavors_are_found_by_their_extra_specs_only():
    found = gpu_flavors(SELECTEL)
    assert [f.id for f in found] == ["3041", "3021", "3022"]
    assert found[0] == GpuFlavor("3041", "3041", 4, 32768, 1, "L4")
    assert (found[2].gpu_count, found[2].gpu_model) == (2, "A100")


def test_numeric_flavors_without_a_gpu_spec_are_not_gpus():
    assert all(gpu_flavor(f) is None for f in SELECTEL if f["id"] in ("1011", "1311", "4011"))


def test_named_cloud_by_name_hints_and_placement_specs():
    found = {f.name: f for f in gpu_flavors(NAMED)}
    assert set(found) == {"g1.a100.1", "g2.h100.8", "c1.2xlarge-1xRTX4090", "vgpu.large", "x1.trait"}
    assert found["g1.a100.1"].gpu_model == "A100"
    assert (found["c1.2xlarge-1xRTX4090"].gpu_model, found["c1.2xlarge-1xRTX4090"].gpu_count) == ("RTX4090", 1)
    assert found["vgpu.large"].gpu_count == 1
    assert found["x1.trait"].gpu_model is None


def test_ground_flavors_tell_count_and_model():
    found = gpu_flavors(GROUND)
    assert [f.name for f in found] == ["gpu.a10.1", "gpu.l4.1", "gpu.a100.1", "gpu.h100.8"]
    h100 = found[-1]
    assert (h100.gpu_count, h100.gpu_model, h100.vcpus, h100.ram_mb) == (8, "H100-80GB", 96, 65536)
    assert h100.describe() == "gpu.h100.8 (8× H100-80GB, 96 vCPU, 64 GB)"


@pytest.mark.parametrize("name", ["m1.small", "m1.xlarge", "t2.micro", "standard.large", "a1000.big"])
def test_plain_names_are_not_gpus(name):
    assert gpu_flavor(flavor("x", name, 2, 4096)) is None


def test_several_aliases_add_up():
    found = gpu_flavor(flavor("9", "9", 8, 8192, **{"pci_passthrough:alias": "a100:2,t4:1"}))
    assert (found.gpu_count, found.gpu_model) == (3, "a100")


def test_find_by_name_or_id():
    found = gpu_flavors(GROUND)
    assert find_flavor(found, "gpu.l4.1").id == "e703"
    assert find_flavor(found, "e703").name == "gpu.l4.1"
    assert find_flavor(found, "m1.small") is None
    assert find_flavor(gpu_flavors(SELECTEL), "3021").gpu_model == "A100"


IMAGES = [
    {"id": "i1", "name": "Ubuntu 24.04 LTS 64-bit", "status": "active", "os_distro": "ubuntu"},
    {"id": "i2", "name": "Debian 12 64-bit GPU optimized", "status": "active",
     "owner_specified.openstack.object": "images/Debian 12 64-bit GPU optimized", "stores": "fs"},
    {"id": "i3", "name": "Rocky 9", "status": "active", "nvidia_driver": "580.65"},
    {"id": "i4", "name": "cuda-broken", "status": "queued"},
    {"id": "i5", "name": "Alma 9", "status": "active", "owner_specified.openstack.object": "images/gpu-copy"},
]  # fmt: skip


def test_gpu_looking_images_first_and_inactive_ones_left_out():
    names = [i["name"] for i in usable_images(IMAGES)]
    assert names == ["Debian 12 64-bit GPU optimized", "Rocky 9", "Alma 9", "Ubuntu 24.04 LTS 64-bit"]


def test_find_image_by_name_or_id():
    images = usable_images(IMAGES)
    assert find_image(images, "i3")["name"] == "Rocky 9"
    assert find_image(images, "Rocky 9")["id"] == "i3"
    assert find_image(images, "cuda-broken") is None
