"""Plain TCP sockets on a lossy testbed link: why uccl sets TCP_RTO_MAX_MS and TCP_USER_TIMEOUT.

    python benchmarks/testbed/socket_loss.py LOSS_PERCENT RTO_MAX_MS USER_TIMEOUT_MS [SECONDS]

Two hosts (Testbed.lossy drops LOSS_PERCENT % of the packets each way); one sends 1 MiB
writes to the other for SECONDS (default 60) on one socket with the given options (0: the
kernel's default). Prints what the sender got done, or the error it got. No uccl involved: the
kernel's behaviour alone (RESULTS.md, "A link that loses packets or goes down for a while").
"""
import socket
import sys
import time

TCP_RTO_MAX_MS = 44  # linux/tcp.h of 6.15


def options(s, rto_max_ms, user_timeout_ms):
    if rto_max_ms:
        s.setsockopt(socket.IPPROTO_TCP, TCP_RTO_MAX_MS, rto_max_ms)
    if user_timeout_ms:
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_USER_TIMEOUT, user_timeout_ms)


def serve(host, rto, uto):
    lsock = socket.socket()
    lsock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    options(lsock, rto, uto)
    lsock.bind((host, 5555))
    lsock.listen()
    conn, _ = lsock.accept()
    try:
        while conn.recv(1 << 20):
            pass
    except OSError:
        pass


def send(host, rto, uto, seconds):
    c = socket.socket()
    options(c, rto, uto)
    c.connect((host, 5555))
    buf, t, n = b"x" * (1 << 20), time.time(), 0
    try:
        while time.time() - t < seconds:
            c.sendall(buf)
            n += 1
        c.close()
        print(f"sent {n} MiB in {time.time() - t:.1f} s", flush=True)
    except OSError as e:
        print(f"error {e} after {n} MiB and {time.time() - t:.1f} s", flush=True)


def main():
    if sys.argv[1] in ("serve", "send"):  # inside a host's namespace
        host, rto, uto = sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
        serve(host, rto, uto) if sys.argv[1] == "serve" else send(host, rto, uto, float(sys.argv[5]))
        return
    import netbed
    loss, rto, uto = int(sys.argv[1]), sys.argv[2], sys.argv[3]
    seconds = sys.argv[4] if len(sys.argv) > 4 else "60"
    with netbed.Testbed(clusters=1, hosts=2, intra_gbit=4.0) as bed:
        bed.lossy(loss)
        addr = bed.host_addr(0, 0)
        server = bed.popen(0, 0, [sys.executable, __file__, "serve", addr, rto, uto], env=None)
        time.sleep(0.5)
        sender = bed.popen(0, 1, [sys.executable, __file__, "send", addr, rto, uto, seconds], env=None)
        try:
            sender.wait(timeout=float(seconds) + 240)
        except Exception:
            print(f"the sender had not finished {float(seconds) + 240:.0f} s after it started", flush=True)
        server.kill()


if __name__ == "__main__":
    main()
