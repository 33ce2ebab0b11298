"""`gryvia`: the command-line tool of Gryvia. It talks to the REST API only (stdlib, httpx and PyYAML)."""

__version__ = "0.1.0"
