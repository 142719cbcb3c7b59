"""The benchmark protocol: validation with clear messages."""

from __future__ import annotations

import json

import pytest
from pydantic import ValidationError

from verifier.protocol import BenchResult, ProtocolError, load_result, parse_result

GOOD = {
    "metrics": {"throughput": 41.2, "latency_p95_s": 0.31},
    "samples": {"latency_s": [0.21, 0.25, 0.30]},
    "outputs": {"transcripts": ["the cat sat", "..."]},
    "counts": {"requests": 64, "failed": 0},
}


def test_good_result(tmp_path):
    p = tmp_path / "r.json"
    p.write_text(json.dumps(GOOD))
    r = load_result(p, expected_metrics=["throughput"])
    assert r.metrics["throughput"] == 41.2
    assert r.samples["latency_s"] == (0.21, 0.25, 0.30)
    assert r.failed == 0 and r.counts["requests"] == 64
    assert isinstance(r, BenchResult)


@pytest.mark.parametrize(
    "text, needle",
    [
        ("{not json", "not valid JSON"),
        ('{"metrics": {"x": NaN}}', "NaN"),
        ('{"metrics": {"x": Infinity}}', "Infinity"),
        ("[1, 2]", "must be a JSON object, got an array"),
        ('{"metric": {"x": 1}}', "1 unknown top-level key(s) (not quoted"),
        ('{"metrics": [1]}', "'metrics' must be a JSON object"),
        ('{"metrics": {"x": "fast"}}', "metrics: entry #1 (a key not declared in .rsi/config.toml, not quoted) must be a number, got a string"),
        ('{"metrics": {"x": true}}', "must be a number, got a boolean"),
        ('{"metrics": {"x": null}}', "must be a number, got null"),
        ('{"samples": {"lat": 3}}', "samples: entry #1 (a key not declared in .rsi/config.toml, not quoted) must be a list of numbers"),
        ('{"samples": {"lat": []}}', "is empty"),
        ('{"samples": {"lat": [1, "a"]}}', "not quoted)[1] must be a number"),
        ('{"counts": {"failed": -1}}', "counts.failed must be a non-negative integer"),
        ('{"counts": {"failed": 1.5}}', "counts.failed must be a non-negative integer"),
        ('{"counts": {"requests": 2, "failed": 3}}', "exceeds counts.requests"),
    ],
)
def test_bad_results_say_why(text, needle):
    with pytest.raises(ProtocolError) as e:
        parse_result(text)
    assert needle in str(e.value)


def test_missing_declared_metric():
    with pytest.raises(ProtocolError) as e:
        parse_result(
            '{"metrics": {"throughput": 1}}', expected_metrics=["throughput", "latency_p95_s"]
        )
    assert (
        "missing metric(s) 'latency_p95_s' declared in .rsi/config.toml; the result reports "
        "1 metric(s), of the declared ones: throughput" in str(e.value)
    )


def test_a_declared_metric_is_named_by_its_key():
    with pytest.raises(ProtocolError, match=r"metrics\.speed must be a number, got a string"):
        parse_result('{"metrics": {"speed": "fast"}}', expected_metrics=["speed"])
    with pytest.raises(ProtocolError, match=r"counts\.failed must be a non-negative integer, got a string"):
        parse_result('{"counts": {"failed": "x"}}')


def test_missing_and_empty_files(tmp_path):
    with pytest.raises(ProtocolError, match="did not write JSON to \\$RSI_RESULT"):
        load_result(tmp_path / "nope.json")
    (tmp_path / "empty.json").write_text("")
    with pytest.raises(ProtocolError, match="empty"):
        load_result(tmp_path / "empty.json")


def test_results_are_immutable():
    r = parse_result(json.dumps(GOOD))
    with pytest.raises(ValidationError):
        r.metrics = {}  # type: ignore[misc]
