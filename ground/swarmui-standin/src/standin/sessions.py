"""Sessions as src/Accounts/SessionHandler.cs keeps them: persisted, so they survive a restart.

Upstream stores them in the LiteDB file Data/Users.ldb (collection "sessions": ID, UserID,
OriginAddress, OriginToken, LastActiveUnixTime); CreateSession upserts each new one, TryGetSession
loads one from the file when it is not in memory, and sessions idle for 31 days (MaxSessionAge) are
deleted at start (CleanOldSessions). --no_persist keeps them in memory only. The stand-in writes the
same records as JSON into Data/Users.ldb (upstream's file name, its own format).

A session's counters (waiting and live generations...) live in memory only, as upstream's Session
object: a session loaded after a restart starts with zeros.
"""

import json
import os
import secrets
import threading
import time
from pathlib import Path

SESSION_ID_LENGTH = 40  # SessionHandler.SessionIDLength: Utilities.SecureRandomHex(40), lower-case hex
MAX_SESSION_AGE = 31 * 24 * 3600
LOCAL_USER_ID = "local"
COUNTERS = ("waiting_gens", "loading_models", "waiting_backends", "live_gens")


class Session:
    def __init__(self, session_id: str, user_id: str, origin: str, last_active: int):
        self.id, self.user_id, self.origin, self.last_active = session_id, user_id, origin, last_active
        self.counters = dict.fromkeys(COUNTERS, 0)
        # SessionHandler's owner role holds "*": the local user may do everything
        self.permissions = ["*"]

    def db_entry(self) -> dict:
        return {"ID": self.id, "UserID": self.user_id, "OriginAddress": self.origin, "OriginToken": None,
                "LastActiveUnixTime": self.last_active}  # fmt: skip


class SessionHandler:
    def __init__(self, data_dir: Path, persist: bool = True, user_id: str = LOCAL_USER_ID):
        self.file = data_dir / "Users.ldb"
        self.persist = persist
        self.user_id = user_id
        self.sessions: dict[str, Session] = {}
        self.lock = threading.RLock()
        self.clean_old_sessions()

    def _read(self) -> dict[str, dict]:
        try:
            data = json.loads(self.file.read_text())
        except (OSError, ValueError):
            return {}
        sessions = data.get("sessions") if isinstance(data, dict) else None
        return sessions if isinstance(sessions, dict) else {}

    def _write(self, entries: dict[str, dict]) -> None:
        self.file.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.file.with_name(f".{self.file.name}.{os.getpid()}.tmp")
        tmp.write_text(json.dumps({"format": "SwarmUI stand-in sessions (JSON)", "sessions": entries}))
        tmp.replace(self.file)

    def clean_old_sessions(self) -> None:
        if not self.persist:
            return
        with self.lock:
            entries = self._read()
            cutoff = time.time() - MAX_SESSION_AGE
            kept = {k: v for k, v in entries.items() if v.get("LastActiveUnixTime", 0) >= cutoff}
            if kept != entries:
                self._write(kept)

    def create_session(self, origin: str) -> Session:
        session = Session(secrets.token_hex(SESSION_ID_LENGTH // 2), self.user_id, origin, int(time.time()))
        with self.lock:
            self.sessions[session.id] = session
            if self.persist:
                entries = self._read()
                entries[session.id] = session.db_entry()
                self._write(entries)
        return session

    def try_get_session(self, session_id: str) -> Session | None:
        with self.lock:
            if session_id in self.sessions:
                return self.sessions[session_id]
            entry = self._read().get(session_id) if self.persist else None
            if not isinstance(entry, dict):
                return None
            session = Session(session_id, entry.get("UserID", self.user_id), entry.get("OriginAddress", ""),
                              int(entry.get("LastActiveUnixTime", 0)))  # fmt: skip
            self.sessions[session_id] = session
            return session

    def all(self) -> list[Session]:
        with self.lock:
            return list(self.sessions.values())
