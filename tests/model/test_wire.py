"""Between model_v1 messages and the handler's values: the decode of a predict request.

How a model answers and refuses through it, in every seat, is
``tests/transports/test_model_host.py``.
"""

from __future__ import annotations

import pytest

from tests.model.helpers import BOX_ROUTE, predict_request
from trio_rlmesh import ModelError
from trio_rlmesh.model import EpisodeRef
from trio_rlmesh.model._internal import observation_from_request


def test_a_repeated_set_of_episodes_is_decoded_once() -> None:
    # A run's lanes keep their episodes for many predicts: the refs of the last request
    # are reused while its ids and seeds are the same, and rebuilt when either changes.
    first = observation_from_request(predict_request("e", [1, 2], ids=["a", "b"]), BOX_ROUTE)
    again = observation_from_request(predict_request("e", [3, 4], ids=["a", "b"]), BOX_ROUTE)
    assert again.episodes is first.episodes
    reseeded = observation_from_request(
        predict_request("e", [1, 2], ids=["a", "b"], seeds=[None, 5]), BOX_ROUTE
    )
    assert reseeded.episodes == (EpisodeRef("a", None), EpisodeRef("b", 5))
    rolled = observation_from_request(predict_request("e", [1, 2], ids=["a", "c"]), BOX_ROUTE)
    assert rolled.episodes == (EpisodeRef("a", None), EpisodeRef("c", None))


def test_a_bad_request_after_a_good_one_is_still_refused() -> None:
    good = predict_request("e", [1, 2], ids=["a", "b"])
    observation_from_request(good, BOX_ROUTE)
    good.episode_info[1].episode_id = "a"  # the same rows, changed in place
    with pytest.raises(ModelError, match=r"repeats episode id 'a' \(lane 1\)"):
        observation_from_request(good, BOX_ROUTE)
