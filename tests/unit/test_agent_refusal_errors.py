"""The errors an agent's refused Stop or Restart becomes (chalicelib/core/errors.py): the
hosted service's codes and the reason the agent gave, word for word in ``msg``. Through the
API: tests/functional/test_online_views.py."""

import pytest

from chalicelib.core import errors


@pytest.mark.parametrize(
    "error, code, msg",
    [
        (
            errors.AgentStopRefused,
            "ERR_NGROK_805",
            "This ngrok agent does not support remote stopping: no handler.",
        ),
        (
            errors.AgentRestartRefused,
            "ERR_NGROK_804",
            "This ngrok agent does not support remote restarting: no handler.",
        ),
    ],
)
def test_a_refused_stop_or_restart_says_why_with_the_hosted_code(error, code, msg):
    refused = error("no handler")
    assert str(refused) == msg
    body = refused.body("op_1")
    assert (body["error_code"], body["status_code"], body["msg"]) == (code, 400, msg)
