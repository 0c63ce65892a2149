"""A userspace network link between two TUN devices: delays, drops or cuts IP packets, like ``tc netem``.

Why it exists: the kernel these tests run on has no ``sch_netem`` (``tc qdisc add … netem`` answers
"Specified qdisc kind is unknown"), no tc classifiers or actions and no iptables, so the link a test
impairs is this process: every packet between a worker "machine" (a network namespace) and the server
side crosses it, and it holds each one back ``delay`` seconds, drops a ``loss`` fraction at random and,
while ``cut``, drops them all (a partition: packets vanish, as on a dead route — no RST, no ICMP).

Run as root: ``python link_relay.py NAME_A:NAME_B [...]`` creates one TUN pair per argument (the
caller moves one end into its namespace and sets the addresses), prints ``ready`` and then obeys
lines on stdin, each answered ``ok``::

    set NAME_A delay=0.15 loss=0.05 cut=0

The devices vanish when the process exits (they are not persistent). It imports nothing from evaljobs.
"""
from __future__ import annotations

import fcntl
import heapq
import os
import random
import select
import struct
import sys
import threading
import time

TUNSETIFF = 0x400454CA
IFF_TUN, IFF_NO_PI = 0x0001, 0x1000


def open_tun(name: str) -> int:
    fd = os.open("/dev/net/tun", os.O_RDWR | os.O_NONBLOCK)
    fcntl.ioctl(fd, TUNSETIFF, struct.pack("16sH", name.encode(), IFF_TUN | IFF_NO_PI))
    return fd


class Link:
    def __init__(self, a: str, b: str):
        self.name = a
        self.fds = (open_tun(a), open_tun(b))
        self.delay = 0.0
        self.loss = 0.0
        self.cut = False
        self.dropped = 0
        self.passed = 0


def main() -> None:
    links = [Link(*arg.split(":")) for arg in sys.argv[1:]]
    by_name = {link.name: link for link in links}
    peer = {}
    for link in links:
        a, b = link.fds
        peer[a], peer[b] = (link, b), (link, a)
    lock = threading.Lock()
    due: list[tuple[float, int, int, bytes]] = []  # (when, seq, fd, packet)
    seq = 0
    rng = random.Random()

    def commands() -> None:
        for line in sys.stdin:
            words = line.split()
            if words[:1] == ["set"] and words[1] in by_name:
                link = by_name[words[1]]
                with lock:
                    for word in words[2:]:
                        key, value = word.split("=")
                        if key == "cut":
                            link.cut = value == "1"
                        else:
                            setattr(link, key, float(value))
                print("ok", flush=True)
            elif words[:1] == ["stats"]:
                print(" ".join(f"{x.name}:passed={x.passed},dropped={x.dropped}" for x in links), flush=True)
            else:
                print(f"error: {line.strip()}", flush=True)
        os._exit(0)  # stdin closed: the test is gone

    threading.Thread(target=commands, daemon=True).start()
    print("ready", flush=True)
    fds = list(peer)
    while True:
        now = time.monotonic()
        while due and due[0][0] <= now:
            _, _, fd, packet = heapq.heappop(due)
            try:
                os.write(fd, packet)
            except OSError:
                pass  # the device is down (the namespace is being torn down): the packet is lost
        wait = 0.2 if not due else max(0.0, due[0][0] - now)
        readable, _, _ = select.select(fds, [], [], wait)
        for fd in readable:
            link, out = peer[fd]
            while True:
                try:
                    packet = os.read(fd, 65535)
                except BlockingIOError:
                    break
                except OSError:
                    break
                with lock:
                    dropped = link.cut or (link.loss and rng.random() < link.loss)
                    delay = link.delay
                if dropped:
                    link.dropped += 1
                    continue
                link.passed += 1
                if delay:
                    seq += 1
                    heapq.heappush(due, (time.monotonic() + delay, seq, out, packet))
                else:
                    try:
                        os.write(out, packet)
                    except OSError:
                        pass


if __name__ == "__main__":
    main()
