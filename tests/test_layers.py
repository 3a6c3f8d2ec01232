"""The floor plan holds: every include in the C++ tree points down the floors
(include/uccl < cpp/base < cpp/bootstrap < cpp/topology < transports < cpp/algorithms < cpp/core),
public headers include only public headers, and no transport includes another
(scripts/check_layers.py; docs/ARCHITECTURE.md explains the floors)."""
import importlib.util
import os

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_spec = importlib.util.spec_from_file_location("check_layers", os.path.join(ROOT, "scripts", "check_layers.py"))
check_layers = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(check_layers)


def test_includes_point_down():
    bad = check_layers.violations(ROOT)
    assert not bad, "includes that run back up:\n" + "\n".join(bad)


def _tree(tmp_path, files):
    for rel, text in files.items():
        p = tmp_path / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)
    return str(tmp_path)


def test_check_catches_an_include_running_up(tmp_path):
    # The check must be able to fail: a transport that includes core, a public header that
    # includes an internal one, and one transport including another are each reported.
    root = _tree(tmp_path, {
        "transports/tcp/a.cc": '#include "core/engine.h"\n#include "transports/transport.h"\n',
        "transports/shm/b.cc": '#include "transports/tcp/tcp_endpoint.h"\n',
        "include/uccl/c.h": '#include "base/log.h"\n#include <string>\n',
        "cpp/base/d.cc": '#include "uccl/status.h"\n#include "base/log.h"\n',
        "cpp/algorithms/e.cc": '#include "topology/topology.h"\n  #  include "core/connection_manager.h"\n',
    })
    bad = check_layers.violations(root)
    assert any(b.startswith("transports/tcp/a.cc:1:") and "cpp/core is above transports" in b for b in bad), bad
    assert any(b.startswith("transports/shm/b.cc:1:") and "another" in b for b in bad), bad
    assert any(b.startswith("include/uccl/c.h:1:") for b in bad), bad
    assert any(b.startswith("cpp/algorithms/e.cc:2:") for b in bad), bad
    assert len(bad) == 4, bad
