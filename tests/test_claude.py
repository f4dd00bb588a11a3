"""The ``anthropic`` Coder backend against a fake Messages API on 127.0.0.1.

The real SDK talks HTTP to :class:`FakeMessagesAPI` (a ``ThreadingHTTPServer`` serving
``POST /v1/messages`` with canned bodies in the Messages API's shape); it finds the
server through ``ANTHROPIC_BASE_URL`` only, as a user's environment would point it. No
test here reaches the network: proxies are switched off and the fixture checks the URL.

The kernel is a real unedited dump: ``tests/data/elementwise_chain_kernel.json`` holds the
captured ``KernelInfo`` of ``tests/problems/elementwise_chain.py`` and its
``render_dump`` (interpreter mode). ``test_fixture_is_todays_dump`` (slow) recompiles the
problem and fails when the fixture is stale; regenerate it with
``.venv/bin/python tests/test_claude.py``.
"""

from __future__ import annotations

import json
import threading
import time
from collections import deque
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

TESTS = Path(__file__).parent
FIXTURE = TESTS / "data" / "elementwise_chain_kernel.json"
KEY = "sk-ant-fake-0123456789-SECRET-abcdef"
MODEL = "claude-sonnet-4-6"


# --- the fake API -----------------------------------------------------------------------

def message(text: str, input_tokens: int = 1200, output_tokens: int = 400, stop_reason: str = "end_turn") -> dict:
    """A Messages API response body, as the API sends it."""
    return {
        "id": "msg_01FakeFakeFakeFakeFake", "type": "message", "role": "assistant", "model": MODEL,
        "content": [{"type": "text", "text": text}], "stop_reason": stop_reason, "stop_sequence": None,
        "usage": {"input_tokens": input_tokens, "output_tokens": output_tokens,
                  "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0},
    }


def api_error(status: int, kind: str, text: str, headers: dict[str, str] | None = None) -> tuple:
    return status, {"type": "error", "error": {"type": kind, "message": text}}, headers or {}


class FakeMessagesAPI:
    """Answers each request with the next queued reply: ``(status, body, headers)`` or
    ``("sleep", seconds)`` (say nothing for that long). Records every request."""

    def __init__(self) -> None:
        self.replies: deque[tuple] = deque()
        self.requests: list[dict[str, Any]] = []
        self.release = threading.Event()
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - http.server's name
                body = self.rfile.read(int(self.headers.get("content-length", 0)))
                fake.requests.append({"path": self.path, "body": json.loads(body),
                                      "headers": {k.lower(): v for k, v in self.headers.items()}})
                reply = fake.replies.popleft() if fake.replies else api_error(
                    400, "invalid_request_error", "fake server: no reply queued")
                if reply[0] == "sleep":
                    fake.release.wait(reply[1])
                    reply = (200, message("late"), {})
                status, payload, headers = reply
                data = json.dumps(payload).encode()
                try:
                    self.send_response(status)
                    self.send_header("content-type", "application/json")
                    self.send_header("content-length", str(len(data)))
                    for name, value in headers.items():
                        self.send_header(name, value)
                    self.end_headers()
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):  # the client gave up (timeout tests)
                    pass

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True)
        self.thread.start()

    def queue(self, *replies: tuple) -> None:
        self.replies.extend(replies)

    def text(self, text: str, **usage: Any) -> tuple:
        return 200, message(text, **usage), {}

    def close(self) -> None:
        self.release.set()
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture(autouse=True)
def _interpreter_before_triton() -> None:
    """Overrides conftest's: the backend imports neither torch nor triton (checked below), so
    these tests need no interpreter mode; the fixture test asks for it through compiled_models."""


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> Any:
    api = FakeMessagesAPI()
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy",
                 "ANTHROPIC_CUSTOM_HEADERS"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")
    monkeypatch.setenv("ANTHROPIC_API_KEY", KEY)
    monkeypatch.setenv("ANTHROPIC_BASE_URL", api.url)
    yield api
    api.close()


# --- the kernel ---------------------------------------------------------------------------

@pytest.fixture(scope="module")
def kernel() -> dict[str, Any]:
    from pytest_kernelopt.records import KernelInfo

    data = json.loads(FIXTURE.read_text())
    return {"model": data["model"], "info": KernelInfo.model_validate(data["kernel"]), "dump": data["dump"]}


def context(kernel: dict[str, Any], **fields: Any) -> Any:
    from pytest_kernelopt.runs.records import CoderContext

    base = {"model": kernel["model"], "device": "cpu", "kernel": kernel["info"], "original": kernel["dump"],
            "best": kernel["dump"]}
    return CoderContext(**(base | fields))


def coder(**options: Any) -> Any:
    from pytest_kernelopt.agents.backends import make_coder

    settings = {"model": MODEL, "timeout_s": 5.0, "max_retries": 2, "backoff_s": 0.005, "max_backoff_s": 0.02}
    made = make_coder("anthropic", **(settings | options))
    assert made.base_url.startswith("http://127.0.0.1:")  # never the real API
    return made


def edited(dump: str, block: int) -> str:
    """The dump with another launch configuration: a different, still valid candidate."""
    assert "XBLOCK = 256" in dump
    return dump.replace("XBLOCK = 256", f"XBLOCK = {block}")


def reply_with(*files: str, rationale: str = "Larger blocks per program amortise index math.") -> str:
    parts = ["Here are the candidates.\n"]
    for n, source in enumerate(files, 1):
        parts.append(f"### Candidate {n}\nRationale: {rationale} ({n})\n\n```python\n{source}```\n")
    return "\n".join(parts)


def user_message(request: dict[str, Any]) -> str:
    (msg,) = request["body"]["messages"]
    assert msg["role"] == "user"
    return msg["content"] if isinstance(msg["content"], str) else "".join(b["text"] for b in msg["content"])


# --- replies ------------------------------------------------------------------------------

def test_good_reply_gives_the_dump_as_a_proposal(fake, kernel):
    from pytest_kernelopt.verify.static import check_candidate

    dump = kernel["dump"]
    fake.queue(fake.text(reply_with(dump, edited(dump, 128)), input_tokens=2000, output_tokens=1000))
    backend = coder()
    proposals = backend.propose(context(kernel))

    assert [p.source for p in proposals] == [dump, edited(dump, 128)]  # byte for byte
    assert all(p.origin == f"anthropic:{MODEL}" for p in proposals)
    assert proposals[0].rationale == "Larger blocks per program amortise index math. (1)"
    args = [a.name for a in kernel["info"].args]
    assert check_candidate(proposals[0].source, entry_args=args).ok  # the static stage takes it as is
    assert backend.last_error is None and backend.stopped is None
    spend = backend.spend
    assert (spend.input_tokens, spend.output_tokens, spend.requests) == (2000, 1000, 1)
    assert spend.usd == pytest.approx(2000 * 3 / 1e6 + 1000 * 15 / 1e6)
    assert backend.last_reply.candidates == 2 and backend.last_reply.usd == pytest.approx(spend.usd)

    (request,) = fake.requests
    assert request["path"] == "/v1/messages"
    # The key from ANTHROPIC_API_KEY, sent to ANTHROPIC_BASE_URL (SDK 2.x writes it as a bearer token).
    headers = request["headers"]
    assert headers.get("x-api-key") == KEY or headers.get("authorization") == f"Bearer {KEY}", headers.keys()
    body = request["body"]
    assert body["model"] == MODEL and body["max_tokens"] == backend.max_tokens and "temperature" not in body
    assert "candidate language" in body["system"] and "stream=None" in body["system"]
    text = user_message(request)
    assert dump.rstrip("\n") in text  # the kernel's candidate-format source
    assert "run(in_ptr0, in_ptr1, out_ptr0, xnumel, *, stream=None)" in text
    assert "| `in_ptr0` | tensor | [4, 64] | [64, 1] | float32 |" in text


def test_reply_without_code_is_recorded_and_told_next_round(fake, kernel):
    fake.queue(fake.text("I would increase the block size, but I am not sure it helps."),
               fake.text(reply_with(edited(kernel["dump"], 512))))
    backend = coder()
    assert backend.propose(context(kernel)) == []
    assert "no ```python code block" in backend.last_error
    assert backend.last_reply.error == backend.last_error and backend.stopped is None

    proposals = backend.propose(context(kernel, round=1))  # the loop goes on; the reply was paid for
    assert len(proposals) == 1 and backend.last_error is None
    assert "round 1: the reply has no ```python code block" in user_message(fake.requests[1])
    assert backend.spend.requests == 2


def test_wrong_kernel_is_rejected_and_recorded(fake, kernel):
    dump = kernel["dump"]
    wrong_signature = dump.replace("def run(in_ptr0, in_ptr1, out_ptr0, xnumel, *, stream=None)",
                                   "def run(x, bias, out, n, *, stream=None)")
    not_python = "def run(in_ptr0, in_ptr1, out_ptr0, xnumel, *, stream=None):\n    grid = (\n"
    no_entry = dump.replace("def run(", "def launch(")
    fake.queue(fake.text(reply_with(wrong_signature, not_python, no_entry)),
               fake.text(reply_with(wrong_signature, edited(dump, 64))))
    backend = coder()

    assert backend.propose(context(kernel)) == []
    reason = backend.last_error
    assert "no code block in the reply is a candidate for this kernel" in reason
    assert "block 1: `run(x, bias, out, n)` does not take the kernel's arguments (in_ptr0, in_ptr1, out_ptr0, xnumel)" in reason
    assert "block 2: does not parse" in reason and "block 3: no module-level `def run(...)`" in reason
    assert len(backend.last_reply.rejected) == 3

    # A reply mixing a wrong file and a good one: the good one is proposed, the other recorded.
    proposals = backend.propose(context(kernel, round=1))
    assert [p.source for p in proposals] == [edited(dump, 64)]
    assert backend.last_reply.rejected == [backend.last_reply.rejected[0]] and "run(x, bias" in backend.last_reply.rejected[0]
    assert "does not take the kernel's arguments" in user_message(fake.requests[1])  # told to the model


def test_files_beyond_the_round_are_not_used(fake, kernel):
    dump = kernel["dump"]
    fake.queue(fake.text(reply_with(*(edited(dump, b) for b in (32, 64, 128)))), fake.text("nothing"))
    backend = coder(candidates_per_round=2)
    assert [p.source for p in backend.propose(context(kernel))] == [edited(dump, 32), edited(dump, 64)]
    assert backend.last_reply.rejected == ["1 more files than the 2 asked for were not used"]
    backend.propose(context(kernel, round=1))
    assert "round 1: code blocks not used: 1 more files than the 2 asked for" in user_message(fake.requests[1])


def test_cut_off_reply_says_so(fake, kernel):
    fake.queue(fake.text("### Candidate 1\n```python\nimport triton\n", stop_reason="max_tokens"))
    backend = coder(max_tokens=500)
    assert backend.propose(context(kernel)) == []
    assert backend.last_error == "the reply was cut off inside a code block (max_tokens 500 reached)"


# --- retries, timeouts, refusals ----------------------------------------------------------

def test_rate_limit_and_overload_are_retried(fake, kernel):
    fake.queue(api_error(429, "rate_limit_error", "slow down", {"retry-after-ms": "5"}),
               api_error(529, "overloaded_error", "Overloaded"),
               fake.text(reply_with(kernel["dump"])))
    backend = coder(max_retries=2)
    t0 = time.monotonic()
    proposals = backend.propose(context(kernel))
    assert len(proposals) == 1 and backend.last_error is None
    assert len(fake.requests) == 3 and backend.spend.requests == 3 and backend.last_reply.requests == 3
    assert time.monotonic() - t0 < 3  # the waits were the server's 5 ms and the test's backoff


def test_failures_are_bounded_and_stop_the_backend(fake, kernel):
    fake.queue(*[api_error(500, "api_error", "Internal server error")] * 6)
    backend = coder(max_retries=1, max_consecutive_failures=2)

    assert backend.propose(context(kernel)) == []
    assert backend.last_error == "request failed after 2 attempts: HTTP 500 api_error: Internal server error"
    assert len(fake.requests) == 2 and backend.stopped is None
    assert backend.propose(context(kernel, round=1)) == []
    assert len(fake.requests) == 4
    assert backend.stopped.startswith("the Anthropic API failed 2 rounds in a row")
    assert backend.propose(context(kernel, round=2)) == [] and len(fake.requests) == 4  # stopped: no request


def test_a_response_that_is_not_a_message_is_a_failed_round(fake, kernel):
    fake.queue((200, {"detail": "proxy says hello"}, {}))
    backend = coder()
    assert backend.propose(context(kernel)) == []
    assert backend.last_error == "unexpected response: not a Messages API message (no content or usage)"
    assert len(fake.requests) == 1 and backend.stopped is None


def test_timeout_fails_cleanly_after_bounded_retries(fake, kernel):
    fake.queue(("sleep", 5), ("sleep", 5))
    backend = coder(timeout_s=0.3, max_retries=1)
    t0 = time.monotonic()
    assert backend.propose(context(kernel)) == []
    elapsed = time.monotonic() - t0
    assert backend.last_error == "request failed after 2 attempts: timed out after 0.3 s"
    assert len(fake.requests) == 2 and backend.spend.requests == 2
    assert 0.6 <= elapsed < 4.5  # the server would have answered after 5 s
    assert backend.spend.usd == 0  # nothing confirmed; the budget still counts the worst case (below)


def test_timed_out_requests_count_against_the_budget(fake, kernel):
    probe = coder()
    bound = probe.request_cost_bound(context(kernel))
    fake.queue(("sleep", 5))
    backend = coder(timeout_s=0.3, max_retries=3, max_usd=bound * 1.5)
    assert backend.propose(context(kernel)) == []
    # The first request may have been billed in full: a second one would not fit in the budget.
    assert len(fake.requests) == 1
    assert backend.stopped.startswith("cost budget") and "timed-out requests" in backend.stopped


@pytest.mark.parametrize("status, kind, expected", [
    (401, "authentication_error", "refused the key in ANTHROPIC_API_KEY (HTTP 401 authentication_error: invalid x-api-key)"),
    (400, "invalid_request_error", "rejected the request for model 'claude-sonnet-4-6' (HTTP 400 invalid_request_error: "
                                   "max_tokens: too large)"),
    (404, "not_found_error", "rejected the request for model 'claude-sonnet-4-6' (HTTP 404 not_found_error: model: nope)"),
])
def test_refused_requests_are_one_clear_line(fake, kernel, status, kind, expected):
    from pytest_kernelopt.errors import UsageError

    message_text = {401: "invalid x-api-key", 400: "max_tokens: too large", 404: "model: nope"}[status]
    fake.queue(api_error(status, kind, message_text))
    backend = coder()
    with pytest.raises(UsageError) as info:
        backend.propose(context(kernel))
    text = str(info.value)
    assert text == f"the Anthropic API {expected}"
    assert "\n" not in text and info.value.__cause__ is None
    assert len(fake.requests) == 1  # not retried


# --- cost -----------------------------------------------------------------------------------

def test_budget_stops_before_a_request_that_might_not_fit(fake, kernel):
    ctx = context(kernel)
    probe = coder()
    bound = probe.request_cost_bound(ctx)
    assert bound == pytest.approx(
        (len(probe.render_prompts(ctx)[0].encode()) + len(probe.render_prompts(ctx)[1].encode()) + 64) * 3 / 1e6
        + probe.max_tokens * 15 / 1e6)

    # Room for one request, not two: the first goes out, then the backend stops on its own.
    fake.queue(fake.text(reply_with(kernel["dump"]), input_tokens=3000, output_tokens=6000),
               fake.text(reply_with(kernel["dump"])))
    backend = coder(max_usd=bound * 1.5)
    assert len(backend.propose(ctx)) == 1
    assert len(fake.requests) == 1
    spent = 3000 * 3 / 1e6 + 6000 * 15 / 1e6
    assert spent > bound / 2
    assert backend.spend.usd == pytest.approx(spent)
    assert backend.stopped == (f"cost budget: spent ${spent:.4f} of max_usd ${bound * 1.5:.4f}; "
                               f"the next request could cost up to ${bound:.4f}")
    assert backend.propose(context(kernel, round=1)) == []
    assert backend.last_error == backend.stopped and len(fake.requests) == 1  # no further HTTP request

    # A budget smaller than one request: nothing is ever sent.
    tiny = coder(max_usd=bound / 2)
    assert tiny.propose(ctx) == [] and tiny.stopped.startswith("cost budget: spent $0.0000")
    assert len(fake.requests) == 1 and tiny.spend.requests == 0


def test_prices_by_model_family(fake, kernel):
    from pytest_kernelopt.agents.claude import price_for
    from pytest_kernelopt.errors import UsageError

    assert price_for("claude-sonnet-4-6") == price_for("claude-sonnet-4-5-20250929") == (3.0, 15.0)
    assert price_for("claude-opus-4-1-20250805") == (15.0, 75.0) and price_for("claude-opus-4-6") == (5.0, 25.0)
    assert price_for("claude-haiku-4-5") == (1.0, 5.0)
    assert price_for("claude-sonnet-40") is None and price_for("my-proxy-model") is None

    # Unknown price: tokens still counted, dollars not, and no budget can be promised.
    fake.queue(fake.text(reply_with(kernel["dump"]), input_tokens=111, output_tokens=22))
    backend = coder(model="my-proxy-model")
    assert len(backend.propose(context(kernel))) == 1
    assert (backend.spend.input_tokens, backend.spend.output_tokens, backend.spend.usd) == (111, 22, 0.0)
    assert not backend.price_known and backend.last_reply.usd is None
    assert fake.requests[0]["body"]["model"] == "my-proxy-model"
    with pytest.raises(UsageError, match="no price is known for model 'my-proxy-model'"):
        coder(model="my-proxy-model", max_usd=1.0)
    assert coder(model="my-proxy-model", max_usd=1.0, price_per_mtok=(1, 2)).price_known


# --- the prompt -----------------------------------------------------------------------------

def test_prompt_carries_profile_attempts_and_their_reasons(fake, kernel):
    from pytest_kernelopt.runs.records import Attempt, KernelProfile
    from pytest_kernelopt.records import Timing

    info = kernel["info"]
    best = edited(kernel["dump"], 128)
    attempts = [
        Attempt(kernel=info.name, origin=f"anthropic:{MODEL}", sha256="a" * 64, status="rejected", stage="kernel",
                reason="out_ptr0 differs from the compiler's kernel at 17 of 256 elements (max abs 0.25)",
                rationale="fused the two clamps into one where"),
        Attempt(kernel=info.name, origin=f"anthropic:{MODEL}", sha256="b" * 64, status="reviewed",
                reason="line 3: import of 'torch' is not in the candidate language"),
        Attempt(kernel=info.name, origin="launch:XBLOCK=128", sha256="c" * 64, status="correct",
                model_timing=Timing(baseline_ms=1.0, candidate_ms=0.99, speedup=1.0101, ci_low=0.995,
                                    ci_high=1.021, pairs=30)),
    ]
    profile = KernelProfile(kernel=info.name, source="ncu", bottleneck="memory", share=0.625, gpu_us=12.5,
                            achieved_gbps=1830.0, roofline_pct=41.5, registers=40, spills=3)
    fake.queue(fake.text("nothing"))
    backend = coder(max_attempts_shown=2)
    backend.propose(context(kernel, device="cuda", best=best, best_origin="launch:XBLOCK=128",
                            attempts=attempts, profile=profile, round=2, strategies=["launch"],
                            compile="max-autotune"))
    text = user_message(fake.requests[0])
    assert "compiled with Inductor's `max-autotune` settings" in text  # the model's compile choice

    assert "round 3" in text
    assert "(1 older attempts not shown.)" in text
    assert "fused the two clamps" not in text  # the oldest attempt is beyond max_attempts_shown
    assert "**reviewed**: line 3: import of 'torch' is not in the candidate language" in text
    assert "**correct**, whole model 1.010x [0.995, 1.021]" in text
    assert "bottleneck: **memory** (Nsight Compute)" in text and "62.5%" in text
    assert "41.5% of the measured copy ceiling" in text
    assert "at most 58% of it is left to win" in text  # the distance to the limit, issue 23
    assert "registers per thread: 40" in text and "register spills: 3" in text
    assert "best version so far (`launch:XBLOCK=128`)" in text and best.rstrip("\n") in text
    assert "speed is not measured" not in text  # a GPU context

    fake.queue(fake.text("nothing"))
    coder(max_attempts_shown=5).propose(context(kernel, attempts=attempts))
    assert "settings (its stored compile choice" not in user_message(fake.requests[1])  # the defaults: not said
    assert "out_ptr0 differs from the compiler's kernel at 17 of 256 elements (max abs 0.25)" in user_message(
        fake.requests[1])


def test_user_templates_override_the_bundled_prompts(fake, kernel, tmp_path):
    override = tmp_path / "prompts" / "kernel.md.j2"
    override.parent.mkdir()
    override.write_text("Make {{ kernel.name }} faster; {{ attempts | length }} attempts so far.\n")
    fake.queue(fake.text("nothing"))
    coder(templates_dir=tmp_path).propose(context(kernel))
    request = fake.requests[0]
    assert user_message(request) == f"Make {kernel['info'].name} faster; 0 attempts so far.\n"
    assert "candidate language" in request["body"]["system"]  # not overridden: the bundled one


def test_prompt_templates_ship_in_the_wheel():
    """The wheel carries templates/ as pytest_kernelopt/_templates (package-data globs of pyproject.toml)."""
    import tomllib

    from pytest_kernelopt.templates import bundled_dir

    setuptools = tomllib.loads((TESTS.parent / "pyproject.toml").read_text())["tool"]["setuptools"]
    assert setuptools["package-dir"]["pytest_kernelopt._templates"] == "templates"
    assert "pytest_kernelopt._templates.prompts" in setuptools["packages"]
    root = TESTS.parent / "templates"
    shipped = {p.relative_to(root).as_posix()
               for package, patterns in setuptools["package-data"].items() if package.startswith("pytest_kernelopt._templates")
               for pattern in patterns
               for p in (root / package.removeprefix("pytest_kernelopt._templates").lstrip(".").replace(".", "/")).glob(pattern)}
    assert {"prompts/system.md.j2", "prompts/kernel.md.j2"} <= shipped
    assert (bundled_dir() / "prompts" / "kernel.md.j2").is_file()


def test_rounds_per_kernel_are_bounded(fake, kernel):
    backend = coder(max_rounds=2)
    assert backend.propose(context(kernel, round=2)) == []
    assert backend.last_error is None and backend.stopped is None and fake.requests == []


# --- the key ------------------------------------------------------------------------------

def test_key_is_never_exposed(fake, kernel):
    from pytest_kernelopt.errors import UsageError

    fake.queue(fake.text(reply_with(kernel["dump"])), fake.text("no code"),
               api_error(500, "api_error", f"echoing {KEY}"), api_error(500, "api_error", f"echoing {KEY}"),
               api_error(401, "authentication_error", f"invalid x-api-key {KEY}"))
    backend = coder(max_retries=1)
    seen = []
    proposals = backend.propose(context(kernel))
    seen += [p.model_dump_json() for p in proposals] + [backend.last_reply.model_dump_json()]
    backend.propose(context(kernel, round=1))
    seen += [backend.last_error, backend.last_reply.model_dump_json()]
    backend.propose(context(kernel, round=2))
    assert "echoing ***" in backend.last_error
    seen += [backend.last_error, backend.last_reply.model_dump_json()]
    with pytest.raises(UsageError) as info:
        backend.propose(context(kernel, round=3))
    seen += [str(info.value), repr(info.value), backend.spend.model_dump_json(), repr(backend), str(backend.stopped)]
    seen += [repr(value) for name, value in vars(backend).items() if not name.startswith("_")]
    seen += [json.dumps(r["body"]) for r in fake.requests]  # what was sent, besides the header
    assert all(KEY not in text for text in seen)
    assert "SECRET" not in "".join(seen)


def test_key_only_from_the_environment(monkeypatch, fake):
    from pytest_kernelopt.errors import UsageError
    from pytest_kernelopt.verify.worker import worker_env

    monkeypatch.delenv("ANTHROPIC_API_KEY")
    monkeypatch.setenv("ANTHROPIC_AUTH_TOKEN", "not-a-key-we-read")
    with pytest.raises(UsageError) as info:
        coder()
    assert str(info.value) == ("the anthropic backend needs an API key in the environment variable "
                               "ANTHROPIC_API_KEY (it is read from there only)")
    assert fake.requests == []
    # The verification worker never sees it.
    assert "ANTHROPIC_API_KEY" not in worker_env({"ANTHROPIC_API_KEY": KEY, "PATH": "/bin"})


def test_missing_sdk_names_the_install_command(monkeypatch, fake):
    import sys

    from pytest_kernelopt.errors import UsageError

    monkeypatch.setitem(sys.modules, "anthropic", None)  # import anthropic -> ImportError
    import re

    from pytest_kernelopt.errors import install_hint

    with pytest.raises(UsageError, match=re.escape(f"needs the Anthropic SDK: {install_hint('agents')}")):
        coder()


def test_bad_options_are_usage_errors(fake):
    from pytest_kernelopt.errors import UsageError

    for options in ({"max_usd": 0}, {"max_usd": float("nan")}, {"candidates_per_round": 0}, {"timeout_s": -1},
                    {"max_retries": -1}, {"max_tokens": 1.5}, {"model": ""}):
        with pytest.raises(UsageError, match="anthropic backend"):
            coder(**options)


def test_importing_the_backend_imports_no_sdk_torch_or_triton():
    import subprocess
    import sys

    code = ("import sys, pytest_kernelopt.agents.claude, pytest_kernelopt.templates, pytest_kernelopt.verify.static; "
            "print(sorted(m for m in ('anthropic', 'torch', 'triton') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


# --- the fixture ----------------------------------------------------------------------------

def _current_fixture(compiled: Any) -> dict[str, Any]:
    from pytest_kernelopt.candidate import render_dump

    (handle,) = compiled.kernels.values()
    return {"model": compiled.problem.id, "kernel": handle.info.model_dump(mode="json"),
            "dump": render_dump(handle.info, compiled.problem.id)}


@pytest.mark.slow
def test_fixture_is_todays_dump(compiled_models):
    current = _current_fixture(compiled_models.get(TESTS / "problems" / "elementwise_chain.py"))
    assert current == json.loads(FIXTURE.read_text()), \
        f"{FIXTURE} is stale: regenerate it with `.venv/bin/python tests/test_claude.py`"


if __name__ == "__main__":  # regenerate the fixture
    from pytest_kernelopt.capture import compile_problem
    from pytest_kernelopt.config import resolve_device
    from pytest_kernelopt.capture.problem import load_problem

    problem = load_problem(TESTS / "problems" / "elementwise_chain.py")
    FIXTURE.parent.mkdir(exist_ok=True)
    FIXTURE.write_text(json.dumps(_current_fixture(compile_problem(problem, resolve_device("cpu"))), indent=2) + "\n")
    print(f"wrote {FIXTURE}")
