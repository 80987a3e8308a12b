"""The KServe predictor of a model directory, and the server it runs in.

``python -m serving`` (``__main__.py``) loads the model (``loader.py``), serves it with
KServe's server (``server.py``, ``shortcut.py``, ``batching.py``, ``drain.py``), decodes
and encodes requests (``codec.py``) and runs the network in its serving form
(``network.py``). It runs in the serving image; it imports no KFP.
"""
