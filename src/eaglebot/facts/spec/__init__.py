"""Speculative decoding and its drafts: what a draft is fed and trained on, what a running server
accepts of it, the per-method pre-flight, whether speculation is really on, a tuning's probes."""
