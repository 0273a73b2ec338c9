"""Fakes shared by the test suites (importable as ``fakes``: ``tests/`` is on ``sys.path``
because ``tests/conftest.py`` sits in a folder that is not a package)."""
