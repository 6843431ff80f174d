"""eaglebot: chat-ops for SGLang / EAGLE-3 inference servers on GPU nodes."""

__version__ = "0.1.0"
