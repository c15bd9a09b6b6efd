"""server/sched.go: which models are loaded, and for how long after their last request.

- A request loads its model (one runner per model file, schedulerModelKey) with the request's keep_alive, else
  OLLAMA_KEEP_ALIVE (load); a request to a loaded model takes its keep_alive only when it gives one
  (useLoadedRunner) and stops the expiry timer while it runs.
- When a runner's last request ends (processCompleted): keep_alive 0 unloads it at once; otherwise it expires
  keep_alive later, and expires_at says when. A runner still in use that never went idle shows now + keep_alive
  (loadedModels).
- expireRunner (keep_alive 0 with an empty prompt): expires_at becomes now, and it unloads once idle.
- load holds the new runner's refMu until the runner is up (`runner.refMu.Lock() // hold lock until running or
  aborted`), and loadedModels takes each runner's refMu: so GET /api/ps waits for a whole load, and so does a
  second request to the model being loaded.
The runner is not a process here: a load takes STANDIN_OLLAMA_LOAD_SECONDS (0: instant; a stand-in knob, as a real
load's time is the model's size over the disk's rate), its size is the model file's, all of it in VRAM.
"""

import os
import threading
import time

from .gotypes import MAX_DURATION
from .manifest import Model


class Runner:
    def __init__(self, model: Model, session_ns: int, context_length: int):
        self.model, self.session_ns, self.context_length = model, session_ns, context_length
        self.refs = 0
        self.expires_at_ns: int | None = None  # the zero time.Time until it first goes idle
        self.expiring = False  # the expiry timer runs
        self.ref_mu = threading.Lock()  # runnerRef.refMu: held by a load until the runner is up

    def size(self) -> int:
        try:
            return os.path.getsize(self.model.model_path)
        except OSError:
            return 0


class Scheduler:
    def __init__(self):
        self.loaded: dict[str, Runner] = {}
        self.lock = threading.Lock()
        threading.Thread(target=self._expire_loop, daemon=True).start()

    def acquire(self, model: Model, keep_alive_ns: int | None, default_ns: int, context_length: int) -> Runner:
        key = model.model_path or f"digest:{model.manifest.digest}"
        loading = False
        with self.lock:
            runner = self.loaded.get(key)
            if runner is None:
                runner = Runner(model, default_ns if keep_alive_ns is None else keep_alive_ns, context_length)
                runner.ref_mu.acquire()  # sched.go load: taken before the runner is published in s.loaded
                self.loaded[key] = runner
                loading = True
            elif keep_alive_ns is not None:
                runner.session_ns = keep_alive_ns
            runner.model = model
            runner.refs += 1
            runner.expiring = False
        if loading:
            try:
                time.sleep(float(os.environ.get("STANDIN_OLLAMA_LOAD_SECONDS") or 0))  # llama.WaitUntilRunning
            finally:
                runner.ref_mu.release()
        else:
            with runner.ref_mu:  # a load under way: its requests wait for it too
                pass
        return runner

    def release(self, runner: Runner) -> None:
        with self.lock:
            runner.refs -= 1
            if runner.refs > 0:
                return
            if runner.session_ns <= 0:
                self._unload(runner)
            else:
                runner.expiring = True
                runner.expires_at_ns = _add(time.time_ns(), runner.session_ns)

    def expire(self, model: Model) -> None:
        key = model.model_path or f"digest:{model.manifest.digest}"
        with self.lock:
            runner = self.loaded.get(key)
            if runner is None:
                return
            runner.expires_at_ns = time.time_ns()
            runner.session_ns = 0
            runner.expiring = False
            if runner.refs <= 0:
                self._unload(runner)

    def loaded_models(self) -> list[tuple[Runner, int]]:
        """Each loaded runner with its expiry in ns since the epoch."""
        with self.lock:
            runners = list(self.loaded.values())
        found = []
        for r in runners:
            with r.ref_mu:  # loadedModels locks each runner's refMu: it waits for a load under way
                expires = r.expires_at_ns if r.expires_at_ns is not None else _add(time.time_ns(), r.session_ns)
                found.append((r, expires))
        return found

    def _unload(self, runner: Runner) -> None:
        for key, loaded in list(self.loaded.items()):
            if loaded is runner:
                del self.loaded[key]

    def _expire_loop(self) -> None:
        while True:
            time.sleep(0.05)
            now = time.time_ns()
            with self.lock:
                for runner in list(self.loaded.values()):
                    if runner.expiring and runner.refs <= 0 and runner.expires_at_ns <= now:
                        self._unload(runner)


def _add(now_ns: int, duration_ns: int) -> int:
    """time.Time.Add of a duration that may be math.MaxInt64 ("forever")."""
    return now_ns + min(duration_ns, MAX_DURATION)
