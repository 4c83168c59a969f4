// Verify a Sigstore bundle offline with sigstore-js, as a user without forge would:
//   node verify.js BUNDLE PUBLIC_KEY.pem
// The bundle's public-key hint must name the key given (its key id); no transparency log,
// certificate or timestamp is asked for. Exit 0 and "verified" when the signature checks
// out; exit 1 and the verifier's error otherwise. The archive's subject digest is not
// checked here (sigstore-js checks signatures only): compare `sha256sum` separately.
"use strict";
const fs = require("fs");
const crypto = require("crypto");
const { bundleFromJSON } = require("@sigstore/bundle");
const { Verifier, toSignedEntity, toTrustMaterial } = require("@sigstore/verify");

const [bundlePath, keyPath] = process.argv.slice(2);
if (!bundlePath || !keyPath) {
  console.error("usage: node verify.js BUNDLE PUBLIC_KEY.pem");
  process.exit(2);
}
try {
  const json = JSON.parse(fs.readFileSync(bundlePath, "utf8"));
  const bundle = bundleFromJSON(json);
  const key = crypto.createPublicKey(fs.readFileSync(keyPath));
  const keyFinder = () => ({ publicKey: key, validFor: () => true });
  const trust = toTrustMaterial(
    { mediaType: "application/vnd.dev.sigstore.trustedroot+json;version=0.1", tlogs: [], certificateAuthorities: [],
      ctlogs: [], timestampAuthorities: [] },
    keyFinder,
  );
  const verifier = new Verifier(trust, { tlogThreshold: 0, ctlogThreshold: 0, timestampThreshold: 0 });
  verifier.verify(toSignedEntity(bundle));
  const statement = JSON.parse(Buffer.from(json.dsseEnvelope.payload, "base64").toString("utf8"));
  console.log("verified " + JSON.stringify(statement.subject));
} catch (err) {
  console.error("not verified: " + (err && err.message ? err.message : err));
  process.exit(1);
}
