"""Package: a ``HandlerSpec`` becomes a model folder and an archive (``.mar``).

``render`` writes ``handler_model.py``; ``archive`` stages the folder with the shipped runtime (``msnb.templates``)
and packs it; ``taken`` records the files a build took; ``import_check`` checks an archive's imports statically;
``model_folder.open_all`` opens archives for an export; the layouts are their engines' (msnb.engines.ray.export,
msnb.engines.kserve). Never runs user code.
"""
