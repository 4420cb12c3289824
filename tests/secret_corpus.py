"""A corpus of secret-shaped values for the redaction tests: one per value
shape the redactor knows, and values that are secret only by their key.

Every value is distinctive (made up, never a real credential), so finding its
bytes anywhere — a file, a response — means it leaked.
"""

from __future__ import annotations

PEM = (
    "-----BEGIN RSA PRIVATE KEY-----\n"
    "MIIEowIBAAKCAQEAu1SU1LfVLPHCozMxH2Mo4lgOEePzNm0tRgeLezV6ffAt0gun\n"
    "VTLw7onLRnrq0/IzW7yWR7QkrmBL7jTKEn5u+qKhbwKfBstIs+bMY2Zkp18gnTxK\n"
    "-----END RSA PRIVATE KEY-----"
)

# (rule, secret): one per default pattern.
SHAPED_SECRETS: list[tuple[str, str]] = [
    ("pem_private_key", PEM),
    ("anthropic_api_key", "sk-ant-api03-Qm9vYmFyQmF6UXV4Q29ycG9yYXRlU2VjcmV0S2V5MDAx"),
    ("openai_api_key", "sk-proj-T3BlbkFJc2VjcmV0a2V5Zm9ydGVzdGluZ29ubHk5OQ"),
    ("stripe_key", "sk_live_51HfakeStripeKeyForTests0042"),
    ("github_token", "ghp_R2l0SHViVG9rZW5Gb3JUZXN0aW5nT25seTAwMQ"),
    ("aws_access_key_id", "AKIAQ3EXAMPLEKEY7XYZ"),
    ("google_api_key", "AIzaSyD-fakeGoogleKeyForTests_0123456789"),
    ("slack_token", "xoxb-123456789012-abcdefFAKEslack"),
    ("jwt", "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJsYW5lbGVkZ2VyLXRlc3QifQ.c2lnbmF0dXJlLWZvci10ZXN0cw"),
    ("bearer_token", "Bearer opaqueBearerValue_5e1f9a77c3d2"),
    ("secret_assignment", "DB_PASSWORD=n0tAShapeJustAssigned9"),
    ("url_credentials", "https://deploybot:pa55w0rdInUrl@git.example.com/repo.git"),
]
# What of a shaped text is the secret (the whole text unless named here).
NEEDLES = {"url_credentials": "deploybot:pa55w0rdInUrl", "secret_assignment": "n0tAShapeJustAssigned9"}


def needle(rule: str, text: str) -> str:
    return NEEDLES.get(rule, text)


# (key, secret): values with no telltale shape, secret because of their key.
KEYED_SECRETS: list[tuple[str, str]] = [
    ("api_key", "plainApiKeyValue-73a1"),
    ("apiKey", "camelApiKeyValue-19f0"),
    ("x-api-key", "headerApiKeyValue-5b2c"),
    ("password", "correct-horse-battery-staple-88"),
    ("client_secret", "clientSecretValue-0d4e"),
    ("access_token", "accessTokenValue-6c3a"),
    ("refresh_token", "refreshTokenValue-2f81"),
    ("Authorization", "Basic dXNlcjpwYXNzd29yZC10ZXN0LTk5"),
    ("aws_secret_access_key", "wJalrXUtnFEMI/K7MDENG/bPxRfiCYFAKEKEY42"),
    ("db_credentials", "credentialsValue-e7b9"),
    ("session_cookie", "cookieValue-4a6d"),
    ("private_key", "privateKeyValue-1c5f"),
]


def all_secret_texts() -> list[str]:
    """The exact strings that must never be found."""
    return [needle(r, s) for r, s in SHAPED_SECRETS] + [s for _, s in KEYED_SECRETS]


def secret_payload(tag: str) -> dict:
    """Every secret once: the shaped ones inside ordinary prose, the keyed
    ones under their keys, some nested in lists and objects."""
    return {
        "note": f"{tag}: " + " | ".join(f"{rule}={s}" for rule, s in SHAPED_SECRETS),
        "env": {k: v for k, v in KEYED_SECRETS[:6]},
        "calls": [{"headers": {k: v}} for k, v in KEYED_SECRETS[6:]],
        "url": SHAPED_SECRETS[-1][1],
        "input_tokens": 1234,
        "max_tokens": 4096,
    }
