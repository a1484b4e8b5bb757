"""A predict request's bounds: its quantiles and rows, each answered at every quantile, are capped so that
one request cannot hold the service."""

import pytest

from hetflow.core.errors import InvalidArgument
from hetflow.v1 import predictor_pb2
from predictor_svc.convert import MAX_QUANTILES, MAX_ROWS, items_from_proto


def request(rows: int, quantiles: int) -> predictor_pb2.PredictRequest:
    return predictor_pb2.PredictRequest(rows=[predictor_pb2.FeatureRow(model="m")] * rows,
                                        quantiles=[(i + 1) / (quantiles + 1) for i in range(quantiles)])


def test_a_request_within_the_bounds_is_taken_row_by_row():
    assert len(items_from_proto(request(MAX_ROWS, MAX_QUANTILES))) == MAX_ROWS


@pytest.mark.parametrize("rows, quantiles", [(MAX_ROWS + 1, 1), (1, MAX_QUANTILES + 1)])
def test_a_request_past_the_bounds_is_invalid(rows, quantiles):
    with pytest.raises(InvalidArgument, match="at most"):
        items_from_proto(request(rows, quantiles))
