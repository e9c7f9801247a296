"""Trial: the rendered handler run as a TorchServe worker runs it, in a forked child, before anything is served.

The one place that runs user code before serving. ``runner`` is the entry (validate, predict, explain);
``batches`` sends samples in the server's batches; ``processes`` owns one child per handler generation, forked
from the warm ``fork_server``; ``child`` is what runs inside it; ``worker`` loads a model folder and drives its
``handle()`` with TorchServe's own ``Context``; ``worker_imports`` imports as a worker does.
"""
