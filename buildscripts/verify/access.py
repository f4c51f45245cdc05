"""What host mode's identity (a uid and gid of its own, no supplementary groups: verify/identity.py) may do with
a file or folder, read by the verifier from the file itself: its owner, group and mode bits and, when it has
one, its POSIX access ACL (a folder of someone else's can grant one uid write by name). Nothing here asks the
identity or the code under test.
"""

from __future__ import annotations

import os
import stat
import struct
from dataclasses import dataclass

ACL_XATTR = "system.posix_acl_access"
# linux/posix_acl_xattr.h: a 4-byte version header, then entries of (tag u16, perm u16, id u32), little-endian.
ACL_VERSION = 2
USER_OBJ, USER, GROUP_OBJ, GROUP, MASK, OTHER = 0x01, 0x02, 0x04, 0x08, 0x10, 0x20
READ, WRITE, SEARCH = 4, 2, 1


@dataclass(frozen=True)
class Who:
    """The identity: one uid, one gid, no other group."""

    uid: int
    gid: int

    def owns(self, st: os.stat_result) -> bool:
        """Whether the entry is the identity's: its owner or its group (a set-gid file of its gid counts)."""
        return st.st_uid == self.uid or st.st_gid == self.gid

    def may(self, st: os.stat_result, want: int, acl: bytes | None = None) -> bool:
        """Whether the identity has every bit of `want` (READ, WRITE, SEARCH) on the entry `st` (with `acl`, the
        raw ACL_XATTR value when it has one): the owner's bits if it is the owner, else the group's, else the
        others' (POSIX checks them in this order and stops at the first class that matches)."""
        if acl:
            granted = _from_acl(acl, st, self)
            if granted is not None:
                return granted & want == want
        mode = stat.S_IMODE(st.st_mode)
        if st.st_uid == self.uid:
            bits = mode >> 6
        elif st.st_gid == self.gid:
            bits = mode >> 3
        else:
            bits = mode
        return bits & want == want


def acl_of(fd: int) -> bytes | None:
    """The access ACL of the open file `fd`, or None (none set, or a file system without ACLs)."""
    try:
        return os.getxattr(fd, ACL_XATTR)
    except OSError:
        return None


def _from_acl(raw: bytes, st: os.stat_result, who: Who) -> int | None:
    """The identity's permission bits under the ACL `raw`, or None when it cannot be read (the mode then rules)."""
    if len(raw) < 4 or (len(raw) - 4) % 8 or struct.unpack_from("<I", raw)[0] != ACL_VERSION:
        return None
    entries = [struct.unpack_from("<HHI", raw, 4 + 8 * i) for i in range((len(raw) - 4) // 8)]
    by_tag: dict[int, list[tuple[int, int]]] = {}
    for tag, perm, ident in entries:
        by_tag.setdefault(tag, []).append((perm, ident))
    mask = by_tag[MASK][0][0] if MASK in by_tag else 7
    if st.st_uid == who.uid:
        return next((perm for perm, _ in by_tag.get(USER_OBJ, [])), None)
    named = [perm for perm, ident in by_tag.get(USER, []) if ident == who.uid]
    if named:
        return named[0] & mask
    groups = [perm for perm, _ in by_tag.get(GROUP_OBJ, []) if st.st_gid == who.gid]
    groups += [perm for perm, ident in by_tag.get(GROUP, []) if ident == who.gid]
    if groups:   # POSIX: any matching group entry that grants it, masked
        best = 0
        for perm in groups:
            best |= perm
        return best & mask
    return next((perm for perm, _ in by_tag.get(OTHER, [])), None)
