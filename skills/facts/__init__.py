"""Facts about a host: each a command plus a pure parser, tested on real captures (tests/fixtures)."""
