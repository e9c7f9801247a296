"""The notebook's surfaces: the magics, what they show, and the build widget — thin layers over ``msnb.session``.

``magics`` (IPython magics), ``display`` (summaries, errors, status), ``attributions`` (explanations as bars),
``help`` (``%%ms_handler?`` and completion), ``quiet`` (TorchServe's import notices filtered), ``widget/``.
Holds no step of its own.
"""
