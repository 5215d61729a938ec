"""Which request fields a training session forwards to the engine: an allowlist per dialect.

The harness is driven by the policy being trained, and vLLM's OpenAI server accepts far more than the public
APIs do: ``vllm_xargs``, ``chat_template`` (a Jinja template of the client's choice, rendered by the engine),
``chat_template_kwargs``, ``ignore_eos``, ``guided_*``/``structured_outputs``, ``logits_processors``,
``prompt_logprobs``, ``min_tokens``, ``allowed_token_ids``, ``bad_words``, ``skip_special_tokens``, ``echo``,
``add_generation_prompt``, ``priority``, ``cache_salt``, ``kv_transfer_params``... Any of them lets a call
change how the engine renders, samples or schedules, outside the sampling policy the trainer assumes. So a
training session forwards only the fields of the public API its dialect speaks; everything else is removed
before the call reaches the engine, counted on the session and logged once per session (``Session.note_stripped``).

The translating dialects (Anthropic Messages, OpenAI Responses, Google generateContent) build the engine
request field by field, so their lists are exactly what their translation writes; OpenAI Chat Completions is
forwarded nearly as sent, so its list is the public Chat Completions API. Every field the six harnesses send
in the captured requests (tests/fixtures/captures) passes: tests/unit/test_proxy_request_fields.py replays them.
"""

from __future__ import annotations

from typing import Any

#: OpenAI Chat Completions request fields (the public API; what an OpenAI-compatible harness may send).
#: ``n`` is refused above 1 by the dialect and removed; ``include_reasoning`` is read by the dialect and removed
#: by the relay; both are listed so that a harness sending them is not reported.
OPENAI_CHAT_FIELDS = frozenset(
    (
        "messages model audio frequency_penalty function_call functions include_reasoning logit_bias "
        "logprobs max_completion_tokens max_tokens metadata modalities n parallel_tool_calls prediction "
        "presence_penalty prompt_cache_key reasoning_effort response_format safety_identifier seed "
        "service_tier stop store stream stream_options temperature tool_choice tools top_logprobs top_p user "
        "verbosity web_search_options"
    ).split()
)

#: What ``anthropic_request.decode`` writes into the engine request.
ANTHROPIC_MESSAGES_FIELDS = frozenset(
    ("messages max_tokens temperature top_p top_k stop tools tool_choice parallel_tool_calls").split()
)

#: What ``responses_request.decode`` writes into the engine request.
OPENAI_RESPONSES_FIELDS = frozenset(
    ("messages tools tool_choice parallel_tool_calls max_tokens temperature top_p response_format").split()
)

#: What ``google_request.decode`` writes into the engine request.
GOOGLE_GENERATE_FIELDS = frozenset(
    (
        "messages tools tool_choice max_tokens temperature top_p top_k presence_penalty frequency_penalty "
        "seed stop response_format"
    ).split()
)

#: vLLM request extras a harness has no business sending (none is in OPENAI_CHAT_FIELDS); the tests check each is
#: stripped from an OpenAI Chat request (the dialect forwarded as sent; the translating dialects never write
#: them). Not a denylist: anything outside a dialect's allowlist is stripped, listed here or not.
VLLM_EXTRAS = tuple(
    (
        "vllm_xargs chat_template chat_template_kwargs ignore_eos guided_json guided_regex guided_choice "
        "guided_grammar guided_decoding_backend structured_outputs structural_tag logits_processors "
        "prompt_logprobs min_tokens allowed_token_ids bad_words skip_special_tokens "
        "spaces_between_special_tokens echo add_generation_prompt continue_final_message add_special_tokens "
        "documents mm_processor_kwargs priority request_id cache_salt kv_transfer_params "
        "return_tokens_as_token_ids return_token_ids include_stop_str_in_output stop_token_ids "
        "truncate_prompt_tokens min_p repetition_penalty use_beam_search length_penalty top_k"
    ).split()
)


def strip_unlisted(body: dict[str, Any], allowed: frozenset[str]) -> list[str]:
    """Remove from ``body`` (in place) every top-level field not in ``allowed``; returns their names, sorted."""
    stripped = sorted(name for name in body if name not in allowed)
    for name in stripped:
        del body[name]
    return stripped
