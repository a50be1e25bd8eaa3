"""A plugin whose import fails (tests/test_plugins.py: the error is one line naming the module)."""

raise RuntimeError("this plugin needs a setting\nthat is missing")
