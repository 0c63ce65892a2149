"""A worker "machine" of its own: a Linux network namespace reaching each server over its own link.

The namespace has only its own loopback and one point-to-point link per service (Redis, PostgreSQL,
the provider, RabbitMQ when a test adds it). Each link is a pair of TUN devices joined by
``helpers/link_relay.py`` — a userspace ``tc netem`` (this kernel has no ``sch_netem``, no tc
actions and no iptables): :meth:`Machine.impair` sets a link's delay and loss, :meth:`Machine.cut`
drops every packet (a partition: no RST, no ICMP, packets just vanish) until :meth:`Machine.heal`.

Addresses are in the loopback range only: link ``i`` is ``127.<base>.<i>.1`` on the server side (the
root namespace, where every 127/8 address is local, so a server can listen on it) and
``127.<base>.<i>.2`` inside the machine; ``route_localnet`` is set on both ends, since Linux otherwise
refuses to route 127/8 over a non-loopback device. A server reached through link ``i`` listens on
:meth:`Machine.server_host` (the test process, in the root namespace, reaches it there directly).

Everything is torn down by :meth:`Machine.close` (the relay's exit removes its devices; the namespace
is deleted); a machine that cannot be built raises :class:`NetnsError` with what is missing.
"""
from __future__ import annotations

import os
import random
import subprocess
import sys
import uuid
from pathlib import Path

RELAY = Path(__file__).with_name("link_relay.py")


class NetnsError(RuntimeError):
    pass


def _ip(*args: str, netns: str | None = None) -> None:
    command = (["ip", "netns", "exec", netns] if netns else []) + list(args)
    done = subprocess.run(command, capture_output=True, text=True, timeout=30)
    if done.returncode != 0:
        raise NetnsError(f"`{' '.join(command)}` failed: {(done.stderr or done.stdout).strip()}")


def _sysctl(setting: str, netns: str | None = None) -> None:
    _ip("sysctl", "-qw", setting, netns=netns)


def _sweep() -> None:
    """Delete the namespaces of test processes that were killed before their finalizers ran (SIGKILL, a
    timeout): named ``evaljobs-<pid>-<tag>``, with no process ``pid`` any more."""
    listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, timeout=30).stdout
    for line in listed.splitlines():
        name = line.split()[0] if line.split() else ""
        parts = name.split("-")
        if len(parts) == 3 and parts[0] == "evaljobs" and parts[1].isdigit():
            try:
                os.kill(int(parts[1]), 0)
            except ProcessLookupError:
                subprocess.run(["ip", "netns", "del", name], capture_output=True, timeout=30)
            except PermissionError:
                pass


class Machine:
    """A network namespace with one impairable link per named service (see the module docstring)."""

    def __init__(self, services: list[str]):
        if os.geteuid() != 0:
            raise NetnsError("the network-fault tests build network namespaces and TUN devices: run them as "
                             "root (CI does)")
        _sweep()
        tag = uuid.uuid4().hex[:5]
        self.name = f"evaljobs-{os.getpid()}-{tag}"  # the pid: a later run sweeps it if this one was killed
        self.base = random.randint(100, 250)  # 127.<base>.0.0/16: apart from other machines' links
        self.services = list(services)
        self.relay: subprocess.Popen | None = None
        self._created = False
        try:
            _ip("ip", "netns", "add", self.name)
            self._created = True
            _ip("ip", "link", "set", "lo", "up", netns=self.name)
            pairs = [(f"ej{tag}{i}s", f"ej{tag}{i}m") for i in range(len(services))]
            self.relay = subprocess.Popen([sys.executable, str(RELAY), *(f"{s}:{m}" for s, m in pairs)],
                                          stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
            if self.relay.stdout.readline().strip() != "ready":
                raise NetnsError(f"the link relay did not start (exit {self.relay.poll()}): /dev/net/tun "
                                 "is needed")
            self._links = {}
            for i, (service, (server_end, machine_end)) in enumerate(zip(services, pairs), start=1):
                near, far = self._address(i, 1), self._address(i, 2)
                _ip("ip", "link", "set", machine_end, "netns", self.name)
                _ip("ip", "addr", "add", far, "peer", near, "dev", machine_end, netns=self.name)
                _ip("ip", "link", "set", machine_end, "up", netns=self.name)
                _sysctl(f"net.ipv4.conf.{machine_end}.route_localnet=1", self.name)
                _ip("ip", "addr", "add", near, "peer", far, "dev", server_end)
                _ip("ip", "link", "set", server_end, "up")
                _sysctl(f"net.ipv4.conf.{server_end}.route_localnet=1")
                self._links[service] = server_end
        except BaseException:
            self.close()
            raise

    def _address(self, link: int, end: int) -> str:
        return f"127.{self.base}.{link}.{end}"

    def server_host(self, service: str) -> str:
        """Where a server for ``service`` listens so that this machine reaches it over its link."""
        return self._address(self.services.index(service) + 1, 1)

    def command(self, *args: str) -> list[str]:
        """``args`` run inside the machine (``ip netns exec``: the same process, in this namespace)."""
        return ["ip", "netns", "exec", self.name, *args]

    def _set(self, service: str, **values: float) -> None:
        assert self.relay is not None and self.relay.stdin is not None and self.relay.stdout is not None
        words = " ".join(f"{key}={value:g}" for key, value in values.items())
        self.relay.stdin.write(f"set {self._links[service]} {words}\n")
        self.relay.stdin.flush()
        answer = self.relay.stdout.readline().strip()
        if answer != "ok":
            raise NetnsError(f"the link relay refused 'set {service} {words}': {answer!r}")

    def impair(self, *, delay: float, loss: float, services: list[str] | None = None) -> None:
        """Hold every packet back ``delay`` seconds and drop a ``loss`` fraction, each way, on the links of
        ``services`` (default: all): a round trip costs ``2 * delay`` more."""
        for service in services or self.services:
            self._set(service, delay=delay, loss=loss)

    def cut(self, service: str) -> None:
        """Drop every packet between the machine and ``service`` (both ways) until :meth:`heal`."""
        self._set(service, cut=1)

    def heal(self, service: str) -> None:
        self._set(service, cut=0)

    def close(self) -> None:
        if self.relay is not None and self.relay.poll() is None:
            self.relay.kill()  # its TUN devices go with it
            self.relay.wait(10)
        if self._created:
            subprocess.run(["ip", "netns", "del", self.name], capture_output=True, timeout=30)
            self._created = False

    def __enter__(self) -> "Machine":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
