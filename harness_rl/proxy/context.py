"""Reading the engine's context-length refusals, so a call whose output would overflow the model's context is
retried with what is left of it, and a prompt that alone fills the context ends the run as an attempt.

The proxy never tokenizes (the engine's ``prompt_token_ids`` are the truth), so it cannot know a prompt's length
before the engine has seen it. What the engine does with ``prompt + max_tokens > max_model_len`` depends on its
version:

- vLLM 0.32 (the version this project installs) clamps the output budget itself: ``get_max_tokens`` in
  ``vllm/entrypoints/serve/utils/api_utils.py`` takes ``min(max_model_len - prompt, max_tokens)``, so such a call
  costs nothing extra and simply ends with finish_reason "length". It refuses only ``max_tokens > max_model_len``
  (``renderers/params.py``: "max_tokens=X cannot be greater than max_model_len=N"), a prompt longer than the context
  ("This model's maximum context length is N tokens. However, your prompt contains [at least ]P input tokens, which
  exceeds this limit even without any output tokens." or "... your prompt contains C characters ...") and a prompt
  of exactly ``max_model_len`` tokens (the clamp leaves 0: "max_tokens must be at least 1, got 0.").
- vLLM 0.7 to 0.1x refused instead of clamping: "'max_tokens' or 'max_completion_tokens' is too large: C. This
  model's maximum context length is N tokens and your request has P input tokens (C > N - P)." and, for a prompt
  that does not fit, "This model's maximum context length is N tokens. However, your request has P input tokens.
  Please reduce the length of the input messages."
- vLLM up to 0.6: "This model's maximum context length is N tokens. However, you requested T tokens (P in the
  messages, C in the completion)."

So the cheap path (no failed first call) is the engine's own clamp, which the installed vLLM has; the proxy only
caps ``max_tokens`` at the context length when it knows it, and for the older refusals parses the prompt length
and retries once with ``max_tokens = N - P``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_MAX_LEN = re.compile(r"maximum context length is (\d+) tokens")
# vLLM <= 0.6: the request's prompt and completion lengths in one sentence.
_MESSAGES_AND_COMPLETION = re.compile(r"\((\d+) in the messages, (\d+) in the completion\)")
# vLLM 0.7-0.1x: output budget too large for the prompt.
_TOO_LARGE = re.compile(r"is too large: (\d+)\..*?your request has (\d+) input tokens", re.S)
# The prompt alone does not fit (every version's wording, with the prompt length where it is given).
_PROMPT_ONLY = re.compile(
    r"your request has (?P<a>\d+) input tokens"
    r"|your prompt contains (?:at least )?(?P<b>\d+) input tokens"
    r"|your prompt contains \d+ characters"
    r"|you requested (?P<c>\d+) tokens in the messages"
)
# vLLM 0.32: an output budget over the whole context is refused before the prompt is measured.
_OVER_MODEL_LEN = re.compile(r"max_(?:completion_)?tokens=(\d+) cannot be greater than max_model_len=(\d+)")
# vLLM 0.32: the prompt is exactly max_model_len tokens, so the engine's own clamp left 0 output tokens.
_ZERO_ROOM = re.compile(r"max_(?:completion_)?tokens must be at least 1, got 0\b")


@dataclass(frozen=True)
class ContextRefusal:
    """An engine refusal that is about the context length.

    Attributes:
        max_model_len: The context length the engine named (None when its message did not say).
        prompt_tokens: The prompt length it named (None when not given; then only known not to fit).
        retry_max_tokens: The output budget to send again with; None when the prompt alone fills the context.
    """

    max_model_len: int | None
    prompt_tokens: int | None
    retry_max_tokens: int | None

    @property
    def exhausted(self) -> bool:
        """True when no output budget fits: the prompt alone fills the model's context."""
        return self.retry_max_tokens is None


def context_message(max_model_len: int | None) -> str:
    """The assistant text that answers a call whose prompt alone fills the model's context."""
    window = f" ({max_model_len} tokens)" if max_model_len is not None else ""
    return f"The conversation no longer fits in the model's context window{window}; no reply can be made. Stop now."


def parse_context_refusal(message: str, sent_max_tokens: int | None) -> ContextRefusal | None:
    """Reads a vLLM 400 message; returns None when it is not about the context length or cannot be acted on.

    Args:
        message: The engine's error message.
        sent_max_tokens: The ``max_tokens`` the refused request carried (None: it sent none).

    A retry budget that would not be smaller than what was sent is not offered (it could only be refused again).
    """
    over = _OVER_MODEL_LEN.search(message)
    if over:
        max_model_len = int(over.group(2))
        # vLLM 0.32 clamps a budget of max_model_len to what the prompt leaves, so this is all it needs.
        return _retry(max_model_len, None, max_model_len, sent_max_tokens)
    if _ZERO_ROOM.search(message) and (sent_max_tokens is None or sent_max_tokens >= 1):
        return ContextRefusal(max_model_len=None, prompt_tokens=None, retry_max_tokens=None)
    max_len = _MAX_LEN.search(message)
    if max_len is None:
        return None
    max_model_len = int(max_len.group(1))
    both = _TOO_LARGE.search(message)
    if both:
        prompt = int(both.group(2))
        return _retry(max_model_len, prompt, max_model_len - prompt, sent_max_tokens)
    both = _MESSAGES_AND_COMPLETION.search(message)
    if both:
        prompt = int(both.group(1))
        return _retry(max_model_len, prompt, max_model_len - prompt, sent_max_tokens)
    alone = _PROMPT_ONLY.search(message)
    if alone:
        count = alone.group("a") or alone.group("b") or alone.group("c")
        return ContextRefusal(max_model_len, int(count) if count else None, retry_max_tokens=None)
    return None


def _retry(max_model_len: int, prompt: int | None, room: int, sent: int | None) -> ContextRefusal | None:
    if room < 1:
        return ContextRefusal(max_model_len, prompt, retry_max_tokens=None)
    if sent is not None and room >= sent:
        return None
    return ContextRefusal(max_model_len, prompt, retry_max_tokens=room)
