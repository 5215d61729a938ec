"""Wire-dialect codecs: one module per client dialect, all normalized to vLLM chat completions."""

from harness_rl.proxy.dialects.anthropic_messages import AnthropicMessages
from harness_rl.proxy.dialects.base import DecodedRequest, Dialect, StreamEncoder
from harness_rl.proxy.dialects.google_generate import GoogleGenerateContent
from harness_rl.proxy.dialects.openai_chat import OpenAIChat
from harness_rl.proxy.dialects.openai_responses import OpenAIResponses


def default_dialects() -> list[Dialect]:
    """The dialects the proxy serves (routing is by path; each codec owns its routes)."""
    return [OpenAIChat(), OpenAIResponses(), AnthropicMessages(), GoogleGenerateContent()]


__all__ = [
    "AnthropicMessages",
    "DecodedRequest",
    "Dialect",
    "GoogleGenerateContent",
    "OpenAIChat",
    "OpenAIResponses",
    "StreamEncoder",
    "default_dialects",
]
