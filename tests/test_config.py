"""Declared configuration (cpp/base/config.h): a UCCL_* value that does not parse is refused,
naming the variable and what was expected, instead of silently becoming 0 or the default."""
import os
import subprocess
import sys
import textwrap

from harness import free_port


def _run(code, **env):
    e = {k: v for k, v in os.environ.items() if not k.startswith("UCCL_")}
    e.update(env)
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=e, capture_output=True, text=True,
                          timeout=120, cwd="/")


def test_invalid_value_is_refused_with_the_variable_named():
    p = _run(f"""
        import uccl
        store = uccl.TcpStore("127.0.0.1", {free_port()}, is_server=True)
        try:
            uccl.Communicator(0, 1, store)
        except uccl.InvalidArgument as e:
            print("refused:", e)
        else:
            print("accepted")
        """, UCCL_NSOCKS_PERPEER="abc", UCCL_DEBUG="NONE")
    assert p.returncode == 0, p.stderr
    assert "refused:" in p.stdout, p.stdout
    assert "UCCL_NSOCKS_PERPEER='abc'" in p.stdout and "expected an integer from 1 to 64" in p.stdout, p.stdout


def test_info_marks_a_refused_value_and_config_reports_it():
    p = _run("""
        import uccl
        row = [v for v in uccl.config() if v["name"] == "UCCL_SHM_RING_BYTES"][0]
        print(row["section"], row["value"], repr(row["error"]))
        """, UCCL_SHM_RING_BYTES="lots")
    assert p.returncode == 0, p.stderr
    assert p.stdout.startswith("shm lots "), p.stdout
    assert "expected a byte count" in p.stdout, p.stdout
    info = _run("import uccl.info; uccl.info.main()", UCCL_SHM_RING_BYTES="lots")
    assert info.returncode == 0, info.stderr
    assert "! refused: UCCL_SHM_RING_BYTES='lots'" in info.stdout, info.stdout


def test_valid_values_are_taken():
    p = _run(f"""
        import numpy as np, uccl
        store = uccl.TcpStore("127.0.0.1", {free_port()}, is_server=True)
        comm = uccl.Communicator(0, 1, store)
        x = np.arange(5, dtype=np.float32)
        comm.all_reduce(x)
        print("ok", x.tolist())
        """, UCCL_NSOCKS_PERPEER=" 3 ", UCCL_SHM_RING_BYTES="1m", UCCL_PROGRESS_THREAD="off", UCCL_DEBUG="NONE")
    assert p.returncode == 0, p.stderr
    assert p.stdout.strip() == "ok [0.0, 1.0, 2.0, 3.0, 4.0]", p.stdout
