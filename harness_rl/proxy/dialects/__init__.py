"""Wire-dialect codecs: one module per client dialect, all normalized to vLLM chat completions."""

from harness_rl.proxy.dialects.base import DecodedRequest, Dialect, StreamEncoder
from harness_rl.proxy.dialects.openai_chat import OpenAIChat


def default_dialects() -> list[Dialect]:
    """The dialects the proxy serves; Responses, Anthropic Messages and Google generateContent join here."""
    return [OpenAIChat()]


__all__ = ["DecodedRequest", "Dialect", "OpenAIChat", "StreamEncoder", "default_dialects"]
