"""Front ends: the CLI, the chat grammar (Slack and `eagle chat`), Slack, and `eagle serve`'s runtime (service/). Presentation lives only here."""
