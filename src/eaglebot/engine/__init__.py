"""The engine: playbooks, templating, the skill registry, redaction and the runner."""
