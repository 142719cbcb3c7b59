"""The pure front door: signature, size, headers, JSON."""

import json

import pytest

from bot.webhook import Event, WebhookError, parse, sign, verify_signature

SECRETS = [b"new-secret-xyz", b"old-secret-abc"]
PAYLOAD = {"action": "labeled", "issue": {"number": 3},
           "repository": {"full_name": "acme/target"}, "sender": {"login": "alice"}}
BODY = json.dumps(PAYLOAD).encode()


def headers(body=BODY, secret="new-secret-xyz", **extra):
    h = {"X-GitHub-Event": "issues", "X-GitHub-Delivery": "d-1",
         "X-Hub-Signature-256": sign(body, secret)}
    h.update(extra)
    return h


def test_valid_delivery_becomes_an_event():
    ev = parse(headers(), BODY, secrets=SECRETS)
    assert ev == Event("issues", "labeled", "d-1", PAYLOAD)
    assert ev.key == "issues.labeled"


def test_any_configured_secret_is_accepted_for_rotation():
    assert parse(headers(secret="old-secret-abc"), BODY, secrets=SECRETS).action == "labeled"


def test_header_names_are_case_insensitive():
    h = {k.lower(): v for k, v in headers().items()}
    assert parse(h, BODY, secrets=SECRETS).delivery_id == "d-1"


@pytest.mark.parametrize("mutate", [
    lambda h: h.pop("X-Hub-Signature-256"),
    lambda h: h.update({"X-Hub-Signature-256": sign(BODY, "wrong-secret")}),
    lambda h: h.update({"X-Hub-Signature-256": "sha256=zz"}),
    lambda h: h.update({"X-Hub-Signature-256": sign(BODY, "new-secret-xyz")[7:]}),
])
def test_bad_or_missing_signature_is_401(mutate):
    h = headers()
    mutate(h)
    with pytest.raises(WebhookError) as e:
        parse(h, BODY, secrets=SECRETS)
    assert e.value.status == 401


def test_sha1_only_is_401():
    h = headers()
    del h["X-Hub-Signature-256"]
    h["X-Hub-Signature"] = "sha1=0123"
    with pytest.raises(WebhookError) as e:
        parse(h, BODY, secrets=SECRETS)
    assert e.value.status == 401 and "sha1" in e.value.message


def test_signature_checked_before_parsing():
    body = b"{not json"
    with pytest.raises(WebhookError) as e:
        parse(headers(body, secret="nope"), body, secrets=SECRETS)
    assert e.value.status == 401
    with pytest.raises(WebhookError) as e:
        parse(headers(body), body, secrets=SECRETS)
    assert e.value.status == 400


def test_tampered_body_is_401():
    with pytest.raises(WebhookError) as e:
        parse(headers(), BODY + b" ", secrets=SECRETS)
    assert e.value.status == 401


def test_size_cap_is_413():
    with pytest.raises(WebhookError) as e:
        parse(headers(), BODY, secrets=SECRETS, max_bytes=10)
    assert e.value.status == 413


@pytest.mark.parametrize("body", [b"[1, 2]", b"\xff\xfe", b"", b"null"])
def test_non_object_json_is_400(body):
    with pytest.raises(WebhookError) as e:
        parse(headers(body), body, secrets=SECRETS)
    assert e.value.status == 400


def test_missing_event_header_is_400():
    h = headers()
    del h["X-GitHub-Event"]
    with pytest.raises(WebhookError) as e:
        parse(h, BODY, secrets=SECRETS)
    assert e.value.status == 400


def test_form_encoded_payload():
    import urllib.parse

    body = urllib.parse.urlencode({"payload": BODY.decode()}).encode()
    h = headers(body, **{"Content-Type": "application/x-www-form-urlencoded"})
    assert parse(h, body, secrets=SECRETS).action == "labeled"


def test_verify_signature_rejects_empty():
    assert not verify_signature(BODY, None, SECRETS)
    assert not verify_signature(BODY, "", SECRETS)
    assert verify_signature(BODY, sign(BODY, SECRETS[1]), SECRETS)


# ------------------------------------------------ issue 9: shapes, nesting, digests, allow-lists


def test_payload_that_does_not_fit_its_event_is_400():
    with pytest.raises(WebhookError) as e:
        parse(headers(**{"X-GitHub-Event": "issue_comment"}), BODY, secrets=SECRETS)
    assert e.value.status == 400 and "'comment' is missing" in e.value.message
    odd = json.dumps({**PAYLOAD, "action": "exploded"}).encode()
    with pytest.raises(WebhookError) as e:
        parse(headers(odd, **{"X-GitHub-Event": "workflow_run"}), odd, secrets=SECRETS)
    assert e.value.status == 400
    # events the bot does not act on are not checked
    assert parse(headers(**{"X-GitHub-Event": "star"}), BODY, secrets=SECRETS).name == "star"


@pytest.mark.parametrize("depth", [65, 500, 50_000])
def test_deeply_nested_json_is_400(depth):
    body = b'{"a":' * depth + b"1" + b"}" * depth
    with pytest.raises(WebhookError) as e:
        parse(headers(body), body, secrets=SECRETS)
    assert e.value.status == 400 and "nested" in e.value.message


def test_digest_is_of_the_signed_body():
    import hashlib

    ev = parse(headers(), BODY, secrets=SECRETS)
    assert ev.digest == hashlib.sha256(BODY).hexdigest()


def test_admitted_by_repo_and_installation():
    from bot.webhook import admitted

    ev = Event("issues", "labeled", "d", {**PAYLOAD, "installation": {"id": 7}})
    assert admitted(ev) is None
    assert admitted(ev, repos=["acme/*"]) is None
    assert admitted(ev, repos=["ACME/Target"]) is None
    assert "not in RSI_ALLOWED_REPOS" in admitted(ev, repos=["other/*", "acme/targets"])
    assert admitted(ev, installations=[7]) is None
    assert "installation 7 is not in" in admitted(ev, installations=[8])
