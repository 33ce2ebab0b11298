"""The llm app's choices: inference service runtimes, tasks and phases (also importable from apps.llm.models)."""

from django.db import models


class Runtime(models.TextChoices):
    """How a service's model is served: an external URL, or a server Gryvia runs."""

    EXTERNAL = "external", "External OpenAI-compatible URL"
    LLAMACPP = "llamacpp", "llama.cpp (GGUF)"
    SENTENCE_TRANSFORMERS = "sentence-transformers", "sentence-transformers (embeddings)"
    VLLM = "vllm", "vLLM"
    TGI = "tgi", "Text Generation Inference"


class Task(models.TextChoices):
    """What a service's model does: chat and text completions, or embeddings."""

    CHAT = "chat", "Chat and text completions"
    EMBEDDINGS = "embeddings", "Embeddings"


class ServicePhase(models.TextChoices):
    """Where the reconciler has a service: written to `status_phase`."""

    PENDING = "Pending"
    DEPLOYING = "Deploying"
    READY = "Ready"
    DEGRADED = "Degraded"
    FAILED = "Failed"
    STOPPED = "Stopped"
