"""harness-rl: train LoRA adapters with asynchronous GRPO inside unmodified coding-agent harnesses."""

__version__ = "0.1.0"
