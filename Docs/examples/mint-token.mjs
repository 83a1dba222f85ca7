// Mints a Switchboard login token (a JWT) with nothing but Node's built-in crypto (Node 16+; Docs/tokens.md).
//
//   node mint-token.mjs --user ann --secret-file /etc/switchboard/token-secret            (HS256)
//   node mint-token.mjs --user ann --private-key es256.pem --kid backend-2026 \
//       --grants '[{"on":"message:room:*","allow":["read","write"]}]'                    (RS256, ES256 or EdDSA)
import { createHmac, createPrivateKey, randomUUID, sign } from "node:crypto";
import { readFileSync } from "node:fs";
import { parseArgs } from "node:util";
import { pathToFileURL } from "node:url";

const base64url = (bytes) => Buffer.from(bytes).toString("base64url");

/** A token for `user`, valid for `ttl` seconds: HS256 with `secret`, or signed with the PEM `privateKey`. */
export function mintToken({ user, ttl = 3600, secret, privateKey, kid, grants, admin = false }) {
  const now = Math.floor(Date.now() / 1000);
  const claims = { sub: user, iat: now, exp: now + ttl, jti: randomUUID() };
  if (admin) claims.role = "admin";
  if (grants !== undefined) claims.grants = grants; // without it the gateway gives its default grants
  let alg;
  let key;
  if (privateKey) {
    key = createPrivateKey(privateKey);
    alg = { rsa: "RS256", ec: "ES256", ed25519: "EdDSA" }[key.asymmetricKeyType];
    if (!alg) throw new Error(`unsupported key type ${key.asymmetricKeyType}`);
  } else {
    alg = "HS256";
  }
  const header = kid ? { alg, typ: "JWT", kid } : { alg, typ: "JWT" }; // no kid: the gateway's token secret
  const input = `${base64url(JSON.stringify(header))}.${base64url(JSON.stringify(claims))}`;
  let signature;
  if (alg === "HS256") signature = createHmac("sha256", secret).update(input).digest();
  else if (alg === "EdDSA") signature = sign(null, Buffer.from(input), key);
  // JWS wants ECDSA signatures as r||s (IEEE P1363), not DER.
  else signature = sign("sha256", Buffer.from(input), { key, dsaEncoding: "ieee-p1363" });
  return `${input}.${base64url(signature)}`;
}

// Run as a program (not imported): mint from the command line.
if (import.meta.url === pathToFileURL(process.argv[1]).href) {
  const { values } = parseArgs({
    options: {
      user: { type: "string" },
      ttl: { type: "string", default: "3600" },
      "secret-file": { type: "string" },
      "private-key": { type: "string" },
      kid: { type: "string" },
      grants: { type: "string" },
      admin: { type: "boolean", default: false },
    },
  });
  if (!values.user || !(values["secret-file"] || values["private-key"])) {
    console.error("usage: node mint-token.mjs --user USER (--secret-file PATH | --private-key PEM) [--ttl S] [--kid KID] [--grants JSON] [--admin]");
    process.exit(2);
  }
  console.log(
    mintToken({
      user: values.user,
      ttl: Number(values.ttl),
      secret: values["secret-file"] ? readFileSync(values["secret-file"], "utf8").trim() : undefined,
      privateKey: values["private-key"] ? readFileSync(values["private-key"], "utf8") : undefined,
      kid: values.kid,
      grants: values.grants ? JSON.parse(values.grants) : undefined,
      admin: values.admin,
    }),
  );
}
