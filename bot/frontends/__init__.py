"""Front ends: the CLI, the chat grammar (Slack and `eagle chat`), Slack, and the scheduler. Presentation lives only here."""
