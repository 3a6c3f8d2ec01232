"""libuccl.so's registered "cuda" backend (cuda/cuda_loader.cc, CudaProxy) forwards every virtual
method of DeviceBackend (cpp/base/device.h) to the module's backend.

Why a source check: the proxy is hand-written and a method it does not override silently takes
DeviceBackend's default. That happened: register_host and current_pci_bus_id were missing, so on
the H200 the shared staging slots were never registered (pageable copies, 2.3 GB/s where the
link gives 27) and the rail NIC was never picked by the GPU's PCI address - and no machine
without a GPU can see it, because there the module is never loaded.
"""
import os
import re

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _class_body(text, name):
    start = text.index(f"class {name}")
    body, depth = [], 0
    for i in range(text.index("{", start), len(text)):
        ch = text[i]
        depth += ch == "{"
        depth -= ch == "}"
        body.append(ch)
        if depth == 0:
            return "".join(body)
    raise AssertionError(f"class {name} does not end")


def virtual_methods(header_text):
    body = _class_body(header_text, "DeviceBackend")
    return set(re.findall(r"virtual\s+[^;{]*?\b(\w+)\s*\(", body)) - {"DeviceBackend"}


def overridden(source_text, cls):
    body = _class_body(source_text, cls)
    return set(re.findall(r"\b(\w+)\s*\([^;{]*\)\s*(?:const\s*)?override", body))


def missing_forwards(root):
    with open(os.path.join(root, "cpp", "base", "device.h")) as f:
        want = virtual_methods(f.read())
    with open(os.path.join(root, "cuda", "cuda_loader.cc")) as f:
        have = overridden(f.read(), "CudaProxy")
    return sorted(want - have), want


def test_cuda_proxy_forwards_every_backend_method():
    missing, want = missing_forwards(ROOT)
    assert len(want) > 20, want  # the parse found the interface
    assert not missing, f"CudaProxy (cuda/cuda_loader.cc) does not forward: {missing}"


def test_the_check_sees_a_missing_forward(tmp_path):
    for rel in ("cpp/base", "cuda"):
        (tmp_path / rel).mkdir(parents=True)
    (tmp_path / "cpp/base/device.h").write_text(
        "class DeviceBackend {\n public:\n  virtual ~DeviceBackend() = default;\n"
        "  virtual bool a(int x) const = 0;\n  virtual Result<void*> b(size_t n) { return 1; }\n};\n")
    (tmp_path / "cuda/cuda_loader.cc").write_text(
        "class CudaProxy final : public DeviceBackend {\n  bool a(int x) const override { return f(); }\n};\n")
    missing, _ = missing_forwards(str(tmp_path))
    assert missing == ["b"], missing
