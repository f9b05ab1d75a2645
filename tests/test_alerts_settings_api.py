"""``PUT gpu-widgets/api/v1/alerts/settings``: the Settings Editor's thresholds reach the server's
one evaluation, through real HTTP with auth on; bad bodies get a 400 that names what is wrong."""
from __future__ import annotations

import json

import pytest
from tornado.httpclient import HTTPClientError

from .api_schema import validate_response

PREFIX = ("gpu-widgets", "api", "v1")


async def put(jp_fetch, body, **kw):
    data = body if isinstance(body, str) else json.dumps(body)
    response = await jp_fetch(*PREFIX, "alerts", "settings", method="PUT", body=data, **kw)
    return json.loads(response.body)


async def refused(jp_fetch, body, **kw) -> tuple[int, dict]:
    with pytest.raises(HTTPClientError) as info:
        await put(jp_fetch, body, **kw)
    answer = json.loads(info.value.response.body)
    validate_response("error", answer)
    return info.value.code, answer


async def test_new_thresholds_apply_at_once_and_change_the_etag(jp_fetch, jp_serverapp):
    # Given the alerts endpoint with its tag
    first = await jp_fetch(*PREFIX, "alerts")
    tag = first.headers["Etag"]
    # When two settings change (the rest keep theirs)
    answer = await put(jp_fetch, {"memory_percent": 80, "gpus": " Mine "})
    # Then the answer, the engine and the alerts endpoint (with a new tag) agree
    assert answer == {"temperature_margin_c": 5.0, "throttle_s": 30.0, "memory_percent": 80.0,
                      "idle_kernel_memory_gib": 1.0, "idle_minutes": 10.0, "gpus": "mine"}
    engine = jp_serverapp.web_app.settings["gpu_widgets_alerts"]
    assert engine.limits.memory_percent == 80.0 and engine.limits.gpus == "mine"
    again = await jp_fetch(*PREFIX, "alerts", headers={"If-None-Match": tag}, raise_error=False)
    assert again.code == 200 and again.headers["Etag"] != tag, "a tab holding the old tag gets the new settings"
    assert json.loads(again.body)["settings"] == answer


@pytest.mark.parametrize("body,words", [
    ({"memory_percent": 120}, "memory_percent must be more than 0 and at most 100, got 120"),
    ({"idle_minutes": 0}, "idle_minutes must be more than 0 minutes, got 0"),
    ({"throttle_s": "30"}, "throttle_s must be a number (within 0-86400 s), got '30'"),
    ({"temperature_margin_c": True}, "temperature_margin_c must be a number"),
    ({"gpus": "theirs"}, "gpus must be 'all' or 'mine', got 'theirs'"),
    ({"memory": 90}, "unknown alert setting(s) memory (valid: temperature_margin_c, throttle_s,"),
    ({}, "the body must be a JSON object with at least one of"),
    ([1], "the body must be a JSON object of alert settings, got an array"),
    ("{not json", "the body must be a JSON object of alert settings"),
    # Round three: each of these was a 500, a 10 MB message, or a NaN taken for a number.
    ('{"idle_minutes": 1' + "0" * 400 + "}", "idle_minutes must be more than 0 minutes, got an integer of 401 digits"),
    ('{"memory_percent": 1' + "0" * 400 + "}", "memory_percent must be more than 0 and at most 100, got an integer of 401"),
    ('{"throttle_s": ' + "[" * 2000 + "]" * 2000 + "}", "throttle_s is nested too deeply"),
    ("[" * 2000 + "]" * 2000, "the body must be a JSON object of alert settings, got an array"),
    ({"gpus": [[[["mine"]]]]}, "gpus must be 'all' or 'mine', got [[[['mine']]]]"),
    ({"memory_percent": {"value": [90] * 500}}, "memory_percent must be a number (more than 0 and at most 100), got {'value': [90, 90,"),
    ('{"gpus": "' + "x" * 10_000_000 + '"}', "the body is 10,000,012 bytes; alert settings take at most 4,096"),
    ('{"memory_percent": NaN}', "memory_percent is NaN, which is not JSON"),
    ('{"memory_percent": 90, "throttle_s": Infinity}', "throttle_s is Infinity, which is not JSON"),
    ('{"idle_minutes": -Infinity}', "idle_minutes is -Infinity, which is not JSON"),
    ('{"memory_percent": 1e999}', "memory_percent: the number '1e999' is beyond what a float holds"),
    ({"memory_percent": False}, "memory_percent must be a number (more than 0 and at most 100), got False"),
    ({"idle_kernel_memory_gib": True}, "idle_kernel_memory_gib must be a number"),
    ({"memory_percent": 90, **{f"k{i}": 1 for i in range(8)}}, "unknown alert setting(s) k0, k1, k2, k3, k4 and 3 more"),
    ({"%s%d" * 40: 1}, "unknown alert setting(s) %s%d%s%d"),
    ('"memory_percent"', "the body must be a JSON object of alert settings, got a string"),
    ('{"memory_percent": 90} {"gpus": "all"}', "the body must be one JSON object of alert settings: something follows"),
])
async def test_bad_settings_are_refused_with_words_and_change_nothing(jp_fetch, jp_serverapp, body, words):
    code, answer = await refused(jp_fetch, body)
    assert code == 400 and answer["code"] == "bad_parameter" and words in answer["message"], answer
    assert len(answer["message"]) < 500, "a message stays short whatever was sent"
    assert jp_serverapp.web_app.settings["gpu_widgets_alerts"].limits.memory_percent == 95.0


async def test_a_body_just_under_the_bound_is_read(jp_fetch, jp_serverapp):
    # Given settings padded with JSON whitespace to just under the bound (4096 bytes)
    body = '{"memory_percent": 85' + " " * (4096 - 26) + "}"
    assert len(body) < 4096
    # Then they are read as any other
    assert (await put(jp_fetch, body))["memory_percent"] == 85.0


async def test_settings_need_the_token(jp_fetch):
    code, answer = await refused(jp_fetch, {"memory_percent": 90}, headers={"Authorization": ""})
    assert code == 403 and answer["code"] == "forbidden"


@pytest.mark.parametrize("gw_config", [{"backend": "simulated", "interval_s": 0.1, "alerts_enabled": False}])
async def test_settings_of_alerts_that_are_off_are_refused(gw_config, jp_fetch):
    code, answer = await refused(jp_fetch, {"memory_percent": 90})
    assert code == 409 and answer["code"] == "alerts_off" and "alerts_enabled" in answer["message"]
