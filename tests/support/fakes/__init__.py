"""Fakes of external services and programs used by the tests."""
