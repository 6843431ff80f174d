"""Helpers shared by several skills, never a skill itself: GPU snapshots (gpu), which
processes the bot started and stopping them (processes), the launched server's pid file
and session (server), file edits and backups (files), a benchmark run (bench)."""
