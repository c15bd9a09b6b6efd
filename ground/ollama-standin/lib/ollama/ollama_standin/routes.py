"""server/routes.go's handlers, answering with api/types.go's shapes (docs/api.md shows them).

- GET/HEAD / "Ollama is running"; GET/HEAD /api/version {"version"}; GET/HEAD /api/tags (ListHandler:
  model_list_cache.go); GET /api/ps (PsHandler: longest time left first); POST /api/pull (PullHandler:
  download.py; "stream": false answers the last progress, "status": "success", or a 500 {"error"});
  POST /api/show (ShowHandler, GetModelInfo); DELETE /api/delete (DeleteHandler); POST /api/generate
  (GenerateHandler) and POST /api/chat (ChatHandler).
- Names: parseAndValidateModelRef (model_resolver.go): an empty name, an invalid one ("invalid model name", 400);
  getExistingName spells each part as an existing manifest does. An unknown model is 404
  {"error": "model '<name as asked>' not found"} (show says the name as DisplayShortest spells it).
- keep_alive (api.Duration.UnmarshalJSON): a number of seconds or a Go duration; negative is forever. An empty
  prompt (no messages for chat) with keep_alive 0 unloads ("done_reason": "unload"); an empty prompt loads
  ("done_reason": "load").
- Generation: the stand-in has no model. Its answer is a fixed sentence, one word a chunk,
  STANDIN_OLLAMA_TOKEN_SECONDS (0.01) apart; options.num_predict cuts it ("done_reason": "length", else "stop").
  Token counts are words; "context" is a hash of each word of prompt and answer.
Routes upstream has and the stand-in leaves out answer 501 {"error": "the Ollama stand-in does not imitate ..."}.
"""

import os
import re
import struct
import time
import zlib

from . import VERSION, envconfig, manifest
from .download import PullError, pull_model
from .gotypes import MAX_DURATION, SECOND, format_time, parse_duration, quote
from .names import Name, parse_name
from .sched import Scheduler
from .server import BadRequest, ClientGone, Ctx, Stream, go_kind

REPLY = "The Ollama stand-in has no model to answer with; this is its fixed reply."
DEFAULT_NUM_CTX = 4096  # Serve's default_num_ctx below 23 GiB of VRAM: the stand-in sees no GPU
NOT_IMITATED = [("POST", "/api/push"), ("POST", "/api/create"), ("POST", "/api/copy"), ("POST", "/api/embed"),
                ("POST", "/api/embeddings"), ("GET", "/api/status"), ("POST", "/api/me"), ("POST", "/api/signout"),
                ("DELETE", "/api/user/keys/"), ("POST", "/api/blobs/"), ("HEAD", "/api/blobs/"),
                ("POST", "/api/experimental/web_search"), ("POST", "/api/experimental/web_fetch"),
                ("GET", "/api/experimental/model-recommendations"), ("POST", "/v1/chat/completions"),
                ("POST", "/v1/completions"), ("POST", "/v1/embeddings"), ("GET", "/v1/models"), ("GET", "/v1/models/"),
                ("POST", "/v1/responses"), ("POST", "/v1/audio/transcriptions"), ("POST", "/v1/messages")]  # fmt: skip
THINK_ERROR = 'think must be a boolean or string ("high", "medium", "low", "max", true, or false)'


class ModelRequired(Exception):
    pass


class Unqualified(Exception):
    pass


def model_ref(raw: str) -> Name:
    """parseAndValidateModelRef: modelref.ParseRef trims it; the parsed name must be fully qualified."""
    raw = raw.strip()
    if not raw:
        raise ModelRequired()
    n = parse_name(raw)
    if not n.is_valid():
        raise Unqualified()
    return n


def keep_alive_of(req: dict) -> int | None:
    """api.Duration.UnmarshalJSON, in nanoseconds; None when the request gives none."""
    value = req.get("keep_alive")
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        kind = {bool: "bool", list: "[]interface {}", dict: "map[string]interface {}"}[type(value)]
        raise BadRequest(f"Unsupported type: '{kind}'")
    if isinstance(value, str):
        try:
            ns = parse_duration(value)
        except ValueError as e:
            raise BadRequest(str(e)) from None
        return MAX_DURATION if ns < 0 else ns
    return MAX_DURATION if value < 0 else int(value * SECOND)


def think_of(req: dict) -> bool | None:
    value = req.get("think")
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, str) and value in ("high", "medium", "low", "max"):
        return True
    raise BadRequest(THINK_ERROR)


def _words(text: str) -> list[str]:
    return re.findall(r"\s*\S+", text)


def _param(value) -> str:
    """fmt's %v of a JSON value."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def _modelfile_quote(s: str) -> str:  # parser/parser.go quote
    if "\n" in s or s.startswith(" ") or s.endswith(" "):
        return f'"""{s}"""' if '"' in s else f'"{s}"'
    return s


class App:
    def __init__(self):
        self.sched = Scheduler()
        self.token_seconds = float(os.environ.get("STANDIN_OLLAMA_TOKEN_SECONDS", "0.01"))

    def routes(self) -> dict:
        return {
            "/": {"GET": self.root, "HEAD": self.root},
            "/api/version": {"GET": self.version, "HEAD": self.version},
            "/api/tags": {"GET": self.tags, "HEAD": self.tags},
            "/api/pull": {"POST": self.pull},
            "/api/show": {"POST": self.show},
            "/api/delete": {"DELETE": self.delete},
            "/api/ps": {"GET": self.ps},
            "/api/generate": {"POST": self.generate},
            "/api/chat": {"POST": self.chat},
        }

    def root(self, ctx: Ctx) -> None:
        ctx.send(200, b"Ollama is running", "text/plain; charset=utf-8")

    def version(self, ctx: Ctx) -> None:
        ctx.json(200, {"version": VERSION})

    def tags(self, ctx: Ctx) -> None:
        ctx.json(200, {"models": manifest.list_models()})

    def ps(self, ctx: Ctx) -> None:
        models = []
        for runner, expires in self.sched.loaded_models():
            m, size = runner.model, runner.size()
            name = parse_name(m.short_name).display_shortest()
            models.append((expires // SECOND, {
                "name": name, "model": name, "size": size, "digest": m.manifest.digest,
                "details": {**m.details(), "parent_model": ""}, "expires_at": format_time(expires),
                "size_vram": size, "context_length": runner.context_length,
            }))  # fmt: skip
        models.sort(key=lambda pair: -pair[0])
        ctx.json(200, {"models": [entry for _, entry in models]})

    def pull(self, ctx: Ctx) -> None:
        req = ctx.bind("PullRequest", {"model": "string", "insecure": "bool", "username": "string",
                                       "password": "string", "stream": "bool", "name": "string"})  # fmt: skip
        try:
            n = model_ref(req.get("model") or req.get("name") or "")
        except (ModelRequired, Unqualified):
            return ctx.json(400, {"error": "invalid model name"})
        n = manifest.existing_name(n)
        insecure = bool(req.get("insecure"))
        if req.get("stream") is False:  # waitForStream: the last progress, or the error as a 500
            latest = {}

            def keep(progress: dict) -> None:
                latest.clear()
                latest.update(progress)

            try:
                pull_model(n.display_shortest(), insecure, keep, ctx.client_gone)
            except (PullError, OSError, ValueError) as e:
                return ctx.json(500, {"error": str(e)}, content_type="application/json")
            return ctx.json(200, latest, content_type="application/json")
        out = Stream(ctx)
        try:
            pull_model(n.display_shortest(), insecure, out.send, ctx.client_gone)
        except (PullError, OSError, ValueError) as e:
            out.error(str(e))
        out.end()

    def _model(self, n: Name) -> manifest.Model | None:
        try:
            return manifest.get_model(manifest.existing_name(n))
        except FileNotFoundError:
            return None

    def show(self, ctx: Ctx) -> None:
        req = ctx.bind("ShowRequest", {"model": "string", "system": "string", "template": "string", "verbose": "bool",
                                       "options": "map[string]interface {}", "name": "string"})  # fmt: skip
        asked = req.get("model") or req.get("name") or ""
        if not asked:
            return ctx.json(400, {"error": "model is required"})
        try:
            n = manifest.existing_name(model_ref(asked))
        except ModelRequired:
            return ctx.json(400, {"error": "model is required"})
        except Unqualified:
            return ctx.json(400, {"error": "invalid model name"})
        try:
            m = manifest.get_model(n)
        except FileNotFoundError:
            return ctx.json(404, {"error": f"model '{n.display_shortest()}' not found"})
        try:
            kv = manifest.read_gguf_kv(m.model_path, bool(req.get("verbose")))
        except FileNotFoundError:
            return ctx.json(500, {"error": f"open {m.model_path}: no such file or directory"})
        except (OSError, ValueError, struct.error) as e:
            return ctx.json(500, {"error": str(e)})
        ctx.json(200, self._show(m, kv, req))

    def _show(self, m: manifest.Model, kv: dict, req: dict) -> dict:
        """api.ShowResponse in its field order; empty fields left out as omitempty does."""
        system = req.get("system") or m.system
        options = {**m.options, **(req.get("options") or {})}
        lines = [f"FROM {m.model_path}", f"TEMPLATE {_modelfile_quote(m.template)}"]
        lines += [f"SYSTEM {_modelfile_quote(system)}"] if system else []
        for key, value in options.items():
            lines += [f"PARAMETER {key} {_modelfile_quote(_param(v))}" for v in (value if isinstance(value, list)
                                                                                   else [value])]  # fmt: skip
        lines += [f"LICENSE {_modelfile_quote(text)}" for text in m.licenses]
        modelfile = ('# Modelfile generated by "ollama show"\n# To build a new Modelfile based on this, replace FROM '
                     f"with:\n# FROM {m.short_name}\n\n" + "".join(line + "\n" for line in lines))  # fmt: skip
        values = [(key, v) for key, value in m.options.items() for v in (value if isinstance(value, list) else [value])]
        params = [f"{key:<30} {quote(v) if isinstance(v, str) else _param(v)}" for key, v in values]
        details = m.details()
        if details["quantization_level"] in ("", "unknown") and "general.file_type" in kv:
            details["quantization_level"] = manifest.file_type_name(kv["general.file_type"])
        resp = {"license": "\n".join(m.licenses), "modelfile": modelfile, "parameters": "\n".join(params),
                "template": m.template, "system": system, "details": details,
                "model_info": {k: v for k, v in kv.items() if k not in ("general.name", "tokenizer.chat_template")},
                "capabilities": m.capabilities(), "modified_at": format_time(m.manifest.mtime_ns)}  # fmt: skip
        return {k: v for k, v in resp.items() if v or k in ("details", "model_info")}

    def delete(self, ctx: Ctx) -> None:
        req = ctx.bind("DeleteRequest", {"model": "string", "name": "string"})
        asked = req.get("model") or req.get("name") or ""
        try:
            n = manifest.existing_name(model_ref(asked))
        except ModelRequired:
            return ctx.json(400, {"error": "model is required"})
        except Unqualified:
            return ctx.json(400, {"error": f"name {quote(asked)} is invalid"})
        try:
            m = manifest.parse_named(n)
        except FileNotFoundError:
            return ctx.json(404, {"error": f"model '{asked}' not found"})
        except (OSError, ValueError) as e:
            return ctx.json(500, {"error": str(e)})
        manifest.remove(m)
        ctx.send(200, b"")

    def generate(self, ctx: Ctx) -> None:
        self._infer(ctx, chat=False)

    def chat(self, ctx: Ctx) -> None:
        self._infer(ctx, chat=True)

    def _infer(self, ctx: Ctx, chat: bool) -> None:
        """GenerateHandler and ChatHandler: checks in upstream's order, the model loaded, then the answer."""
        started = time.monotonic_ns()
        fields = {"model": "string", "stream": "bool", "options": "map[string]interface {}"}
        if chat:
            req = ctx.bind("ChatRequest", {**fields, "messages": "[]api.Message"})
            messages = req.get("messages") or []
            for m in messages:
                if not isinstance(m, dict):
                    raise BadRequest(f"json: cannot unmarshal {go_kind(m)} into Go struct field ChatRequest.messages "
                                     "of type api.Message")  # fmt: skip
                if not isinstance(m.get("content", ""), str):
                    raise BadRequest(f"json: cannot unmarshal {go_kind(m['content'])} into Go struct field "
                                     "ChatRequest.messages.content of type string")  # fmt: skip
            prompt = "\n".join(m.get("content", "") for m in messages)
        else:
            req = ctx.bind("GenerateRequest", {**fields, "prompt": "string", "suffix": "string", "system": "string",
                                               "template": "string", "raw": "bool"})  # fmt: skip
            messages, prompt = None, req.get("prompt") or ""
        keep_alive, think = keep_alive_of(req), think_of(req)
        asked = req.get("model") or ""
        try:
            m = self._model(model_ref(asked))
        except ModelRequired:  # writeModelRefParseError's fallbacks differ
            if chat:
                return ctx.json(400, {"error": "model is required"})
            return ctx.json(404, {"error": f"model '{asked}' not found"})
        except Unqualified:
            return ctx.json(400, {"error": "invalid model name"})
        if m is None:
            return ctx.json(404, {"error": f"model '{asked}' not found"})
        empty = not messages if chat else prompt == ""
        if empty and keep_alive == 0:
            self.sched.expire(m)
            return ctx.json(200, self._answer(asked, chat, "", True, "unload"))
        caps = m.capabilities()
        if think and "thinking" not in caps:
            return ctx.json(400, {"error": f"{quote(asked)} does not support thinking"})
        if "completion" not in caps:
            return ctx.json(400, {"error": f"{quote(asked)} does not support {'chat' if chat else 'generate'}"})
        options = req.get("options") or {}
        num_ctx = options.get("num_ctx") or m.options.get("num_ctx") or envconfig.context_length() or DEFAULT_NUM_CTX
        train = m.train_context()
        runner = self.sched.acquire(m, keep_alive, envconfig.keep_alive(),
                                    train if 0 < train < int(num_ctx) else int(num_ctx))  # fmt: skip
        try:
            loaded = time.monotonic_ns()
            if empty:
                return ctx.json(200, self._answer(asked, chat, "", True, "load"))
            self._complete(ctx, req, asked, chat, prompt, started, loaded)
        finally:
            self.sched.release(runner)

    def _answer(self, model: str, chat: bool, text: str, done: bool, reason: str = "") -> dict:
        answer = {"model": model, "created_at": format_time(utc=True)}
        answer |= {"message": {"role": "assistant", "content": text}} if chat else {"response": text}
        answer["done"] = done
        if reason:
            answer["done_reason"] = reason
        return answer

    def _complete(self, ctx: Ctx, req: dict, model: str, chat: bool, prompt: str, started: int, loaded: int):
        words = _words(REPLY)
        limit = (req.get("options") or {}).get("num_predict")
        reason = "stop"
        if isinstance(limit, int | float) and 0 <= limit < len(words):
            words, reason = words[: int(limit)], "length"
        stream = Stream(ctx) if req.get("stream") is not False else None
        evaluating = time.monotonic_ns()
        for word in words:
            time.sleep(self.token_seconds)
            if ctx.client_gone():
                raise ClientGone()
            if stream:
                stream.send(self._answer(model, chat, word, False))
        text = "".join(words)
        final = self._answer(model, chat, "" if stream else text, True, reason)
        if not chat and not req.get("raw"):
            final["context"] = [zlib.crc32(w.encode()) % 32000 for w in _words(prompt + text)]
        now = time.monotonic_ns()
        final |= {"total_duration": now - started, "load_duration": loaded - started,
                  "prompt_eval_count": len(_words(prompt)), "prompt_eval_duration": max(evaluating - loaded, 1),
                  "eval_count": len(words), "eval_duration": max(now - evaluating, 1)}  # fmt: skip
        final = {k: v for k, v in final.items() if v != 0 or k == "done"}  # Metrics are omitempty
        if stream:
            stream.send(final)
            stream.end()
        else:
            ctx.json(200, final)
