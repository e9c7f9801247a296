"""Files copied into every .mar: the shared handler, the handler_model.py template, default configs.

Installed as the ``msnb.templates`` package so a wheel carries them (see pyproject.toml).
"""
