"""The GPU suite (see conftest.py): a package, so that its conftest does not shadow tests/conftest.py."""
