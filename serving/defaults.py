"""The predictor's defaults (its name, port, limits): shared with the builders.

A module without imports, so ``components`` (which builds the InferenceService) can use
it without loading KServe.
"""

MODEL_NAME = "fashion-mnist"  # the InferenceService's name, and the model's in its URLs
HTTP_PORT = 8080  # KServe's default predictor port
MAX_BATCH_SIZE = 256  # most images one request may carry
NUM_THREADS = 1  # torch intra-op threads per server process
DRAIN_PATH = "/drain"  # the preStop hook's route: a replica going away drains first
DRAIN_SECONDS = 10  # how long it keeps answering, each answer with Connection: close
