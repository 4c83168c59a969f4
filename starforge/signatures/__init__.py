"""Signatures: signing keys, DSSE envelopes and the trust file (``signing``), the Sigstore bundle
of an envelope (``sigstore_bundle``), OpenSSF model-signing signatures (``model_signature``).

Verification of an envelope is the cluster side's (``starforge.cluster.dsse``).
"""
