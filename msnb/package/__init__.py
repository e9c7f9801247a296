"""Package: a ``HandlerSpec`` becomes a model folder and an archive (``.mar``, KServe and Ray Serve layouts).

``render`` writes ``handler_model.py``; ``archive`` stages the folder with the shipped runtime (``msnb.templates``)
and packs it; ``taken`` records the files a build took; ``import_check`` checks an archive's imports statically;
``ray_layout`` writes the exported Ray Serve folder. Never runs user code.
"""
