"""uccl-perf: flags, busbw factors, exact checking, and real runs with local ranks (-N)."""
import json
import os
import subprocess
import sys

import numpy as np
import pytest

from uccl.perf import args as cli
from uccl.perf import colls, data


def run_perf(*argv, timeout=240):
    # From a neutral directory: a source checkout in the cwd would shadow the installed package.
    return subprocess.run([sys.executable, "-m", "uccl.perf", *argv], capture_output=True, text=True,
                          timeout=timeout, cwd=os.path.dirname(os.path.abspath(os.sep)))


def table_rows(out):
    return [line.split() for line in out.splitlines() if line.strip() and not line.startswith("#")]


def test_sizes_follow_nccl_tests():
    assert cli.parse_size("64K") == 65536 and cli.parse_size("1g") == 1 << 30 and cli.parse_size("8") == 8
    assert cli.sizes(8, 64, 0, 2) == [8, 16, 32, 64]
    assert cli.sizes(1, 7, 3, 1) == [1, 4, 7]
    a = cli.parse(["all_reduce", "-b", "8", "-e", "1M", "-f", "4", "-d", "all", "-o", "all"])
    assert a.coll.name == "all_reduce" and len(a.types) == 8 and "mulsum" in a.ops
    assert cli.parse(["all_gather_perf", "-o", "all"]).ops == ["none"]


@pytest.mark.parametrize("name,n,factor,base_mult", [
    ("all_reduce", 4, 1.5, 1), ("all_gather", 4, 0.75, 4), ("reduce_scatter", 4, 0.75, 4),
    ("alltoall", 4, 0.75, 4), ("broadcast", 4, 1.0, 1), ("reduce", 4, 1.0, 1), ("sendrecv", 4, 1.0, 1),
    ("gather", 4, 0.75, 4), ("scatter", 4, 0.75, 4)])
def test_busbw_factors(name, n, factor, base_mult):
    c = colls.get(name)
    alg, bus = c.bandwidth(1000, 4, n, 1e-6)
    assert alg == pytest.approx(1000 * 4 * base_mult / 1e9 / 1e-6)
    assert bus == pytest.approx(alg * factor)


def test_counts_follow_nccl_tests():
    ag = colls.get("all_gather")
    assert ag.count(1 << 20, 4, 4) == (1 << 18) // 4  # per-rank count
    assert ag.recv_count(ag.count(1 << 20, 4, 4), 4) * 4 == 1 << 20
    assert colls.get("all_reduce").count(1 << 20, 4, 4) == 1 << 18


@pytest.mark.parametrize("tname", list(data.TYPES))
@pytest.mark.parametrize("op", list(data.OPS))
def test_check_is_exact_and_catches_one_bad_element(tname, op):
    n = 5
    expect = data.reduce_tiles(tname, op, [data.values(tname, op, n, q, 0) for q in range(n)])
    buf = np.empty(1000, dtype=data.storage(tname))
    data.fill(buf, tname, expect)
    ulps = 2 if op == "avg" and data.is_float(tname) else 0
    assert data.count_wrong(buf, tname, expect, ulps) == 0
    i = next(i for i in range(1, len(buf)) if buf[i] != buf[i - 1])
    buf[i] = buf[i - 1]
    assert data.count_wrong(buf, tname, expect, ulps) >= 1


@pytest.mark.parametrize("coll", list(colls.COLLS))
def test_every_collective_runs_and_checks(coll):
    r = run_perf(coll, "-N", "3", "-b", "0", "-e", "64K", "-f", "16", "-n", "2", "-w", "1", "-r", "-1")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "# Out of bounds values : 0 OK" in r.stdout
    rows = table_rows(r.stdout)
    assert rows and all(row[8] == "0" for row in rows)  # out-of-place #wrong
    assert "Avg bus bandwidth" in r.stdout


def test_all_types_ops_blocking_and_json(tmp_path):
    out = tmp_path / "r.json"
    r = run_perf("reduce_scatter", "-N", "2", "-b", "1K", "-e", "1M", "-f", "32", "-n", "3", "-d", "all", "-o", "all",
                 "-z", "1", "-a", "3", "-J", str(out))
    assert r.returncode == 0, r.stdout + r.stderr
    doc = json.loads(out.read_text())
    assert doc["collective"] == "reduce_scatter" and doc["nranks"] == 2 and doc["out_of_bounds"] == 0
    assert len(doc["results"]) == len(table_rows(r.stdout)) == 8 * 6 * 3  # types x ops x (1K, 32K, 1M)
    assert all(x["in_place"]["wrong"] == 0 for x in doc["results"])


def test_tcp_transport_and_column_layout():
    r = run_perf("all_reduce", "-N", "2", "-b", "8", "-e", "8", "-n", "5", "--transport", "tcp")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "peers 1 tcp" in r.stdout
    row = table_rows(r.stdout)[0]
    assert row[:5] == ["8", "2", "float", "sum", "-1"] and len(row) == 13


@pytest.mark.parametrize("coll", ["all_reduce", "alltoall", "sendrecv"])
def test_predicted_columns(coll, tmp_path):
    """-P 1: every row ends with uccl's prediction (its own comm.estimate) and measured / predicted."""
    out = tmp_path / "r.json"
    r = run_perf(coll, "-N", "2", "-b", "64K", "-e", "1M", "-f", "16", "-n", "3", "-w", "1", "-P", "1", "-J", str(out))
    assert r.returncode == 0, r.stdout + r.stderr
    assert "predicted" in r.stdout and "meas/pred" in r.stdout
    rows = table_rows(r.stdout)
    assert len(rows) == 2 and all(len(row) == 15 for row in rows), rows
    doc = json.loads(out.read_text())
    for row, res in zip(rows, doc["results"]):
        assert res["predicted_us"] > 0
        assert float(row[-1]) == pytest.approx(res["out_of_place"]["time_us"] / res["predicted_us"], abs=0.006)
    assert doc["results"][1]["predicted_us"] > doc["results"][0]["predicted_us"]  # 1 MiB over 64 KiB
