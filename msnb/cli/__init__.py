"""The ``msnb`` command: ``main`` parses and dispatches; ``export`` builds a notebook's handlers (``execute`` runs
the notebook in a fresh kernel first); ``serve_state`` lets ``msnb predict`` find a running ``msnb serve``;
``demo`` is the README's first command.
"""
