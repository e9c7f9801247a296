"""Capture: a ``%%ms_handler`` cell (live in the kernel, or read from a notebook file) becomes a ``HandlerSpec``.

Never runs user code. ``cells`` is the entry (the transitive closure of definitions); ``scope``, ``mutations`` and
``runtime_names`` analyse names; ``kernel_values`` snapshots run-time values; ``local_code``, ``imports``,
``requirements``, ``requirement_rules`` and ``secret_rules`` decide what travels with the code; ``notebook``
reads ``.ipynb`` files.
"""
