"""The trainer: ``python -m trainer`` alone, under torchrun, or in a PyTorchJob or TrainJob pod.

Data packing and loading (``data.py``, ``batches.py``), the network (``model.py``), the
model directory it writes (``model_dir.py``), the DDP training loop (``train.py``,
``step.py``, ``distributed.py``) and the Katib metric line (``metrics.py``). It imports
torch and the standard library only: the trainer image has nothing else.
"""
