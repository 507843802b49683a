"""The page's tests share the browser fixture of the controller's page tests (tests/unit)."""

from tests.unit.test_chat_page import driver  # noqa: F401 (a fixture: one headless chromium for the module)
