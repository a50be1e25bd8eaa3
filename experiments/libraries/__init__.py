"""Third-party libraries where famlab needs more than their public API: every private or undocumented attribute
famlab uses, one named function each (``internals``). The lowest layer of ``experiments/``: it imports nothing of
famlab's, so every other folder may use it.
"""
