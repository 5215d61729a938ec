"""The inference engine: a vLLM OpenAI server process, its admin client, and the LoRA adapter registry."""
