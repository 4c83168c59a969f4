"""``forge plugin sign REF (--from DIR | --lock FILE) [--digest sf1:…] [--key NAME|FILE] [--registry URL]``:
sign an already-published version, for the files the signer holds."""

from __future__ import annotations

from pathlib import Path

import click

from ..errors import UsageError
from .completion import complete_key_names
from .registry_options import registry_options


@click.command("sign")
@click.argument("ref")
@click.option("--from", "from_dir", type=click.Path(file_okay=False), metavar="DIR",
              help="Your copy of the plugin's files: the registry must serve the same tree digest.")
@click.option("--lock", "lock_file", type=click.Path(), metavar="FILE",
              help="A lock (file or experiment directory) that pins REF: the registry must serve its tree digest.")
@click.option("--digest", metavar="sf1:HEX", help="With --from or --lock: the tree digest you mean to sign; it must be theirs too.")
@click.option("--key", "key_file", metavar="NAME|FILE", shell_complete=complete_key_names,
              help="One of your keys by name (forge key list), or a path holding '/' (default: the key named after the owner, else 'default').")
@registry_options()
@click.option("--passphrase-file", type=click.Path(dir_okay=False), help="File holding the key's passphrase (else FORGE_KEY_PASSPHRASE).")
@click.option("--model-signature", "model_signature", type=click.Path(dir_okay=False), metavar="FILE",
              help="Also write an OpenSSF model-signing signature over the plugin's files to FILE (ECDSA keys only).")
def sign(ref, from_dir, lock_file, digest, key_file, registry, insecure, ca_file, passphrase_file, model_signature) -> None:
    """Add your signature to the published version REF.

    For a release key after CI published, or the right key after a signing mistake: the
    version stays as it is (same files, same version number) and serves one more signature.
    The registry is not trusted to say what you are signing: name the files with --from DIR
    (your copy of the plugin; its tree digest, as 'forge plugin digest DIR' prints it) or
    --lock FILE (a lock that pinned REF). The version is signed only when the registry
    serves exactly that tree digest, in an archive that holds those files; otherwise
    nothing is signed (exit 9, naming both digests). The statement signed names the tree
    digest, printed on success, and the archive the registry serves. Signing again with a
    key that already signed it adds nothing. As with publish --sign, a key the trust file
    does not list for the owner is refused when it lists others.

    With --model-signature FILE (an ECDSA P-256 key), FILE also receives a signature over
    the plugin's unpacked files that 'model_signing verify key DIR --public_key KEY.pem
    --signature FILE' accepts for a directory DIR written by 'forge plugin pull REF -o DIR'.

    \b
    Example:
      forge plugin sign alice/opsd-patch@1.2.0 --from opsd-patch --key release
      forge plugin sign alice/opsd-patch@1.2.0 --lock plugins.lock.json --key ./ci.key
      forge plugin sign alice/opsd-patch@1.2.0 --from opsd-patch --key ecdsa --model-signature opsd-patch.sig
    """
    from ..registry.base import parse_ref
    from ..registry.factory import open_registry
    from ..registry.publish import sign_published, with_default_owner
    from .plugin_publish import report_signature, signing_key

    ref = with_default_owner(ref)
    parsed = parse_ref(ref)
    if parsed.specifier is None or not parsed.specifier.startswith("==") or "*" in parsed.specifier:
        raise UsageError(f"'{ref}' names no exact version; a signature is for one version",
                         hint=f"forge plugin sign {parsed.owner}/{parsed.name}@VERSION --from DIR")
    version = parsed.specifier[2:]
    held, source = held_digest(f"{parsed.owner}/{parsed.name}@{version}", parsed.owner, parsed.name, version,
                               from_dir, lock_file, digest)
    sign_key, passphrase, listed = signing_key(parsed.owner, key_file, passphrase_file)
    reg = open_registry(registry, insecure=insecure, ca_file=ca_file)
    info = reg.get(parsed.owner, parsed.name, version)
    private = None
    if model_signature is not None:
        from ..signatures.signing import load_private_key

        private = load_private_key(sign_key, passphrase)
        from cryptography.hazmat.primitives.asymmetric import ec

        if not isinstance(private, ec.EllipticCurvePrivateKey):
            raise UsageError(f"{sign_key} is an Ed25519 key; OpenSSF model-signing accepts only ECDSA keys",
                             hint="make one with 'forge key generate --name NAME --type ecdsa-p256' and pass it with --key")
    attached, kept = sign_published(reg, info, sign_key, passphrase, held=held, source=source)
    report_signature(info, attached, kept, sign_key, passphrase, listed, signed_tree=held)
    if private is not None:
        from ..registry.store import PluginStore
        from ..signatures.model_signature import write_signature

        tree = PluginStore(reg).tree_of(info)  # the files behind the tree digest, never the record's list
        write_signature(model_signature, private, info.name, tree.files)
        click.echo(f"model-signing signature: {model_signature} (over {len(tree.files)} files of {info.ref})")


def held_digest(ref: str, owner: str, name: str, version: str, from_dir: str | None, lock_file: str | None,
                digest: str | None) -> tuple[str, str]:
    """``(tree digest, where it came from)``: what the signer holds of *ref* without the
    registry — the files of *from_dir*, the entry *lock_file* pins — each of them (and
    *digest*, when given) the same. Never the registry's word: a digest it serves would be
    signed on first use."""
    from ..cluster.digest import is_digest

    if from_dir is None and lock_file is None:
        raise UsageError(
            f"signing {ref} needs the files you vouch for: --from DIR or --lock FILE"
            + (" (--digest only confirms one of them)" if digest is not None else ""),
            hint=f"forge plugin sign {ref} --from DIR (your copy of the plugin), or --lock plugins.lock.json "
                 "(a lock that pinned it); the registry is not trusted to say what you sign")
    if digest is not None and not is_digest(digest):
        raise UsageError(f"--digest {digest!r} is not a tree digest (sf1:<64 hex>)",
                         hint="'forge plugin digest DIR' prints the tree digest of your copy")
    held: list = []
    if from_dir is not None:
        held.append((_directory_digest(from_dir), from_dir))
    if lock_file is not None:
        held.append(_locked_digest(ref, owner, name, version, lock_file))
    if digest is not None:
        held.append((digest, "--digest"))
    first, where = held[0]
    for other, other_where in held[1:]:
        if other != first:
            raise UsageError(f"{where} holds {first}, but {other_where} names {other}: which files do you mean to sign?",
                             hint="give the lock or directory that holds the files you published")
    return first, where


def _directory_digest(from_dir: str) -> str:
    from ..authoring.files import plugin_files
    from ..cluster.digest import digest_of_map, file_map

    if not Path(from_dir).is_dir():
        raise UsageError(f"--from {from_dir}: no such directory", hint="pass your copy of the plugin's files")
    return digest_of_map(file_map(from_dir, plugin_files(from_dir)))


def _locked_digest(ref: str, owner: str, name: str, version: str, lock_file: str) -> tuple[str, str]:
    from ..cluster.dsse import same_version
    from ..experiment.lockfile import FILENAME, read_lock

    path = Path(lock_file)
    path = path / FILENAME if path.is_dir() else path
    lock = read_lock(path)
    if lock is None:
        raise UsageError(f"--lock {lock_file}: no lock file at {path}", hint="pass plugins.lock.json, or the experiment directory")
    entry = next((e for e in lock.plugins if (e.owner, e.name) == (owner, name)), None)
    if entry is None or not same_version(entry.version, version):
        pinned = f"it pins {entry.ref}" if entry is not None else f"it pins no version of {owner}/{name}"
        raise UsageError(f"--lock {path} does not pin {ref}: {pinned}",
                         hint="pass a lock that pins the version you sign, or --from DIR with your copy of its files")
    return entry.tree_digest, f"lock {path}"
