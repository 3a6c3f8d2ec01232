"""A plain TCP stream in both directions at once: the baseline two_hosts.sh compares uccl to.

    python socket_stream.py server ADDR PORT      # accepts one connection, echoes nothing
    python socket_stream.py client ADDR PORT SECS # prints bit/s per direction (the slower one)

One connection, each side sending and receiving 4 MiB writes on two threads: what any
application gets from the link with no library in between (a ring all_reduce also sends and
receives at the same time on one link).
"""
import socket
import sys
import threading
import time

CHUNK = 4 << 20


def pump(sock, secs, out, key):
    buf = memoryview(bytearray(CHUNK))
    sent, t0 = 0, time.perf_counter()
    while time.perf_counter() - t0 < secs:
        sent += sock.send(buf)
    out[key] = sent * 8 / (time.perf_counter() - t0)
    sock.shutdown(socket.SHUT_WR)


def drain(sock, out, key):
    buf = bytearray(CHUNK)
    got, t0 = 0, time.perf_counter()
    while True:
        n = sock.recv_into(buf)
        if n == 0:
            break
        got += n
    out[key] = got * 8 / (time.perf_counter() - t0)


def both(sock, secs):
    out = {}
    threads = [threading.Thread(target=pump, args=(sock, secs, out, "tx")),
               threading.Thread(target=drain, args=(sock, out, "rx"))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return out


def main():
    mode, addr, port = sys.argv[1], sys.argv[2], int(sys.argv[3])
    if mode == "server":
        with socket.create_server((addr, port)) as srv:
            conn, _ = srv.accept()
            with conn:
                both(conn, float(sys.argv[4]) if len(sys.argv) > 4 else 5)
        return
    secs = float(sys.argv[4])
    with socket.create_connection((addr, port)) as s:
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        out = both(s, secs)
    print(int(min(out["tx"], out["rx"])))


if __name__ == "__main__":
    main()
