"""A TCP port for a job's rendezvous, as the C API's ai_rendezvous_port
picks one (src/comm/transport/tcp.c)."""
import random
import socket

LOWEST, MIN_SPAN, TRIES = 10000, 1000, 64


def _ephemeral_range():
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            lo, hi = (int(x) for x in f.read().split()[:2])
            return lo, hi
    except (OSError, ValueError):
        return 32768, 60999  # Linux's default


def _bindable(host, port):
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError:
            return None
        return s.getsockname()[1]


def rendezvous_port(host="127.0.0.1"):
    """A port free on host now, drawn at random below the kernel's ephemeral
    range (net.ipv4.ip_local_port_range), or above it if that leaves fewer
    than 1000 ports. The kernel hands ephemeral ports to every outgoing
    connect and to bind(0): one of those (another job's, or this job's own
    ranks starting up) can take a port there before rank 0 listens on it;
    below the range only an explicit bind collides. Falls back to the
    kernel's pick."""
    lo, hi = _ephemeral_range()
    base, span = LOWEST, lo - LOWEST
    if span < MIN_SPAN:
        base, span = hi + 1, 65536 - (hi + 1)
    rng = random.SystemRandom()
    for _ in range(TRIES if span >= MIN_SPAN else 0):
        port = _bindable(host, base + rng.randrange(span))
        if port:
            return port
    return _bindable(host, 0)
