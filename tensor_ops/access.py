"""Who may use the inference endpoint, and how much: bearer tokens, per-token quotas, rate and concurrency.

Standard library only (``hmac.compare_digest``, ``threading``, ``time``); no HTTP here, so the rules are tested
without a server. ``tensor_ops.serve`` turns each refusal into its HTTP status.

- :class:`Tokens`: named secrets; ``match`` compares a presented token with every known one in constant time
  (no early exit, so the time does not tell which token or how many characters matched).
- :class:`Limits`: every bound, validated once (errors name the parameter and its limit).
- :class:`Quota`: which principal owns which context, least recently used first; registering past a principal's
  quota drops that principal's own least recently used contexts, never another's. Each principal has its own
  namespace of context ids: a token that uploads another client's public context first holds only its own copy
  (counted in its own quota) and cannot squat the id (the owner registers and uses it as if it were alone).
- :class:`AuthFailures`: a token bucket per client address for requests without a valid token (bounded memory).
- :class:`Throttle`: a token bucket per principal (``rate`` requests per second, bursts of ``burst``) and a
  count of its requests in flight (at most ``max_concurrent``).
A principal is a token's name, or ``None`` for every caller of an open endpoint (no tokens configured).
"""
from __future__ import annotations

import dataclasses
import hmac
import math
import os
import threading
import time
from collections import OrderedDict

from crypto.errors import ParameterError

MIN_TOKEN_CHARS = 16
TOKENS_ENV = "HEZK_TOKENS"


class Refused(Exception):
    """A request the access rules turn away: ``status`` (HTTP), a message naming the limit, ``retry_after``
    seconds (or None)."""

    def __init__(self, status: int, message: str, retry_after: int | None = None):
        super().__init__(message)
        self.status, self.message, self.retry_after = status, message, retry_after


# ---------------------------------------------------------------------------------------------------------
# Tokens.

def _parse_entry(entry: str, index: int, where: str) -> tuple[str, str]:
    """``name:token`` or a bare ``token`` (named ``client<index>``)."""
    name, sep, secret = entry.rpartition(":")
    if not sep:
        name, secret = f"client{index}", entry
    if not name or not name.isprintable() or any(c.isspace() for c in name) or len(name) > 64:
        raise ParameterError(f"{where}: entry {index} has a bad name (1 to 64 printable characters, no spaces)")
    if len(secret) < MIN_TOKEN_CHARS or not secret.isascii() or not secret.isprintable() or " " in secret:
        raise ParameterError(f"{where}: the token of entry {index} ({name}) must be at least {MIN_TOKEN_CHARS} "
                             f"printable ASCII characters without spaces (make one with "
                             f"python -c 'import secrets; print(secrets.token_urlsafe(32))')")
    return name, secret


class Tokens:
    """Named bearer tokens. ``Tokens({"alice": "...", "bob": "..."})``, ``Tokens.parse(text)`` (one
    ``name:token`` or bare token per line or comma-separated; ``#`` starts a comment), ``Tokens.from_file`` or
    ``Tokens.from_env``. The secrets never appear in ``repr`` or in any message."""

    def __init__(self, named: dict[str, str]):
        if not named:
            raise ParameterError("tokens: at least one token is needed (or pass none for an open endpoint)")
        entries = [_parse_entry(f"{name}:{secret}", i + 1, "tokens") for i, (name, secret) in enumerate(named.items())]
        secrets_seen = {secret for _, secret in entries}
        if len(secrets_seen) != len(entries):
            raise ParameterError("tokens: two names share one token (each client needs its own)")
        self._entries = tuple((name, secret.encode()) for name, secret in entries)

    def __reduce__(self):
        raise TypeError("Tokens holds bearer secrets and does not pickle: give each process the token file "
                        "(--tokens-file) or $HEZK_TOKENS")

    @classmethod
    def parse(cls, text: str, where: str = "tokens") -> "Tokens":
        lines = (line.split("#", 1)[0] for line in text.splitlines())
        items = [item.strip() for line in lines for item in line.split(",") if item.strip()]
        named = {}
        for i, item in enumerate(items, 1):
            name, secret = _parse_entry(item, i, where)
            if name in named:
                raise ParameterError(f"{where}: the name {name!r} appears twice")
            named[name] = secret
        if not named:
            raise ParameterError(f"{where} holds no token")
        return cls(named)

    @classmethod
    def from_file(cls, path) -> "Tokens":
        try:
            with open(path, encoding="utf-8") as handle:
                text = handle.read()
        except (OSError, UnicodeDecodeError) as error:
            raise ParameterError(f"--tokens-file {path}: {getattr(error, 'strerror', None) or error}") from None
        return cls.parse(text, f"--tokens-file {path}")

    @classmethod
    def from_env(cls, name: str = TOKENS_ENV, environ=None) -> "Tokens | None":
        """The tokens in environment variable ``name`` (None when it is unset or empty)."""
        text = (os.environ if environ is None else environ).get(name, "")
        return cls.parse(text, f"${name}") if text.strip() else None

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(name for name, _ in self._entries)

    def __len__(self):
        return len(self._entries)

    def __repr__(self):
        return f"Tokens({len(self)} named {', '.join(self.names)})"

    def match(self, presented: str | None) -> str | None:
        """The name of the token equal to ``presented`` (None if none is): every known token is compared, in
        constant time each, whatever matched before."""
        if not presented:
            return None
        candidate = presented.encode("utf-8", "replace")
        found = None
        for name, secret in self._entries:
            if hmac.compare_digest(candidate, secret):
                found = name
        return found


def bearer(header: str | None) -> str | None:
    """The token of an ``Authorization: Bearer <token>`` header (None if absent or of another scheme)."""
    if not header:
        return None
    scheme, _, token = header.strip().partition(" ")
    return token.strip() or None if scheme.lower() == "bearer" else None


# ---------------------------------------------------------------------------------------------------------
# Limits.

@dataclasses.dataclass(frozen=True)
class Limits:
    """The endpoint's bounds. Sizes in bytes; ``rate`` in requests per second per principal (``burst`` at
    once); ``max_concurrent`` requests in flight per principal; ``max_encoded_bytes`` bounds the model's encoded
    weights kept for every parameter set in use (least recently used dropped). A request's headers must arrive
    within ``header_timeout`` seconds of the connection (or of the previous response); its body may pause at
    most ``body_timeout`` seconds, and past those first seconds must have come at ``min_body_rate`` bytes per
    second on average (else 408). A client address that presents no valid token more than ``auth_failure_burst``
    times, refilled at ``auth_failure_rate`` per second, gets 429 before its token is even compared. Per-token
    quotas bind each token; the
    server-wide ``max_contexts`` / ``max_total_bytes`` bind everyone together (an open endpoint has one
    principal, whose quota is the server-wide one)."""

    max_request_bytes: int = 64 << 20
    max_context_bytes: int = 512 << 20
    max_contexts: int = 16
    max_total_bytes: int = 4 << 30
    max_contexts_per_token: int = 4
    max_bytes_per_token: int = 1 << 30
    rate: float = 10.0
    burst: int = 20
    max_concurrent: int = 4
    max_encoded_bytes: int = 2 << 30
    header_timeout: float = 10.0
    body_timeout: float = 10.0
    min_body_rate: int = 16 << 10
    auth_failure_rate: float = 0.2
    auth_failure_burst: int = 10

    def __post_init__(self):
        for field in dataclasses.fields(self):
            value = getattr(self, field.name)
            kinds = (int, float) if field.type == "float" else (int,)
            if isinstance(value, bool) or not isinstance(value, kinds) or not math.isfinite(value) or value <= 0:
                raise ParameterError(f"{field.name}={value!r} must be a positive "
                                     f"{'number' if field.type == 'float' else 'integer'}")
        if self.burst < 1:
            raise ParameterError(f"burst={self.burst} must be at least 1")
        if self.max_context_bytes > self.max_bytes_per_token:
            raise ParameterError(f"max_context_bytes={self.max_context_bytes} exceeds max_bytes_per_token="
                                 f"{self.max_bytes_per_token}: no context that large could be kept")

    def quota(self, principal: str | None) -> tuple[int, int]:
        """(contexts, bytes) a principal may hold: the per-token quota, or the server-wide one when open."""
        if principal is None:
            return self.max_contexts, self.max_total_bytes
        return (min(self.max_contexts_per_token, self.max_contexts),
                min(self.max_bytes_per_token, self.max_total_bytes))

    def report(self) -> dict:
        return dataclasses.asdict(self)


# ---------------------------------------------------------------------------------------------------------
# Contexts and their owners.

@dataclasses.dataclass
class _Entry:
    owner: str | None
    size: int
    value: object


class Quota:
    """Registered contexts: (owner, id) -> (owner, size, value), least recently used first. ``admit`` stores a
    context for its owner and returns the ids it dropped to stay within the owner's quota and the server's; only
    the owner's own contexts are ever dropped (when the server is full of others' contexts, ``Refused(503)``).
    Ids are per owner: the same id (a key set's) registered by two principals is two entries, each counted in
    its owner's quota, so uploading someone's public context first takes nothing from them."""

    def __init__(self, limits: Limits):
        self.limits = limits
        self._entries: OrderedDict[tuple, _Entry] = OrderedDict()  # keyed by (owner, context id)
        self._lock = threading.Lock()

    def __len__(self):
        return len(self._entries)

    def total_bytes(self, owner=...) -> int:
        return sum(e.size for e in self._entries.values() if owner is ... or e.owner == owner)

    def owned(self, owner) -> list[str]:
        """The ids ``owner`` holds, least recently used first."""
        return [cid for (who, cid) in self._entries if who == owner]

    def get(self, context_id: str, principal):
        """The value of ``principal``'s ``context_id`` (now its most recently used); Refused(404) if this
        principal has not registered it (whether another did is not told)."""
        with self._lock:
            entry = self._entries.get((principal, context_id))
            if entry is None:
                raise Refused(404, f"context_id={context_id[:40]!r} is not registered (or was evicted): "
                                   "POST /contexts first")
            self._entries.move_to_end((principal, context_id))
            return entry.value

    def admit(self, context_id: str, principal, size: int, value) -> list[str]:
        """Keep ``value`` as ``context_id`` of ``principal`` (``size`` bytes); returns the ids dropped, each the
        principal's own least recently used."""
        max_count, max_bytes = self.limits.quota(principal)
        if size > max_bytes:
            raise Refused(413, f"a public context of {size} bytes exceeds this client's quota of {max_bytes} bytes")
        key = (principal, context_id)
        with self._lock:
            previous = self._entries.get(key)  # registering again replaces it
            again = 0 if previous is None else previous.size
            mine = [cid for cid in self.owned(principal) if cid != context_id]
            total_count = len(self._entries) + (previous is None)
            total_bytes = self.total_bytes() - again + size
            own_count, own_bytes = len(mine) + 1, self.total_bytes(principal) - again + size
            dropped = []
            for cid in mine:  # least recently used first
                if (own_count <= max_count and own_bytes <= max_bytes and total_count <= self.limits.max_contexts
                        and total_bytes <= self.limits.max_total_bytes):
                    break
                gone = self._entries[(principal, cid)].size
                dropped.append(cid)
                own_count, own_bytes = own_count - 1, own_bytes - gone
                total_count, total_bytes = total_count - 1, total_bytes - gone
            if total_count > self.limits.max_contexts or total_bytes > self.limits.max_total_bytes:
                raise Refused(503, f"the server holds its limit of other clients' contexts (max_contexts="
                                   f"{self.limits.max_contexts}, max_total_bytes={self.limits.max_total_bytes})",
                              retry_after=60)
            for cid in dropped + [context_id] * (previous is not None):
                del self._entries[(principal, cid)]
            self._entries[key] = _Entry(principal, size, value)
            return dropped


# ---------------------------------------------------------------------------------------------------------
# Rate and concurrency.

class Throttle:
    """Per principal: a token bucket (``rate`` per second, holding at most ``burst``) and a count of requests in
    flight. ``enter(principal)`` takes one request from the bucket and one slot, or raises Refused(429) with
    Retry-After seconds; ``leave(principal)`` frees the slot. ``clock`` is injectable for tests."""

    def __init__(self, limits: Limits, clock=time.monotonic):
        self.limits, self._clock = limits, clock
        self._buckets: dict = {}  # principal -> [tokens, last time]
        self._in_flight: dict = {}
        self._lock = threading.Lock()

    def in_flight(self, principal) -> int:
        return self._in_flight.get(principal, 0)

    def enter(self, principal) -> None:
        limits = self.limits
        with self._lock:
            now = self._clock()
            tokens, last = self._buckets.get(principal, (float(limits.burst), now))
            tokens = min(float(limits.burst), tokens + (now - last) * limits.rate)
            if self._in_flight.get(principal, 0) >= limits.max_concurrent:
                self._buckets[principal] = (tokens, now)
                raise Refused(429, f"too many requests in flight (max_concurrent={limits.max_concurrent} per "
                                   f"client)", retry_after=1)
            if tokens < 1.0:
                self._buckets[principal] = (tokens, now)
                wait = max(1, math.ceil((1.0 - tokens) / limits.rate))
                raise Refused(429, f"request rate above the limit (rate={limits.rate:g} per second, burst="
                                   f"{limits.burst} per client)", retry_after=wait)
            self._buckets[principal] = (tokens - 1.0, now)
            self._in_flight[principal] = self._in_flight.get(principal, 0) + 1

    def leave(self, principal) -> None:
        with self._lock:
            count = self._in_flight.get(principal, 0) - 1
            if count > 0:
                self._in_flight[principal] = count
            else:
                self._in_flight.pop(principal, None)


# ---------------------------------------------------------------------------------------------------------
# Failed authentication.

class AuthFailures:
    """Per client address, a token bucket of failed authentications (``auth_failure_burst``, refilled at
    ``auth_failure_rate`` per second): ``check(address)`` raises Refused(429) while the bucket is empty (before
    any token is compared: no online guessing), ``failed(address)`` takes one. At most ``max_addresses`` are
    remembered, the least recently failed forgotten first (bounded memory whatever the number of addresses).
    ``clock`` is injectable for tests."""

    def __init__(self, limits: Limits, max_addresses: int = 4096, clock=time.monotonic):
        self.limits, self.max_addresses, self._clock = limits, int(max_addresses), clock
        self._buckets: OrderedDict = OrderedDict()  # address -> (tokens, last time)
        self._lock = threading.Lock()

    def __len__(self):
        return len(self._buckets)

    def _level(self, address, now) -> float:
        tokens, last = self._buckets.get(address, (float(self.limits.auth_failure_burst), now))
        return min(float(self.limits.auth_failure_burst), tokens + (now - last) * self.limits.auth_failure_rate)

    def check(self, address) -> None:
        with self._lock:
            now = self._clock()
            tokens = self._level(address, now)
            if tokens < 1.0:
                wait = max(1, math.ceil((1.0 - tokens) / self.limits.auth_failure_rate))
                raise Refused(429, f"too many requests without a valid token from this address (burst="
                                   f"{self.limits.auth_failure_burst}, then {self.limits.auth_failure_rate:g} per "
                                   f"second)", retry_after=wait)

    def failed(self, address) -> None:
        with self._lock:
            now = self._clock()
            self._buckets[address] = (max(0.0, self._level(address, now) - 1.0), now)
            self._buckets.move_to_end(address)
            while len(self._buckets) > self.max_addresses:
                self._buckets.popitem(last=False)


class LogWindow:
    """At most one log line per ``key`` (e.g. a refusal status) per ``window`` seconds: ``note(key)`` returns
    None when the event is to be counted silently, else how many were silenced since the last line."""

    def __init__(self, window: float = 60.0, clock=time.monotonic):
        self.window, self._clock = float(window), clock
        self._state: dict = {}  # key -> [time of the last line, silenced since]
        self._lock = threading.Lock()

    def note(self, key) -> int | None:
        with self._lock:
            now = self._clock()
            state = self._state.get(key)
            if state is None or now - state[0] >= self.window:
                silenced = 0 if state is None else state[1]
                self._state[key] = [now, 0]
                return silenced
            state[1] += 1
            return None
