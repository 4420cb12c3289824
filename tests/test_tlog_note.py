"""laneledger.tlog.note: signing and opening C2SP signed notes, the key
texts, and a typed error for each way a note or a key can be wrong."""

from __future__ import annotations

import base64

import pytest

from laneledger.contract.errors import InvalidRequest, MalformedMessage, NoteSignatureInvalid, NoteUnverified
from laneledger.tlog.note import Ed25519Verifier, Signature, Signer, key_id, open_note, sign_note

LOG = Signer.generate("log.example/ledger")
OTHER = Signer.generate("witness.example/w1")
TEXT = "log.example/ledger\n3\n" + base64.b64encode(bytes(32)).decode() + "\n"


def test_a_generated_key_round_trips_through_its_texts():
    again = Signer.from_text(LOG.to_text())
    assert again.to_text() == LOG.to_text()
    assert Ed25519Verifier.from_text(LOG.verifier().to_text()) == LOG.verifier()
    vkey = LOG.verifier().to_text()
    name, hex_id, _ = vkey.split("+", 2)
    assert name == LOG.name and int(hex_id, 16) == LOG.key_id
    raw = base64.b64decode(vkey.split("+", 2)[2])
    assert raw[0] == 0x01 and key_id(LOG.name, 0x01, raw[1:]) == LOG.key_id


def test_a_note_signed_by_two_keys_opens_with_either():
    signed = sign_note(TEXT, [LOG, OTHER])
    assert signed.startswith(TEXT + "\n— log.example/ledger ")
    by_log = open_note(signed, [LOG.verifier()])
    assert by_log.text == TEXT
    assert [s.name for s in by_log.verified] == [LOG.name]
    assert [s.name for s in by_log.unverified] == [OTHER.name]
    assert by_log.signed() == signed
    both = open_note(signed.encode(), [LOG.verifier(), OTHER.verifier()])
    assert {s.name for s in both.verified} == {LOG.name, OTHER.name} and not both.unverified


def test_signing_again_replaces_the_keys_own_signature_and_keeps_others():
    first = open_note(sign_note(TEXT, [LOG, OTHER]), [LOG.verifier(), OTHER.verifier()])
    again = sign_note(TEXT, [LOG], keep=[*first.verified])
    opened = open_note(again, [LOG.verifier(), OTHER.verifier()])
    assert [s.name for s in opened.verified] == [OTHER.name, LOG.name]


def test_no_trusted_signature_is_note_unverified_naming_the_signers():
    with pytest.raises(NoteUnverified) as caught:
        open_note(sign_note(TEXT, [OTHER]), [LOG.verifier()])
    assert caught.value.code == "integrity_failure"
    assert caught.value.details["signers"] == [f"{OTHER.name}+{OTHER.key_id:08x}"]


def test_a_changed_text_fails_the_trusted_signature():
    signed = sign_note(TEXT, [LOG])
    with pytest.raises(NoteSignatureInvalid) as caught:
        open_note(signed.replace("\n3\n", "\n4\n"), [LOG.verifier()])
    assert caught.value.details == {
        "reason": "note_signature_invalid",
        "key": f"{LOG.name}+{LOG.key_id:08x}",
    }


def test_a_same_name_other_key_signature_is_not_trusted_by_name_alone():
    impostor = Signer.generate(LOG.name)
    with pytest.raises(NoteUnverified):
        open_note(sign_note(TEXT, [impostor]), [LOG.verifier()])


def test_a_forged_signature_under_the_trusted_key_id_is_refused():
    forged = Signature(LOG.name, LOG.key_id, impostor_sig := OTHER.sign(TEXT.encode()))
    assert len(impostor_sig) == 64
    with pytest.raises(NoteSignatureInvalid):
        open_note(TEXT + "\n" + forged.line(), [LOG.verifier()])


GOOD = sign_note(TEXT, [LOG])


@pytest.mark.parametrize(
    ("message", "reason"),
    [
        (GOOD.encode()[:-3] + b"\xff\n", "not_utf8"),
        (GOOD.replace("3\n", "3\t\n", 1), "control_character"),
        (TEXT, "no_signatures"),
        (TEXT + "\n", "no_signatures"),
        (GOOD[:-1], "no_signatures"),
        (GOOD.replace("— ", "- "), "signature_line"),
        (GOOD.replace(" ", "  ", 1), "signature_line"),
        (TEXT + "\n— log.example/ledger AAAA\n", "signature_line"),
        (TEXT + "\n— log.example/ledger not*base64\n", "signature_line"),
        (TEXT + "\n— log+ledger " + GOOD.rsplit(" ", 1)[1], "signature_line"),
        (TEXT + "\n" + "".join([GOOD.split("\n\n")[1]] * 101), "too_many_signatures"),
    ],
)
def test_text_that_is_not_a_signed_note_is_malformed_with_a_reason(message, reason):
    with pytest.raises(MalformedMessage) as caught:
        open_note(message, [LOG.verifier()])
    assert caught.value.details["reason"] == reason


@pytest.mark.parametrize(
    "text",
    [
        "",
        "name+1234abcd",
        "name+12345+" + base64.b64encode(b"\x01" + bytes(32)).decode(),
        "na me+1234abcd+" + base64.b64encode(b"\x01" + bytes(32)).decode(),
        "name+1234abcd+!!!!",
        "name+1234abcd+" + base64.b64encode(b"\x01" + bytes(32)).decode(),  # wrong key id
    ],
)
def test_a_bad_verifier_key_is_an_invalid_request(text):
    with pytest.raises(InvalidRequest) as caught:
        Ed25519Verifier.from_text(text)
    assert caught.value.details["path"] == "key"


def test_a_bad_signer_key_never_echoes_the_private_key():
    text = LOG.to_text()
    broken = text[:-4] + ("AAAA" if not text.endswith("AAAA") else "BBBB")
    with pytest.raises(InvalidRequest) as caught:
        Signer.from_text(broken)
    # PRIVATE+KEY+<name>+<key ID>+<key>: the key's base64 may itself hold a '+'.
    assert text.split("+", 4)[4][:20] not in str(caught.value)
    with pytest.raises(InvalidRequest):
        Signer.from_text(LOG.verifier().to_text())  # a public key is not a signer key


def test_two_verifiers_with_one_name_and_id_are_refused():
    with pytest.raises(InvalidRequest) as caught:
        open_note(GOOD, [LOG.verifier(), LOG.verifier()])
    assert caught.value.details["path"] == "verifiers"


def test_sign_refuses_text_without_its_final_newline():
    with pytest.raises(InvalidRequest):
        sign_note(TEXT[:-1], [LOG])
