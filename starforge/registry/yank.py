"""Yank statements: a published version withdrawn from being chosen again (SPEC §18).

A yank (or an unyank, which withdraws it) is a statement about one published version,
stored in the registry beside it. Its payload is canonical JSON (sorted keys, no spaces,
ASCII)::

    {"action":"yank","name":"dr-grpo","owner":"alice","reason":"advantage sign flipped",
     "schema":"forge/yank/v1","sequence":1,"time":"2026-12-05T10:00:00Z",
     "tree_digest":"sf1:...","version":"0.3.1"}

wrapped in a DSSE envelope of payload type :data:`PAYLOAD_TYPE` — signed with the owner's
key exactly like a publish statement (``--sign``), or with no signature at all. The
sequence number counts the statements of one version; the newest statement that is
*enforced* wins. Whose word is enforced is the version's own rule: for an owner with
trusted keys, only a statement signed by one of them; for an owner without, any statement
(the version itself was taken on the registry's word).

:func:`yank_facts` is the one answer to "is this version yanked now, by which statement,
as of when": it reads the registry (or, when the registry cannot answer, the facts this
machine saw last), judges the statements by the trust file, and compares them with the
yank this machine remembers. A remembered yank that the registry no longer serves, or an
older unyank served in its place, is tampering (:class:`TamperedError`, exit 6).

Laptop side.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path

from ..cluster.dsse import check_signature, load_public_key, pae, same_version
from ..cluster.jsonload import loads as load_json
from ..errors import NotFoundError, RegistryError, SignatureError, TamperedError

SCHEMA = "forge/yank/v1"
PAYLOAD_TYPE = "application/vnd.starforge.yank.v1+json"
YANK = "yank"
UNYANK = "unyank"
MAX_REASON = 1000  # characters: a reason is a sentence, not a report
MAX_STATEMENT = 64 * 1024  # bytes of one stored envelope

ENFORCED_SIGNED = "verified"  # signed by a key trusted for the owner
ENFORCED_UNSIGNED = "unsigned"  # the owner has no trusted key: taken on the registry's word
ENFORCED_UNCHECKED = "not verified here"  # signed, but no key is trusted for the owner: taken on the registry's word
NOT_ENFORCED = "unverified"  # the owner has trusted keys and no trusted key signed it: shown, changes nothing


@dataclass(frozen=True)
class YankStatement:
    """One yank or unyank of ``owner/name@version`` with *tree_digest*, as stored (*envelope*)."""

    action: str
    owner: str
    name: str
    version: str
    tree_digest: str
    reason: str
    time: str
    sequence: int
    envelope: bytes
    key_ids: tuple = ()  # the key ids the envelope names (not verified by themselves)

    @property
    def ref(self) -> str:
        return f"{self.owner}/{self.name}@{self.version}"

    def to_json(self, standing: str) -> dict:
        return {"action": self.action, "reason": self.reason, "time": self.time, "sequence": self.sequence,
                "signed_by": list(self.key_ids), "standing": standing}


def canonical_payload(action: str, owner: str, name: str, version: str, tree_digest: str, reason: str,
                      time: str, sequence: int) -> bytes:
    """The statement's exact bytes (what a signature covers)."""
    return json.dumps({"schema": SCHEMA, "action": action, "owner": owner, "name": name, "version": version,
                       "tree_digest": tree_digest, "reason": reason, "time": time, "sequence": sequence},
                      sort_keys=True, separators=(",", ":"), ensure_ascii=True).encode("ascii")


def make_envelope(payload: bytes, key=None) -> bytes:
    """A DSSE envelope over *payload*, signed with the private *key* (None: unsigned, no signatures)."""
    signatures = []
    if key is not None:
        from ..signatures.signing import key_id, sign_bytes

        sig = sign_bytes(key, pae(PAYLOAD_TYPE, payload))
        signatures.append({"keyid": key_id(key.public_key()), "sig": base64.b64encode(sig).decode("ascii")})
    envelope = {"payloadType": PAYLOAD_TYPE, "payload": base64.b64encode(payload).decode("ascii"),
                "signatures": signatures}
    return (json.dumps(envelope, indent=2, sort_keys=True) + "\n").encode("utf-8")


def parse_statement(envelope: bytes, *, owner: str, name: str, version: str, tree_digest: str,
                    where: str) -> YankStatement:
    """The statement in *envelope*, which must be for exactly this version and tree digest.

    Raises :class:`TamperedError` for a statement that is malformed or answers for another
    plugin, version or content (*where* names the registry or file it came from).
    """
    ref = f"{owner}/{name}@{version}"

    def tampered(why: str) -> TamperedError:
        return TamperedError(f"{where}: a yank statement of {ref} {why}",
                             hint="whoever can write that registry changed it; tell its owner, and do not use it until "
                                  "it is restored")

    if len(envelope) > MAX_STATEMENT:
        raise tampered(f"is larger than {MAX_STATEMENT} bytes")
    try:
        doc = load_json(envelope)
        payload = base64.b64decode(doc["payload"], validate=True)
        st = load_json(payload)
        sigs = doc["signatures"]
        if doc["payloadType"] != PAYLOAD_TYPE or not isinstance(sigs, list) or not isinstance(st, dict):
            raise ValueError
        kids = tuple(s["keyid"] for s in sigs if isinstance(s, dict) and isinstance(s.get("keyid"), str) and s["keyid"])
        fields = (st["action"], st["owner"], st["name"], st["version"], st["tree_digest"], st["reason"], st["time"])
        seq = st["sequence"]
    except (ValueError, TypeError, KeyError, binascii.Error):
        raise tampered("is not a forge/yank/v1 statement in a DSSE envelope") from None
    if (st.get("schema") != SCHEMA or not all(isinstance(f, str) for f in fields) or fields[0] not in (YANK, UNYANK)
            or not isinstance(seq, int) or isinstance(seq, bool) or seq < 1):
        raise tampered("is not a forge/yank/v1 statement in a DSSE envelope")
    if (st["owner"], st["name"]) != (owner, name) or not same_version(st["version"], version):
        raise tampered(f"answers for {st['owner']}/{st['name']}@{st['version']}")
    if st["tree_digest"] != tree_digest:
        raise tampered(f"is for tree digest {st['tree_digest']}, not {tree_digest}")
    return YankStatement(action=st["action"], owner=owner, name=name, version=version, tree_digest=tree_digest,
                         reason=st["reason"], time=st["time"], sequence=seq, envelope=envelope, key_ids=kids)


def standing(statement: YankStatement, trust) -> str:
    """Whether *statement* is enforced here, and on whose word (the ``ENFORCED_*``/``NOT_ENFORCED`` values)."""
    trusted = trust.owners.get(statement.owner, {})
    if not trusted:
        return ENFORCED_UNCHECKED if statement.key_ids else ENFORCED_UNSIGNED
    from cryptography.exceptions import InvalidSignature

    doc = load_json(statement.envelope)
    payload = base64.b64decode(doc["payload"])
    message = pae(PAYLOAD_TYPE, payload)
    for entry in doc["signatures"]:
        kid, sig = (entry.get("keyid"), entry.get("sig")) if isinstance(entry, dict) else (None, None)
        if kid not in trusted or not isinstance(sig, str):
            continue
        try:
            check_signature(load_public_key(trusted[kid]), base64.b64decode(sig, validate=True), message)
        except (InvalidSignature, SignatureError, binascii.Error, ValueError):
            continue
        return ENFORCED_SIGNED
    return NOT_ENFORCED


def newest(statements) -> YankStatement | None:
    """The statement that wins: the highest sequence (a yank over an unyank of the same number)."""
    return max(statements, key=lambda s: (s.sequence, s.action == YANK), default=None)


@dataclass(frozen=True)
class YankFacts:
    """What is known of one version's yank: the statement that wins, the ones shown but not
    enforced, and as of when (*live*: read from the registry by this call)."""

    owner: str
    name: str
    version: str
    tree_digest: str
    current: YankStatement | None  # the newest enforced statement (a yank or an unyank), or None
    current_standing: str | None
    unenforced: tuple  # statements shown as unverified: they change nothing
    as_of: str | None  # when the registry last answered (None: it never did, on this machine)
    live: bool

    @property
    def ref(self) -> str:
        return f"{self.owner}/{self.name}@{self.version}"

    @property
    def yanked(self) -> bool:
        return self.current is not None and self.current.action == YANK

    @property
    def reason(self) -> str | None:
        return self.current.reason if self.yanked and self.current is not None else None

    def when(self) -> str:
        """``as of …`` for messages: the registry's answer now, or the last one seen."""
        if self.live:
            return f"as of {self.as_of}"
        if self.as_of is None:
            return "the registry could not answer for it, and this machine has never seen its yank statements"
        return f"as of {self.as_of}: the registry could not answer for it, these are the last facts seen here"

    def to_json(self) -> dict:
        return {
            "yanked": self.yanked,
            "reason": self.reason,
            "statement": self.current.to_json(self.current_standing or "") if self.current is not None else None,
            "unverified": [s.to_json(NOT_ENFORCED) for s in self.unenforced],
            "as_of": self.as_of,
            "live": self.live,
        }


def judge(statements, trust) -> tuple:
    """``(newest enforced, its standing, the statements not enforced)`` of *statements*."""
    enforced: list = []
    shown: list = []
    standings: dict = {}
    for st in statements:
        verdict = standing(st, trust)
        standings[st.envelope] = verdict
        (shown if verdict == NOT_ENFORCED else enforced).append(st)
    current = newest(enforced)
    return current, (standings[current.envelope] if current is not None else None), tuple(sorted(shown, key=lambda s: s.sequence))


def yank_facts(registry, owner: str, name: str, version: str, tree_digest: str, *, trust,
               memory: str | os.PathLike | None = None) -> YankFacts:
    """Is ``owner/name@version`` (with *tree_digest*) yanked now, by which statement, as of when.

    The registry's statements when it answers (and they are remembered), else the last ones
    this machine saw. Raises :class:`TamperedError` when a yank enforced here before is gone
    from the registry or an older unyank is served in its place, or a statement is not for
    this version. *trust* is the trust file the statements are judged by (a
    :class:`~starforge.registry.store.PluginStore` asks with its own: ``PluginStore.yank``),
    *memory* defaults to the user's (:attr:`starforge.state.home.Home.yank_memory`).
    """
    from ..cluster.utctime import utc_now
    from ..urls import mask_url

    path = memory_path(owner, name, version, tree_digest, memory)
    seen = _read_memory(path)
    where = f"registry {mask_url(registry.url)}" if registry is not None else "the registry"
    try:
        if registry is None:
            raise RegistryError("no registry")
        served = registry.yank_statements(owner, name, version, tree_digest)
    except TamperedError:
        raise
    except (RegistryError, NotFoundError):
        statements = [parse_statement(e, owner=owner, name=name, version=version, tree_digest=tree_digest,
                                      where=str(path)) for e in seen["statements"]]
        current, verdict, shown = judge(statements, trust)
        return YankFacts(owner, name, version, tree_digest, current, verdict, shown, seen["as_of"], live=False)
    statements = [parse_statement(e, owner=owner, name=name, version=version, tree_digest=tree_digest, where=where)
                  for e in served]
    current, verdict, shown = judge(statements, trust)
    remembered = [parse_statement(e, owner=owner, name=name, version=version, tree_digest=tree_digest,
                                  where=str(path)) for e in seen["statements"]]
    before, _, _ = judge(remembered, trust)
    # the yank remembered here is gone, and nothing newer than it is served: never a silent return
    gone = before is not None and before.action == YANK and before.envelope not in served
    if gone and before is not None and (current is None or current.sequence <= before.sequence):
        older = "the older" if current is not None and current.sequence < before.sequence else "the"
        now = "serves no yank of it" if current is None else f"serves {older} {current.action} #{current.sequence} instead"
        raise TamperedError(
            f"{where} is tampered: {owner}/{name}@{version} was yanked (#{before.sequence}, {before.time}: "
            f"{before.reason}), and the registry now {now}",
            hint="a yank is never taken back by removing it; the publisher withdraws one with 'forge plugin unyank "
                 "--sign'. Tell the registry's owner, and do not use this version",
        )
    now = utc_now()
    known = set(seen["statements"]) | set(served)
    # rewritten when a statement is new, and at most hourly otherwise (the "as of" of offline facts):
    # a version nobody yanked costs no write
    if known != set(seen["statements"]) or (known and _older_than_an_hour(seen["as_of"], now)):
        _write_memory(path, sorted(known), now)
    return YankFacts(owner, name, version, tree_digest, current, verdict, shown, now, live=True)


def memory_path(owner: str, name: str, version: str, tree_digest: str, memory: str | os.PathLike | None = None) -> Path:
    """Where this machine remembers the statements seen for the version."""
    from ..cluster.names import is_plugin_name
    from ..package_format.manifest import canonical_version

    for part in (owner, name):
        if not is_plugin_name(part):
            raise RegistryError(f"'{part}' is not a valid owner or plugin name")
    algo, _, hex_ = tree_digest.partition(":")
    if algo != "sf1" or not hex_ or any(c not in "0123456789abcdef" for c in hex_):
        raise RegistryError(f"'{tree_digest}' is not a tree digest (sf1:<hex>)")
    if memory is None:
        from ..state.home import home

        memory = home().yank_memory
    return Path(memory) / owner / name / f"{canonical_version(version)}-{hex_}.json"


def _read_memory(path: Path) -> dict:
    try:
        data = load_json(path.read_bytes())
        statements = [base64.b64decode(e, validate=True) for e in data["statements"]]
        as_of = data["as_of"]
        if not isinstance(as_of, str):
            raise TypeError
    except FileNotFoundError:
        return {"statements": [], "as_of": None}
    except (OSError, ValueError, TypeError, KeyError, binascii.Error) as exc:
        raise TamperedError(f"{path}: the yank statements this machine remembers cannot be read ({exc})",
                            hint="someone changed this machine's record of yanks; restore it from a backup, or remove "
                                 "it once you have checked every version it names with 'forge plugin show'") from None
    return {"statements": statements, "as_of": as_of}


def _write_memory(path: Path, statements: list, as_of: str) -> None:
    from ..cluster import atomic
    from ..state.directories import make_dirs

    data = {"schema": "forge/yank-memory/v1", "as_of": as_of,
            "statements": [base64.b64encode(e).decode("ascii") for e in statements]}
    try:
        make_dirs(path.parent)
        atomic.write_file(path, json.dumps(data, indent=2, sort_keys=True) + "\n")
    except OSError as exc:
        raise RegistryError(f"{path}: cannot remember the yank statements seen: {exc.strerror or exc}",
                            hint="this machine must keep the yanks it has seen; make that directory writable") from None


def _older_than_an_hour(as_of: str | None, now: str) -> bool:
    from datetime import datetime

    try:
        then = datetime.fromisoformat(str(as_of).replace("Z", "+00:00"))
        return (datetime.fromisoformat(now.replace("Z", "+00:00")) - then).total_seconds() > 3600
    except ValueError:
        return True


def envelope_name(envelope: bytes) -> str:
    """The name a stored statement goes by: ``<sha256 hex>.yank.json``."""
    return f"{hashlib.sha256(envelope).hexdigest()}.yank.json"


def add_statement(registry, info, action: str, reason: str, *, key=None) -> YankStatement:
    """Store a yank or unyank of the published *info* (a :class:`PublishedVersion`) in
    *registry*, numbered after every statement it already holds; signed with the private
    *key* when given. Return the statement stored."""
    from ..cluster.utctime import utc_now
    from ..errors import UsageError
    from ..terminal_text import unsafe_characters
    from ..urls import mask_url

    if not reason.strip() and action == YANK:
        raise UsageError("a yank needs a reason", hint="--reason 'what is wrong with this version'")
    if len(reason) > MAX_REASON:
        raise UsageError(f"the reason is {len(reason)} characters long; at most {MAX_REASON}",
                         hint="say what is wrong in a sentence, and link to the details")
    bad = unsafe_characters(reason)
    if bad:
        raise UsageError(f"the reason holds the character {bad[0]}, which forge refuses in text it shows",
                         hint="write the reason in plain text")
    where = f"registry {mask_url(registry.url)}"
    held = [parse_statement(e, owner=info.owner, name=info.name, version=info.version, tree_digest=info.tree_digest,
                            where=where) for e in registry.yank_statements(info.owner, info.name, info.version,
                                                                           info.tree_digest)]
    sequence = max((s.sequence for s in held), default=0) + 1
    payload = canonical_payload(action, info.owner, info.name, info.version, info.tree_digest, reason.strip(),
                                utc_now(), sequence)
    envelope = make_envelope(payload, key)
    registry.attach_yank_statement(info.owner, info.name, info.version, info.tree_digest, envelope)
    return parse_statement(envelope, owner=info.owner, name=info.name, version=info.version,
                           tree_digest=info.tree_digest, where=where)


def in_words(facts: YankFacts) -> str:
    """The statement that counts, in words: ``yanked (#2, verified, 2026-…)``, ``not yanked
    (unyanked #3, …)`` or ``not yanked``."""
    st = facts.current
    if st is None:
        return "not yanked"
    if st.action == YANK:
        return f"yanked (#{st.sequence}, {facts.current_standing}, {st.time})"
    return f"not yanked (unyanked #{st.sequence}, {facts.current_standing}, {st.time})"


def summary(facts: YankFacts) -> str:
    """One line for ``plugin show``: ``yanked (#2, verified, 2026-…): reason`` or ``not yanked``,
    plus the statements shown but not enforced."""
    text = in_words(facts)
    if facts.yanked and facts.current is not None:
        text += f": {facts.current.reason}"
    for other in facts.unenforced:
        text += f"; {NOT_ENFORCED} {other.action} #{other.sequence} ({other.reason or 'no reason'}): changes nothing"
    return text if facts.live else f"{text} ({facts.when()})"


def carried_statements(registry, owner: str, name: str, version: str, tree_digest: str, *, trust) -> list:
    """The statements to carry with the version (``plugin copy``, bundles): the registry's,
    or the ones this machine remembers when the registry cannot answer; checked by
    :func:`yank_facts` first, so a yank that went missing is never carried on as gone."""
    facts = yank_facts(registry, owner, name, version, tree_digest, trust=trust)
    if not facts.live:
        return list(_read_memory(memory_path(owner, name, version, tree_digest))["statements"])
    return list(registry.yank_statements(owner, name, version, tree_digest))
