"""What the bench drivers share (bench/chaos, bench/train-compare,
bench/train-faults, bench/plan-fidelity): where things are, the testbed
(its lock, up and down, its nodes, a command run as a node's process), free
ports, the training job's command, one child at a time under a signal,
and the pieces of an SVG plot (round ticks, a framed panel).

A driver puts bench/lib on sys.path and imports this module:

    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "lib"))
    import benchlib as bl
"""
import contextlib
import fcntl
import json
import math
import os
import signal
import socket
import subprocess
import sys
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TESTBED = os.path.join(ROOT, "bench", "testbed")
# One emulated cluster at a time: bench/testbed's users take this lock
# (tests/test_testbed.sh too) for the whole of up .. down.
LOCK = "/run/lock/autoinfra-testbed.lock"
STATE = os.environ.get("TESTBED_STATE", "/run/autoinfra-testbed")
PY = "/usr/bin/python3"  # Debian's torch is installed for this python only

# The training job: the package autoinfra.train, from this checkout's python/
# (put on PYTHONPATH for every child, so that each rank, wherever it runs,
# finds it).
TRAIN = ["-m", "autoinfra.train"]
os.environ["PYTHONPATH"] = os.pathsep.join(
    [os.path.join(ROOT, "python")] + [p for p in [os.environ.get("PYTHONPATH")] if p])


def die(prog, msg, code=2):
    """prog: msg on stderr, exit status code."""
    print("%s: %s" % (prog, msg), file=sys.stderr)
    sys.exit(code)


def write(path, text):
    with open(path, "w") as f:
        f.write(text)


def bin_path(prog):
    """The autoinfra binary: $AUTOINFRA_BIN, else build/autoinfra."""
    b = os.environ.get("AUTOINFRA_BIN") or os.path.join(ROOT, "build", "autoinfra")
    if not os.access(b, os.X_OK):
        die(prog, "no autoinfra binary at %s (make build, or set AUTOINFRA_BIN)" % b)
    return os.path.abspath(b)


def free_port():
    """A loopback port free now, below the ephemeral range (autoinfra.ports:
    no rank's connect or bind(0) takes it before its listener is up)."""
    sys.path.insert(0, os.path.join(ROOT, "python"))
    from autoinfra.ports import rendezvous_port
    return rendezvous_port()


class PortPool:
    """Ports for jobs that run at once, below the ephemeral range (20000-31999,
    where bench/testbed's ranks draw theirs too): free now and not handed to
    another running job until release(). rng: a random.Random of the
    caller's own (not a seeded stream, which must not depend on what is
    free)."""

    def __init__(self):
        self.mu = threading.Lock()
        self.taken = set()

    def take(self, rng):
        for _ in range(200):
            port = rng.randrange(20000, 32000)
            with self.mu:
                if port in self.taken:
                    continue
                with socket.socket() as s:
                    try:
                        s.bind(("127.0.0.1", port))
                    except OSError:
                        continue
                self.taken.add(port)
                return port
        raise RuntimeError("no free port in 20000-31999 after 200 draws")

    def release(self, port):
        with self.mu:
            self.taken.discard(port)


# ---------------------------------------------------------------- command lines

def add_where(p, scenario_what, local_what=None):
    """The drivers' SCENARIO (bench/scenarios/NAME.json or a spec path) and,
    with local_what, --local N: where the ranks run."""
    p.add_argument("scenario", nargs="?",
                   help="T0..T6 (bench/scenarios) or a cluster spec path: %s" % scenario_what)
    if local_what is not None:
        p.add_argument("--local", type=int, metavar="N",
                       help="N ranks on this machine instead of a scenario%s (default: none, a "
                            "SCENARIO runs)" % local_what)


def add_outputs(p, json_what, svg_what, txt_what=None):
    """--json, --svg, --txt (with txt_what) and --replot (redraw --svg from an
    earlier --json, running nothing)."""
    p.add_argument("--json", metavar="FILE", help="write %s here (default: none)" % json_what)
    if txt_what:
        p.add_argument("--txt", metavar="FILE", help="write %s here (default: none)" % txt_what)
    p.add_argument("--svg", metavar="FILE", help="write %s here (default: none)" % svg_what)
    p.add_argument("--replot", metavar="JSON",
                   help="run nothing: draw --svg from this earlier --json (default: run)")


def scenario_spec(prog, name):
    """The cluster spec of a SCENARIO: a file of that path, else
    bench/scenarios/NAME.json; an absolute path."""
    for cand in (name, os.path.join(ROOT, "bench", "scenarios", name + ".json")):
        if os.path.isfile(cand):
            return os.path.abspath(cand)
    die(prog, "no scenario '%s' (neither a file nor bench/scenarios/%s.json)" % (name, name))


def check_where(prog, a, lo, hi):
    """After add_where(.., local) and add_outputs: --replot alone (returns
    True), else exactly one of SCENARIO (a.spec, a.name its file's name) and
    --local N with lo <= N <= hi (a.name localN)."""
    local = getattr(a, "local", None)
    if a.replot:
        if not a.svg or a.scenario is not None or local is not None:
            die(prog, "--replot JSON takes --svg FILE and nothing to run (no SCENARIO, no --local)")
        return True
    if (a.scenario is None) == (local is None):
        die(prog, "give a SCENARIO or --local N (one of them)")
    if local is not None:
        if not lo <= local <= hi:
            die(prog, "--local takes %d..%d ranks, not %d" % (lo, hi, local))
        a.spec, a.name = None, "local%d" % local
    else:
        a.spec = scenario_spec(prog, a.scenario)
        a.name = os.path.splitext(os.path.basename(a.spec))[0]
    return False


def read_json(prog, path):
    """A JSON file's object; its errors name the file (exit status 1)."""
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError) as e:
        die(prog, "%s: %s" % (path, e), 1)


# ---------------------------------------------------------------- testbed

def spec_nodes(prog, path):
    """{node name: nominal speed} of a cluster spec, as bench/testbed names
    the nodes (GROUP-INDEX) after overrides."""
    try:
        with open(path) as f:
            spec = json.load(f)
        nodes = {}
        for g in spec["node_groups"]:
            for i in range(int(g.get("count", 1))):
                nodes["%s-%d" % (g["name"], i)] = float(g.get("speed", 1))
        for o in spec.get("overrides", []):
            if o.get("node") in nodes and "speed" in o:
                nodes[o["node"]] = float(o["speed"])
        return nodes
    except (OSError, ValueError, KeyError, TypeError) as e:
        die(prog, "cannot read the cluster spec %s: %s" % (path, e))


def testbed_nodes():
    """The running testbed's nodes, in rank order: dicts of name, ns
    (namespace), addr, devices, gbps (bench/testbed's state file)."""
    nodes = []
    with open(os.path.join(STATE, "nodes")) as f:
        for line in f:
            if line.strip():
                name, ns, addr, devices, gbps = line.split()[:5]
                nodes.append({"name": name, "ns": ns, "addr": addr, "devices": int(devices),
                              "gbps": float(gbps)})
    return nodes


def testbed_there():
    """Every namespace of the testbed's state file still exists."""
    try:
        return all(os.path.exists("/run/netns/" + n["ns"]) for n in testbed_nodes())
    except (OSError, ValueError):
        return False


def node_cmd(node, argv):
    """argv run as one process of the testbed's node `node` (its namespace
    and CPU cgroup; the pid is the process's own); argv itself for None
    (this machine)."""
    return list(argv) if node is None else [TESTBED, "exec", node, "--"] + list(argv)


def job_cmd(argv, timeout, binp=None, local=None, per_node=1):
    """One job of argv: `local` ranks on this machine through autoinfra
    launch, or (local None) per_node ranks on every testbed node through
    bench/testbed run; stopped after timeout seconds."""
    if local is not None:
        return [binp, "launch", "-n", str(local), "--timeout", str(timeout), "--"] + list(argv)
    return [TESTBED, "run", "-n", str(per_node), "--timeout", str(timeout), "--"] + list(argv)


@contextlib.contextmanager
def testbed(prog, spec, binp=None, wait_s=900):
    """The emulated cluster of spec, up for the with block and down on every
    way out of it: the testbed lock taken first (waiting at most wait_s
    for another user), released last. Needs root."""
    if os.geteuid() != 0:
        die(prog, "needs root (network namespaces, tc); --local N runs without the testbed")
    lock = open(LOCK, "w")
    try:
        t0 = time.monotonic()
        while True:
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() - t0 > wait_s:
                    die(prog, "another bench (or test_testbed) held %s for %d s" % (LOCK, wait_s), 1)
                if time.monotonic() - t0 < 1:
                    print("%s: waiting for %s (another bench or test_testbed)" % (prog, LOCK),
                          file=sys.stderr)
                time.sleep(1)
        try:
            env = dict(os.environ, AUTOINFRA_BIN=binp) if binp else None
            if subprocess.run([TESTBED, "up", spec], env=env, stdout=sys.stderr).returncode:
                die(prog, "bench/testbed up %s failed" % spec, 1)
            yield
        finally:
            if subprocess.run([TESTBED, "down"], stdout=subprocess.DEVNULL).returncode:
                print("%s: WARNING: bench/testbed down failed" % prog, file=sys.stderr)
    finally:
        lock.close()


# ---------------------------------------------------------------- the training job

# The bucket caps of the jobs that learn the links for the planner: 25 MiB
# (DDP's default: the first 1 MiB and one large rest) and 4 MiB (mid-sized
# buckets), so that the KB holds the sizes plans ask for.
LEARN_CAPS = ("25", "4")


def learn_links(nodes, shape, learn):
    """The learner's timings of the links for the planner: every node
    shaped to one speed (the fastest's) while learn(cap) runs one autoinfra
    job per cap of LEARN_CAPS, then each node back at its own speed (on
    every exit path). At one speed the ranks reach each bucket's allreduce
    together: the learner's time of a call is the slowest rank's, arrival
    wait included, and at the nodes' own speeds it would hold the seconds
    the fast ranks wait for the slow ones' backward, no cost of the links
    (the planner counts that wait itself). shape(node, speed) sets a
    node's speed; learn(cap) returns False when its job failed. Returns
    the learning speed, or None when a learning job failed."""
    one = max(nodes.values())
    moved = [n for n, sp in nodes.items() if sp != one]
    try:
        for n in moved:
            shape(n, one)
        for cap in LEARN_CAPS:
            if not learn(cap):
                return None
    finally:
        for n in moved:
            shape(n, nodes[n])
    return one


class Runner:
    """Runs one child at a time; on SIGINT, SIGTERM or SIGHUP it stops the
    child, then exits through the callers' finally blocks (which take the
    testbed down)."""

    def __init__(self, prog):
        self.prog, self.child = prog, None
        for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            signal.signal(s, self.on_signal)

    def on_signal(self, sig, frame):
        raise SystemExit("%s: signal %d; stopping" % (self.prog, sig))

    def stop(self):
        c, self.child = self.child, None
        if c and c.poll() is None:
            c.terminate()
            try:
                c.wait(5)
            except subprocess.TimeoutExpired:
                c.kill()
                c.wait()

    def run(self, cmd, env, timeout, watch=None):
        """The child's exit status (124 past timeout seconds). watch(line):
        called with every line of the child's output, which is passed on
        to ours."""
        self.child = subprocess.Popen(cmd, env=env, start_new_session=False,
                                      stdout=subprocess.PIPE if watch else None, text=True)
        reader = None
        if watch:
            def pump(f):
                for line in f:
                    sys.stdout.write(line)
                    sys.stdout.flush()
                    watch(line)
            reader = threading.Thread(target=pump, args=(self.child.stdout,), daemon=True)
            reader.start()
        try:
            rc = self.child.wait(timeout)
            if reader:
                reader.join(5)
            return rc
        except subprocess.TimeoutExpired:
            print("%s: run exceeded %d s; stopped" % (self.prog, timeout), file=sys.stderr)
            return 124
        finally:
            self.stop()


# ---------------------------------------------------------------- SVG

def nice_ticks(lo, hi, n=5):
    """Round ticks (1, 2 or 5 x a power of ten apart) covering lo..hi, about
    n of them: (axis lo, axis hi, ticks)."""
    if hi <= lo:
        hi = lo + 1
    raw = (hi - lo) / max(1, n - 1)
    p = 10 ** math.floor(math.log10(raw))
    step = next(m * p for m in (1, 2, 5, 10) if m * p >= raw)
    a, b = math.floor(lo / step) * step, math.ceil(hi / step) * step
    return a, b, [a + i * step for i in range(int(round((b - a) / step)) + 1)]


def fmt_tick(v):
    return ("%.6f" % v).rstrip("0").rstrip(".")


def svg_begin(w, h, title=None, font_size=12):
    """The opening elements of a plot w x h on white, with its title."""
    parts = ['<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" font-family="sans-serif" '
             'font-size="%d">' % (w, h, font_size), '<rect width="100%" height="100%" fill="white"/>']
    if title:
        parts.append('<text x="10" y="18" font-size="14">%s</text>' % title)
    return parts


def svg_end(parts):
    return "\n".join(parts + ["</svg>"]) + "\n"


class Panel:
    """A framed plot area at (x0, y0), pw x ph, for values ylo..yhi against
    steps 1..n: its frame, title, y grid with round ticks and x ticks are
    drawn by draw(); X(step) and Y(value) place points."""

    def __init__(self, x0, y0, pw, ph, ylo, yhi, n, yticks=5, xticks=5):
        self.x0, self.y0, self.pw, self.ph, self.n = x0, y0, pw, ph, n
        self.lo, self.hi, self.yt = nice_ticks(ylo, yhi, yticks)
        self.xt = [t for t in nice_ticks(1, n, xticks)[2] if 1 <= t <= n]

    def X(self, step):
        return self.x0 + (step - 1) / max(1, self.n - 1) * self.pw

    def Y(self, v):
        return self.y0 + self.ph - (v - self.lo) / (self.hi - self.lo) * self.ph

    def draw(self, parts, title, xtitle="step"):
        x0, y0, pw, ph = self.x0, self.y0, self.pw, self.ph
        parts.append('<rect x="%.1f" y="%d" width="%.1f" height="%d" fill="none" stroke="#888"/>'
                     % (x0, y0, pw, ph))
        parts.append('<text x="%.1f" y="%d">%s</text>' % (x0, y0 - 6, title))
        for v in self.yt:
            parts.append('<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#eee"/>'
                         % (x0, self.Y(v), x0 + pw, self.Y(v)))
            parts.append('<text x="%.1f" y="%.1f" text-anchor="end">%s</text>'
                         % (x0 - 4, self.Y(v) + 4, fmt_tick(v)))
        for t in self.xt:
            parts.append('<text x="%.1f" y="%d" text-anchor="middle">%d</text>'
                         % (self.X(t), y0 + ph + 14, t))
        parts.append('<text x="%.1f" y="%d" text-anchor="middle">%s</text>'
                     % (x0 + pw / 2, y0 + ph + 30, xtitle))

    def curve(self, parts, values, color, width=1.5, first=1):
        """values[i] at step first + i."""
        pts = " ".join("%.1f,%.1f" % (self.X(first + i), self.Y(v)) for i, v in enumerate(values))
        parts.append('<polyline fill="none" stroke="%s" stroke-width="%g" points="%s"/>'
                     % (color, width, pts))
