"""Own TorchServe handlers that use the worker's ``Context`` as TorchServe's documentation shows it (a status of their
own, intermediate responses, a customized describe, a stateful sequence), and the plain computation of their answers.
Shared by the Ray adapter's unit tests and the Ray tier."""

from __future__ import annotations

import textwrap
from itertools import accumulate

RAISES_513 = textwrap.dedent(
    """
    from ts.utils.util import PredictionException

    def handle(data, context):
        if data is None:
            return None
        raise PredictionException("the input is too long for this model", 513)
    """
)
PREDICTION_ERROR = {"code": 513, "type": "InternalServerException", "message": "the input is too long for this model"}

STREAMS_WORDS = textwrap.dedent(
    """
    from ts.handler_utils.utils import send_intermediate_predict_response

    def handle(data, context):
        if data is None:
            return None
        for word in data[0]["body"]["text"].split():
            send_intermediate_predict_response(
                [word + " "], context.request_ids, "Intermediate Prediction success", 200, context
            )
        return ["<end>"]
    """
)


def words(text: str) -> list[bytes]:
    """The chunks STREAMS_WORDS streams for ``text``, as a client reads them."""
    return [f"{w} ".encode() for w in text.split()] + [b"<end>"]


DESCRIBES = textwrap.dedent(
    """
    from ts.torch_handler.base_handler import BaseHandler

    class Described(BaseHandler):
        def initialize(self, context):
            self.context = context
            self.initialized = True

        def preprocess(self, data):
            return [row.get("body") for row in data]

        def inference(self, data, *args, **kwargs):
            return [len(str(x)) for x in data]

        def postprocess(self, data):
            return data

        def describe_handle(self):
            return {"labels": ["cat", "dog"], "input": "any JSON", "version": 3}
    """
)
DESCRIBED = {"labels": ["cat", "dog"], "input": "any JSON", "version": 3}

STATEFUL = textwrap.dedent(
    """
    import logging

    logger = logging.getLogger(__name__)

    class RunningTotal:
        def initialize(self, context):
            self.totals = {}

        def handle(self, data, context):
            out = []
            for idx, row in enumerate(data):
                sequence = context.get_sequence_id(idx)
                self.totals[sequence] = self.totals.get(sequence, 0) + int(row["body"]["x"])
                out.append(self.totals[sequence])
            return out
    """
)
STATEFUL_CONFIG = {"sequenceBatching": True, "maxSequenceJobQueueSize": 10}


def running_totals(values: list[int]) -> list[int]:
    """What STATEFUL answers to one sequence's values, computed plainly."""
    return list(accumulate(values))
