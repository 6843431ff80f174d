"""The Slack front end: Bolt app, Block Kit, the run observer and approvals."""
