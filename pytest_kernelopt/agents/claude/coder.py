"""The ``anthropic`` Coder backend: Claude writes candidate files through the official SDK.

What it sends, per round and kernel, as one Messages API request (``POST /v1/messages``
to ``ANTHROPIC_BASE_URL``, default ``https://api.anthropic.com``):

* a system prompt (``templates/prompts/system.md.j2``): the verification cascade, the
  candidate format and a summary of the candidate language;
* one user message (``templates/prompts/kernel.md.j2``): the problem's id and device, the
  kernel's name, its candidate-format source (``ctx.original``) and the best version so
  far (``ctx.best``), its argument names, kinds, shapes, strides and dtypes (integer
  ranges and scalar values where the capture recorded them), the profile (bottleneck,
  share, roofline percent, Nsight counters, registers and spills when present), earlier
  attempts on the kernel with the cascade's stage and reason (``ctx.attempts``), this
  backend's own notes on earlier replies that gave no usable candidate, and the
  planner's hints;
* the model id, ``max_tokens`` and (only if set) ``temperature``; the key, in the
  header the SDK writes (``x-api-key``, or ``Authorization: Bearer`` in SDK 2.x); and the
  SDK's own headers (its version, the OS, CPU architecture and Python version).

What it never sends: the problem file or any other file of the project, model weights,
inputs or outputs, environment variables, paths, the kernel store, anything of the
verification worker. The key is read from ``ANTHROPIC_API_KEY`` and from nowhere else
(no profiles, no ``ANTHROPIC_AUTH_TOKEN``); it is held by the SDK client only, never
logged, never part of a proposal, a reply record, an error message, the trace or the
run record, and never passed to the verification worker (whose environment is scrubbed
of ``ANTHROPIC_*`` anyway, ``verify/worker.py``).

Each request is one turn with the whole context (no conversation state): ``ctx.attempts``
carries what earlier rounds learned. A reply is parsed into :class:`ParsedReply`
(``reply.py``, pure text processing): every
fenced ```` ```python ```` block is a candidate, validated structurally (it parses and
defines ``run`` with the kernel's runtime arguments, in order); the candidate language
itself is the Reviewer's and the static stage's business, so a language violation comes
back next round as a recorded attempt with its reason. A reply with no usable code makes
``propose`` return ``[]`` with the reason in :attr:`ClaudeCoder.last_error` (and
:attr:`ClaudeCoder.last_reply`); it never raises. Only a request the API refuses for good
(401/403: the key; 400/404/413/422: the request or the model id) raises a one-line
:class:`~pytest_kernelopt.errors.UsageError`.

This module is the backend: the Coder protocol, the prompts rendered from templates,
the HTTP requests with their retries, and cost accounting against ``max_usd``. They
stay one class because they share its state (spend, unconfirmed cost, failures in a
row, notes per kernel); reading a reply needs none of it and lives apart.
"""

from __future__ import annotations

import math
import os
import random
import time
from pathlib import Path
from typing import Annotated, Any

from pydantic import AfterValidator, BaseModel, ConfigDict, Field

from ...candidate import ENTRY_POINT
from ...errors import UsageError
from ...measure.text import timing_text
from ...records import redact_seeds
from ...runs.records import Attempt, CoderContext, Proposal
from ...templates import project_templates, render
from ...verify.static import IMPORTS
from ..coder import Backend, Sdk, Spend
from .reply import ParsedReply, ReplyCandidate, parse_reply

DEFAULT_MODEL = "claude-sonnet-4-6"
SYSTEM_TEMPLATE = "prompts/system.md.j2"
KERNEL_TEMPLATE = "prompts/kernel.md.j2"
SDK = Sdk(module="anthropic", extra="agents", about="the Anthropic SDK")

# USD per million tokens (input, output), from Anthropic's published list prices
# (https://www.anthropic.com/pricing, as of 2026-12). Matched by the longest prefix of
# the model id on a "-" boundary, so dated ids (claude-sonnet-4-5-20250929) find their
# family. Prompt-cache writes cost 1.25x input and cache reads 0.1x input (this backend
# asks for no caching; the rates are applied if the API reports such tokens anyway).
# Sonnet's long-context rate (inputs above 200k tokens) is not modelled: prompts here are
# a few thousand tokens. A model not in the table has no known price: its tokens are
# counted, its dollars are not, and ``max_usd`` cannot be enforced for it (pass
# ``price_per_mtok``).
PRICES_PER_MTOK: dict[str, tuple[float, float]] = {
    "claude-opus-4-6": (5.0, 25.0),
    "claude-opus-4-5": (5.0, 25.0),
    "claude-opus-4": (15.0, 75.0),  # 4 and 4.1
    "claude-sonnet-4": (3.0, 15.0),  # 4, 4.5, 4.6
    "claude-haiku-4": (1.0, 5.0),  # 4.5
    "claude-3-7-sonnet": (3.0, 15.0),
    "claude-3-5-sonnet": (3.0, 15.0),
    "claude-3-5-haiku": (0.8, 4.0),
    "claude-3-opus": (15.0, 75.0),
    "claude-3-haiku": (0.25, 1.25),
}
CACHE_WRITE_FACTOR, CACHE_READ_FACTOR = 1.25, 0.1

# Statuses worth another try: rate limits, lock/request timeouts, server errors (529 is
# "overloaded"). Everything else from the API is final.
RETRYABLE_STATUS = frozenset({408, 409, 429})
MAX_REASON_CHARS = 600  # per attempt in the prompt: the cascade's reasons can be long
MAX_NOTES = 5  # per kernel: the latest notes on replies that gave no usable candidate


def price_for(model: str) -> tuple[float, float] | None:
    """(input, output) USD per million tokens for ``model``, or None when unknown."""
    best = None
    for prefix in PRICES_PER_MTOK:
        if (model == prefix or model.startswith(prefix + "-")) and (best is None or len(prefix) > len(best)):
            best = prefix
    return PRICES_PER_MTOK[best] if best else None


# --- replies ---------------------------------------------------------------------------

class ReplyRecord(BaseModel):
    """What one round cost and produced, for the trace (no sources: proposals carry them)."""

    model_config = ConfigDict(extra="forbid")

    kernel: str
    round: int
    model: str
    message_id: str | None = None
    stop_reason: str | None = None
    requests: int = 0  # HTTP requests sent for this round, retries included
    input_tokens: int = 0
    output_tokens: int = 0
    usd: float | None = None  # None: the model's price is unknown
    candidates: int = 0
    rejected: list[str] = Field(default_factory=list)
    error: str | None = None
    seconds: float = 0.0


# --- the backend -----------------------------------------------------------------------

class ClaudeCoder:
    """Coder backend ``anthropic``: Claude proposes candidate files, several rounds per kernel.

    Options (all keyword): ``model`` (default ``claude-sonnet-4-6``); ``max_usd`` (cost
    budget for the run: no request is sent whose worst-case cost would exceed it);
    ``max_tokens`` per reply; ``candidates_per_round``; ``max_rounds`` per kernel (from
    then on ``propose`` returns ``[]``: nothing more to try); ``timeout_s`` per HTTP
    request; ``max_retries`` on 429/408/409/5xx, timeouts and connection errors, waiting
    ``backoff_s * 2**n`` (jittered, at most ``max_backoff_s``) or what the API's
    ``retry-after`` asks (at most ``max_retry_after_s``); ``max_consecutive_failures``
    (rounds whose request failed after every retry, in a row, before the backend stops);
    ``temperature`` (sent only if given); ``price_per_mtok`` (input, output) for a model
    not in :data:`PRICES_PER_MTOK`; ``templates_dir`` (prompt overrides; default the
    project's ``templates/``); ``max_attempts_shown`` (the most recent attempts put in
    the prompt).
    """

    name = "anthropic"

    def __init__(
        self,
        *,
        model: str = DEFAULT_MODEL,
        max_usd: float | None = None,
        max_tokens: int = 8192,
        candidates_per_round: int = 2,
        max_rounds: int = 4,
        timeout_s: float = 300.0,
        max_retries: int = 3,
        backoff_s: float = 1.0,
        max_backoff_s: float = 30.0,
        max_retry_after_s: float = 60.0,
        max_consecutive_failures: int = 3,
        temperature: float | None = None,
        price_per_mtok: tuple[float, float] | None = None,
        templates_dir: str | Path | None = None,
        max_attempts_shown: int = 20,
    ) -> None:
        if not isinstance(model, str) or not model.strip():
            raise UsageError("anthropic backend: the model id must be a non-empty string")
        _positive("max_tokens", max_tokens, integer=True)
        _positive("candidates_per_round", candidates_per_round, integer=True)
        _positive("max_rounds", max_rounds, integer=True)
        _positive("timeout_s", timeout_s)
        _positive("max_consecutive_failures", max_consecutive_failures, integer=True)
        _positive("max_attempts_shown", max_attempts_shown, integer=True)
        for label, value in (("max_retries", max_retries), ("backoff_s", backoff_s),
                             ("max_backoff_s", max_backoff_s), ("max_retry_after_s", max_retry_after_s)):
            _positive(label, value, integer=label == "max_retries", zero=True)
        if max_usd is not None:
            _positive("max_usd", max_usd)
        if temperature is not None:
            _positive("temperature", temperature, zero=True)
        self.model = model.strip()
        self.price: tuple[float, float] | None = price_for(self.model)
        if price_per_mtok is not None:
            self.price = _price_pair(price_per_mtok)
        if max_usd is not None and self.price is None:
            raise UsageError(f"anthropic backend: no price is known for model {self.model!r}, so a cost budget "
                             f"cannot be enforced; pass its price (price_per_mtok) or leave max_usd unset")
        self.max_usd = None if max_usd is None else float(max_usd)
        self.max_tokens = int(max_tokens)
        self.candidates_per_round = int(candidates_per_round)
        self.max_rounds = int(max_rounds)
        self.timeout_s = float(timeout_s)
        self.max_retries = int(max_retries)
        self.backoff_s, self.max_backoff_s = float(backoff_s), float(max_backoff_s)
        self.max_retry_after_s = float(max_retry_after_s)
        self.max_consecutive_failures = int(max_consecutive_failures)
        self.temperature = temperature
        self.templates_dir = None if templates_dir is None else Path(templates_dir)
        self.max_attempts_shown = int(max_attempts_shown)

        self.last_error: str | None = None
        self.last_reply: ReplyRecord | None = None
        self._spend = Spend()
        # Worst-case cost of requests the client gave up on (timeouts): the API may have
        # finished and billed them. Counted against max_usd, not reported as spent.
        self._unconfirmed_usd = 0.0
        self._stopped: str | None = None
        self._failures = 0
        self._notes: dict[tuple[str, str], list[str]] = {}
        self._sdk, self._client = self._open_client()

    # -- the Coder protocol --------------------------------------------------------------

    def prepare(self, problem: Path, device: str, kernels: list[str], shape: str | None = None,
                budget_s: float | None = None) -> None:
        """Nothing to prepare: prompts are built per round from the context."""

    def prepare_uses_device(self, device: str) -> bool:
        return False

    @property
    def spend(self) -> Spend:
        """Tokens, dollars (0 when the price is unknown) and HTTP requests so far (a copy)."""
        return self._spend.model_copy()

    @property
    def price_known(self) -> bool:
        return self.price is not None

    @property
    def stopped(self) -> str | None:
        return self._stopped

    def propose(self, ctx: CoderContext) -> list[Proposal]:
        """One request for ``ctx.kernel``; ``[]`` with :attr:`last_error` set when it gave nothing usable."""
        self.last_error, self.last_reply = self._stopped, None
        if self._stopped or ctx.round >= self.max_rounds:
            return []
        t0 = time.monotonic()
        system, user = self.render_prompts(ctx)
        record = ReplyRecord(kernel=ctx.kernel.name, round=ctx.round, model=self.model)
        self.last_reply = record
        worst = self._worst_case_usd(system, user)
        if self._over_budget(worst):
            return self._fail(record, self._stopped)
        response, error = self._request(system, user, record, worst)
        record.seconds = round(time.monotonic() - t0, 3)
        if response is None:
            self._failures += 1
            if self._failures >= self.max_consecutive_failures and not self._stopped:
                self._stopped = (f"the Anthropic API failed {self._failures} rounds in a row "
                                 f"(last: {error})")
            return self._fail(record, error)
        self._failures = 0
        self._account(response, record)
        self._over_budget(worst)  # after: stop now if another request of this size would not fit
        text = "".join(getattr(block, "text", None) or "" for block in response.content
                       if getattr(block, "type", None) == "text")
        parsed = parse_reply(text, [a.name for a in ctx.kernel.args])
        keep = parsed.candidates[: self.candidates_per_round]  # each costs a trip through the cascade
        if len(parsed.candidates) > len(keep):
            parsed.rejected.append(f"{len(parsed.candidates) - len(keep)} more files than the "
                                   f"{self.candidates_per_round} asked for were not used")
        record.candidates, record.rejected = len(keep), parsed.rejected
        if not keep:
            return self._fail(record, self._no_candidate_reason(parsed, record.stop_reason), note=ctx)
        if parsed.rejected:
            self._note(ctx, f"code blocks not used: {'; '.join(parsed.rejected)}")
        return [Proposal(source=c.source, origin=f"anthropic:{self.model}", rationale=c.rationale) for c in keep]

    # -- prompts ---------------------------------------------------------------------------

    def render_prompts(self, ctx: CoderContext) -> tuple[str, str]:
        """The system prompt and the user message this round sends, rendered from the templates."""

        user_dir = self.templates_dir if self.templates_dir is not None else project_templates()
        system = render(SYSTEM_TEMPLATE, {
            "entry_point": ENTRY_POINT,
            "candidates_per_round": self.candidates_per_round,
            "imports": [s for s, (alias, _) in IMPORTS.items() if alias and s != "import triton.language"],
        }, user_dir)
        kernel = ctx.kernel
        args = [a.name for a in kernel.args]
        shown = ctx.attempts[-self.max_attempts_shown:]
        first = len(ctx.attempts) - len(shown) + 1
        user = render(KERNEL_TEMPLATE, {
            "model": ctx.model,
            "device": ctx.device,
            "compile": ctx.compile,
            "interpreter": ctx.device == "cpu",
            "kernel": kernel,
            "args": kernel.args,
            "signature": f"{ENTRY_POINT}({', '.join([*args, '*', 'stream=None'])})",
            "written": kernel.written_args,
            "original": ctx.original.rstrip("\n"),
            "best": ctx.best.rstrip("\n"),
            "best_origin": ctx.best_origin,
            "best_is_original": ctx.best.strip() == ctx.original.strip(),
            "profile": ctx.profile,
            "attempts": [_attempt_view(first + i, a) for i, a in enumerate(shown)],
            "omitted_attempts": len(ctx.attempts) - len(shown),
            "notes": self._notes.get((ctx.model, kernel.name), []),
            "round": ctx.round,
            "strategies": ctx.strategies,
            "candidates_per_round": self.candidates_per_round,
        }, user_dir)
        return system, user

    def request_cost_bound(self, ctx: CoderContext) -> float | None:
        """The most the request for ``ctx`` could cost in USD (None: price unknown)."""
        return self._worst_case_usd(*self.render_prompts(ctx))

    # -- the API ---------------------------------------------------------------------------

    def _open_client(self) -> tuple[Any, Any]:
        anthropic = SDK.load(self.name)
        key = os.environ.get("ANTHROPIC_API_KEY", "").strip()
        if not key:
            raise UsageError("the anthropic backend needs an API key in the environment variable "
                             "ANTHROPIC_API_KEY (it is read from there only)")
        # An explicit api_key keeps the SDK from looking for other credentials (profiles,
        # ANTHROPIC_AUTH_TOKEN); base_url is left to the SDK, which reads ANTHROPIC_BASE_URL.
        # Retries are ours (bounded, and visible in the request count), hence max_retries=0.
        client = anthropic.Anthropic(api_key=key, timeout=self.timeout_s, max_retries=0)
        return anthropic, client

    @property
    def base_url(self) -> str:
        """Where requests go (``ANTHROPIC_BASE_URL`` or the SDK's default)."""
        return str(self._client.base_url)

    def _request(self, system: str, user: str, record: ReplyRecord, worst: float | None) -> tuple[Any, str | None]:
        """The response, or None and why, after at most ``1 + max_retries`` HTTP requests."""
        sdk = self._sdk
        kwargs: dict[str, Any] = {
            "model": self.model, "max_tokens": self.max_tokens, "system": system,
            "messages": [{"role": "user", "content": user}],
        }
        if self.temperature is not None:
            kwargs["temperature"] = self.temperature
        error = "no request sent"
        for attempt in range(self.max_retries + 1):
            if attempt:
                # Re-check the budget: a timed-out request may have been billed.
                if self._over_budget(worst):
                    return None, self._stopped
            self._spend.requests += 1
            record.requests += 1
            retry_after = None
            try:
                response = self._client.messages.create(**kwargs)
                if not isinstance(getattr(response, "content", None), list) or getattr(response, "usage", None) is None:
                    # Not a message (a proxy's error page?): it may have been billed, as far as we know.
                    self._unconfirmed_usd += worst or 0.0
                    return None, "unexpected response: not a Messages API message (no content or usage)"
                return response, None
            except sdk.APITimeoutError:
                error = f"timed out after {self.timeout_s:g} s"
                if worst is not None:
                    self._unconfirmed_usd += worst
            except sdk.APIConnectionError as exc:
                error = f"connection failed ({self._scrub(str(exc.__cause__ or exc))})"
            except sdk.APIStatusError as exc:
                status, kind, message = _api_error(exc)
                error = f"HTTP {status} {kind}: {self._scrub(message)}".strip()
                if status in (401, 403):
                    raise UsageError(f"the Anthropic API refused the key in ANTHROPIC_API_KEY ({error})") from None
                if status not in RETRYABLE_STATUS and status < 500:
                    raise UsageError(f"the Anthropic API rejected the request for model {self.model!r} "
                                     f"({error})") from None
                retry_after = _retry_after(exc.response.headers)
            except sdk.AnthropicError as exc:  # e.g. a 200 whose body is not a message: not worth a retry
                return None, f"unexpected response: {type(exc).__name__}: {self._scrub(str(exc))[:300]}"
            if attempt < self.max_retries:
                time.sleep(self._backoff(attempt, retry_after))
        return None, f"request failed after {self.max_retries + 1} attempts: {error}"

    def _backoff(self, attempt: int, retry_after: float | None) -> float:
        if retry_after is not None and retry_after >= 0:
            return min(retry_after, self.max_retry_after_s)
        return min(self.backoff_s * 2**attempt, self.max_backoff_s) * random.uniform(0.75, 1.0)

    # -- cost ------------------------------------------------------------------------------

    def _usd(self, input_tokens: float, output_tokens: float, cache_write: float = 0, cache_read: float = 0) -> float | None:
        if self.price is None:
            return None
        pin, pout = self.price
        return (input_tokens * pin + cache_write * pin * CACHE_WRITE_FACTOR + cache_read * pin * CACHE_READ_FACTOR
                + output_tokens * pout) / 1e6

    def _worst_case_usd(self, system: str, user: str) -> float | None:
        # A token of Claude's tokenizer covers at least one byte of UTF-8 text, so the
        # prompt's byte count bounds its input tokens (plus a margin for message framing).
        input_bound = len(system.encode()) + len(user.encode()) + 64
        return self._usd(input_bound, self.max_tokens)

    def _over_budget(self, worst: float | None) -> bool:
        """Stop (and say why) when the next request could take spending past ``max_usd``."""
        if self._stopped:
            return True
        if self.max_usd is None or worst is None:
            return False
        committed = self._spend.usd + self._unconfirmed_usd
        if committed + worst > self.max_usd:
            unconfirmed = f" (plus up to ${self._unconfirmed_usd:.4f} for timed-out requests)" if self._unconfirmed_usd else ""
            self._stopped = (f"cost budget: spent ${self._spend.usd:.4f}{unconfirmed} of max_usd ${self.max_usd:.4f}; "
                             f"the next request could cost up to ${worst:.4f}")
            return True
        return False

    def _account(self, response: Any, record: ReplyRecord) -> None:
        usage = response.usage
        fresh = int(getattr(usage, "input_tokens", 0) or 0)
        write = int(getattr(usage, "cache_creation_input_tokens", 0) or 0)
        read = int(getattr(usage, "cache_read_input_tokens", 0) or 0)
        out = int(getattr(usage, "output_tokens", 0) or 0)
        usd = self._usd(fresh, out, write, read)
        record.input_tokens, record.output_tokens, record.usd = fresh + write + read, out, usd
        record.message_id, record.stop_reason = getattr(response, "id", None), getattr(response, "stop_reason", None)
        self._spend.input_tokens += fresh + write + read
        self._spend.output_tokens += out
        self._spend.usd += usd or 0.0

    # -- bookkeeping -----------------------------------------------------------------------

    def _fail(self, record: ReplyRecord, reason: str | None, note: CoderContext | None = None) -> list[Proposal]:
        reason = self._scrub(reason or "no reason")
        self.last_error = record.error = reason
        if note is not None:
            self._note(note, reason)
        return []

    def _note(self, ctx: CoderContext, text: str) -> None:
        """Tell the model, in its next rounds on this kernel, what became of a reply of its."""
        notes = self._notes.setdefault((ctx.model, ctx.kernel.name), [])
        notes.append(f"round {ctx.round + 1}: {self._scrub(text)}")
        del notes[:-MAX_NOTES]

    def _no_candidate_reason(self, parsed: ParsedReply, stop_reason: str | None) -> str:
        if parsed.truncated and stop_reason == "max_tokens":
            return f"the reply was cut off inside a code block (max_tokens {self.max_tokens} reached)"
        if stop_reason == "refusal":
            return "the model refused to answer"
        if not parsed.code_blocks:
            return "the reply has no ```python code block"
        return f"no code block in the reply is a candidate for this kernel: {'; '.join(parsed.rejected)}"

    def _scrub(self, text: str) -> str:
        """``text`` with the API key blanked out, should it ever echo back in an error."""
        key = getattr(self._client, "api_key", None) if hasattr(self, "_client") else None
        return text.replace(key, "***") if key and text else text

    def __repr__(self) -> str:
        return (f"ClaudeCoder(model={self.model!r}, max_usd={self.max_usd!r}, spend=${self._spend.usd:.4f}, "
                f"requests={self._spend.requests}, stopped={self._stopped!r})")


def _attempt_view(n: int, attempt: Attempt) -> dict[str, Any]:
    reason = (redact_seeds(attempt.reason) or "").strip()  # an Attempt is redacted already; the prompt makes sure
    if len(reason) > MAX_REASON_CHARS:
        reason = reason[: MAX_REASON_CHARS - 3] + "..."
    speedup = ""
    if attempt.model_timing is not None:
        t = attempt.model_timing
        speedup = f"whole model {timing_text(t)}"
    rationale = attempt.rationale.strip()
    if len(rationale) > 300:
        rationale = rationale[:297] + "..."
    return {"n": n, "origin": attempt.origin, "status": attempt.status, "stage": attempt.stage,
            "reason": reason, "speedup": speedup, "rationale": rationale}


def _api_error(exc: Any) -> tuple[int, str, str]:
    """(status, error type, message) of an SDK status error, from the API's error body."""
    body = getattr(exc, "body", None)
    error = body.get("error") if isinstance(body, dict) else None
    if isinstance(error, dict):
        return exc.status_code, str(error.get("type", "")), str(error.get("message", ""))[:300]
    return exc.status_code, "", str(getattr(exc, "message", "") or "")[:300]


def _retry_after(headers: Any) -> float | None:
    """Seconds the API asks to wait (``retry-after-ms`` or numeric ``retry-after``)."""
    for name, scale in (("retry-after-ms", 1e-3), ("retry-after", 1.0)):
        if headers is None or (value := headers.get(name)) is None:
            continue
        try:
            seconds = float(value) * scale
        except (TypeError, ValueError):
            continue
        if math.isfinite(seconds):
            return max(seconds, 0.0)
    return None


def _price_pair(value: Any) -> tuple[float, float]:
    try:
        pin, pout = (float(v) for v in value)
    except (TypeError, ValueError):
        pin = pout = math.nan
    if not (math.isfinite(pin) and math.isfinite(pout) and pin >= 0 and pout >= 0):
        raise UsageError(f"anthropic backend: price_per_mtok must be two non-negative numbers "
                         f"(USD per million input and output tokens), got {value!r}")
    return pin, pout


def _positive(label: str, value: Any, *, integer: bool = False, zero: bool = False) -> None:
    ok = isinstance(value, int) and not isinstance(value, bool) if integer else (
        isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value))
    if not ok or value < 0 or (value == 0 and not zero):
        kind = "an integer" if integer else "a number"
        bound = ">= 0" if zero else "> 0"
        raise UsageError(f"anthropic backend: {label} must be {kind} {bound}, got {value!r}")


__all__ = ["ClaudeCoder", "ParsedReply", "ReplyCandidate", "ReplyRecord", "PRICES_PER_MTOK", "parse_reply", "price_for"]


# --- what kernelopt tune offers ------------------------------------------------------------

def _dollars(value: float) -> float:
    if not math.isfinite(value) or value <= 0:
        raise ValueError("must be a positive, finite number of dollars")
    return value


class ClaudeOptions(BaseModel):
    """The options ``kernelopt tune`` offers this backend (``--model``, ``--max-usd``); the constructor takes more."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    model: str = Field(DEFAULT_MODEL, description="the model id")
    max_usd: Annotated[float, AfterValidator(_dollars)] | None = Field(
        None, description="stop cleanly once this many dollars are spent", json_schema_extra={"metavar": "USD"})


BACKEND = Backend(coder=ClaudeCoder, options=ClaudeOptions, sdk=SDK)
