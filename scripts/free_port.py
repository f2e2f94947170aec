"""Prints (or returns) a loopback port that is free now and outside the kernel's ephemeral range.

A port found by binding port 0 lies in the ephemeral range: before the server meant to have it
binds it, any outgoing connection (an agent dialling dtd, the CLI calling moto) may take it as its
source port, and the server then fails with "Address already in use". Ports below that range are
never handed out as source ports. The same rule as tests/integration/support/ports.rs.
"""
import random
import socket


def outside_ephemeral():
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            low, high = (int(n) for n in f.read().split())
    except (OSError, ValueError):
        low, high = 32768, 60999
    below, above = range(10000, max(low, 10000)), range(max(high + 1, 10000), 65535)
    return below if len(below) >= len(above) else above


def free_port():
    ports = outside_ephemeral()
    for port in random.sample(ports, min(len(ports), 500)):
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise SystemExit(f"no free loopback port in {ports.start}-{ports.stop - 1}")


if __name__ == "__main__":
    print(free_port())
