PYTHON ?= python

.PHONY: test test-slow lint format type check-codestyle

test:
	$(PYTHON) -m pytest

test-slow:
	$(PYTHON) -m pytest -m slow

lint:
	$(PYTHON) -m ruff check sb3_async tests examples

format:
	$(PYTHON) -m ruff format sb3_async tests examples
	$(PYTHON) -m ruff check --fix sb3_async tests examples

type:
	$(PYTHON) -m mypy sb3_async
