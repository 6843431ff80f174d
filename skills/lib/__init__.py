"""Helpers shared by several skills (GPU snapshots, server sessions, file edits); never a skill itself."""
