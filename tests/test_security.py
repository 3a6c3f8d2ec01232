"""Job key and encrypted links end to end (issue 17 items 4 and 5): real processes on loopback.

* a keyed job: a stranger process on the store port and on a rank's listening port gets
  nothing (a denial, a greeting nonce, a refusal), writes nothing, and the job's collectives
  finish exactly before and after; a stranger with a wrong key gets uccl.AuthenticationError;
* ranks with different keys over torch's store: the data connection is refused, typed;
* UCCL_ENCRYPT=all and a mixed job (inter_cluster: some pairs encrypted, some not), exact;
* the torch backend and uccl.TcpStore with a job key; python -m uccl.info names the modes.
"""
import os
import struct
import subprocess
import sys

import pytest

from harness import run_world
from security_scenarios import KEY

KEYED = {"UCCL_JOB_KEY": KEY}


def _reply_status(hexdata):
    data = bytes.fromhex(hexdata)
    assert len(data) >= 24, f"no reply header: {data!r}"
    magic, status, _value, nbytes = struct.unpack("<IB3xqQ", data[:24])
    assert magic == 0x52534355
    return status, data[24:24 + nbytes].decode(errors="replace"), len(data) - 24 - nbytes


def test_stranger_gets_nothing_and_the_job_is_unharmed():
    res = run_world(3, "security_scenarios:stranger", env=KEYED, transport="tcp", timeout=150)
    out = res[0]["stranger"]
    for name in ("none", "wrong"):
        o = out[name]
        for op in ("get", "set", "add"):
            status, why, extra = _reply_status(o[op])
            assert status == 3, (name, op, status, why)  # ReplyStatus::kDenied, then closed
            assert extra == 0 and "requires the job key" in why
        assert KEY.encode().hex() not in o["get"]
        greeting = bytes.fromhex(o["rank_greeting"])
        assert len(greeting) == 40 and greeting[:4] == b"UCCG"  # a nonce, nothing else
        after = bytes.fromhex(o["rank_after"])
        # AckHeader (core/handshake.h): magic, status, answer bytes, flags, staging chunk
        magic, status, nbytes, _flags, _chunk = struct.unpack("<IIIIQ", after[:24])
        assert (magic, status) == (0x4B434155, 9)  # an ack of code kUnauthenticated, then closed
        assert len(after) == 24 + 32 + nbytes and b"wrong job key" in after
    assert out["none"]["tcpstore"].startswith("AuthenticationError:"), out["none"]["tcpstore"]
    assert "requires the job key" in out["none"]["tcpstore"]
    assert out["wrong"]["tcpstore"].startswith("AuthenticationError:"), out["wrong"]["tcpstore"]
    assert "wrong job key" in out["wrong"]["tcpstore"]
    assert out["written"] is False


def test_wrong_key_on_a_data_connection_is_refused_typed():
    pytest.importorskip("torch")
    res = run_world(2, "security_scenarios:wrong_key_torch_store", make_comm=False, timeout=90,
                    rank_env=lambda r: {"UCCL_JOB_KEY": KEY if r == 0 else "other-key-0123456789abcdef"})
    assert res[0].startswith("AuthenticationError:"), res[0]
    assert "wrong job key" in res[0] and "rank 1" in res[0]
    assert res[1] != "completed"


@pytest.mark.parametrize("key", [False, True], ids=["keyless", "keyed"])
def test_encrypt_all(key):
    env = {"UCCL_ENCRYPT": "all", **(KEYED if key else {})}
    res = run_world(3, "security_scenarios:describe_after_collectives", env=env, transport="tcp", timeout=150)
    for d in res:
        peers = [line for line in d.splitlines() if line.strip().startswith("peer ")]
        assert len(peers) == 2 and all("TLSv1.3" in p for p in peers), d


def test_mixed_job_encrypts_only_inter_cluster_pairs():
    clusters = ["x", "x", "y", "y"]
    # One host per rank (else the pair is at host level whatever its clusters), two clusters.
    res = run_world(4, "security_scenarios:describe_after_collectives", transport="tcp", timeout=150,
                    host_ids=["a", "b", "c", "d"], env={"UCCL_ENCRYPT": "inter_cluster"},
                    rank_env=lambda r: {"UCCL_CLUSTER": clusters[r]})
    encrypted = 0
    for r, d in enumerate(res):
        for line in d.splitlines():
            line = line.strip()
            if not line.startswith("peer "):
                continue
            p = int(line.split()[1].rstrip(":"))
            assert ("TLS" in line) == (clusters[p] != clusters[r]), (r, line)
            encrypted += "TLS" in line
    assert encrypted == 8  # 4 pairs across the clusters, seen from both sides


def test_torch_backend_with_job_key_and_tls():
    pytest.importorskip("torch")
    run_world(2, "security_scenarios:torch_backend_keyed", make_comm=False, timeout=150,
              env={**KEYED, "UCCL_ENCRYPT": "all", "UCCL_TRANSPORT": "tcp"})


def test_info_names_the_modes():
    run = lambda env: subprocess.run([sys.executable, "-m", "uccl.info"], capture_output=True, text=True,
                                     env={**os.environ, **env}, timeout=60)
    keyless = run({})
    assert keyless.returncode == 0, keyless.stderr
    assert "authentication: no job key" in keyless.stdout
    assert "encryption: UCCL_ENCRYPT=none" in keyless.stdout
    keyed = run({"UCCL_JOB_KEY": KEY, "UCCL_ENCRYPT": "inter_cluster"})
    assert "authentication: job key (UCCL_JOB_KEY)" in keyed.stdout
    assert "encryption: UCCL_ENCRYPT=inter_cluster" in keyed.stdout
    assert KEY not in keyed.stdout and "(set, hidden)" in keyed.stdout
    short = run({"UCCL_JOB_KEY": "short"})
    assert "authentication: refused" in short.stdout and "at least 16" in short.stdout
