#!/usr/bin/env python3
"""Mints a Switchboard login token (a JWT) with PyJWT, as an app's backend would (Docs/tokens.md).

    pip install PyJWT                  # HS256/384/512
    pip install PyJWT cryptography     # RS256, ES256, EdDSA as well

    python3 mint_token.py --user ann --secret-file /etc/switchboard/token-secret
    python3 mint_token.py --user ann --private-key es256.pem --algorithm ES256 --kid backend-2026 \
        --grants '[{"on":"message:room:*","allow":["read","write","presence"]}]'
"""
import argparse
import json
import time
import uuid

import jwt  # PyJWT


def mint(key, user, ttl=3600, algorithm="HS256", kid=None, grants=None, admin=False):
    """A token for `user`, valid for `ttl` seconds, signed with `key` (an HMAC secret, or a PEM private key)."""
    now = int(time.time())
    claims = {"sub": user, "iat": now, "exp": now + ttl, "jti": str(uuid.uuid4())}
    if admin:
        claims["role"] = "admin"
    if grants is not None:
        claims["grants"] = grants  # without it the gateway gives its default grants
    headers = {"kid": kid} if kid else None  # without kid the gateway's token secret verifies it
    return jwt.encode(claims, key, algorithm=algorithm, headers=headers)


def main():
    parser = argparse.ArgumentParser(description="Mint a Switchboard login token.")
    parser.add_argument("--user", required=True)
    parser.add_argument("--ttl", type=int, default=3600, help="seconds")
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--secret-file", help="a file holding the HMAC secret (the gateway's --token-secret-file)")
    source.add_argument("--private-key", help="a PEM private key (RSA, EC P-256, Ed25519)")
    parser.add_argument("--algorithm", default=None, help="HS256 (default with a secret), HS384, HS512, RS256, ES256, EdDSA")
    parser.add_argument("--kid")
    parser.add_argument("--grants", help='JSON, e.g. [{"on":"message:room:*","allow":["read"]}]')
    parser.add_argument("--admin", action="store_true")
    args = parser.parse_args()
    if args.secret_file:
        key = open(args.secret_file, "rb").read().strip()
        algorithm = args.algorithm or "HS256"
    else:
        key = open(args.private_key, "rb").read()
        algorithm = args.algorithm or "RS256"
    grants = json.loads(args.grants) if args.grants else None
    print(mint(key, args.user, args.ttl, algorithm, args.kid, grants, args.admin))


if __name__ == "__main__":
    main()
