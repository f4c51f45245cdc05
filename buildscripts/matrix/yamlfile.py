"""Reading a YAML file a user wrote, defensively: every bad input becomes a ConfigError naming the file and,
where there is one, the line -- never a traceback, never a hang.

The guards, in the order they run, each for an input that once crashed or hung the loader:
- a regular file only (a FIFO or a device given as `--matrix` would block `read()` forever);
- at most MAX_BYTES (a 10 MB file with a million-item list took minutes);
- UTF-8 text (a UTF-16 or latin-1 file gave a UnicodeDecodeError) without control characters
  (PyYAML's reader raises a non-marked error for NUL, BEL or C1 characters);
- at most MAX_DEPTH levels of nesting and MAX_NODES values, counted on libyaml's event stream, which
  is iterative (composing 10,000 nested `[` recurses past Python's limit);
- no duplicate mapping keys (YAML keeps the last one silently; here it is an error with both lines);
- integers of at most MAX_INT_DIGITS digits (int() refuses 4,301 digits with a bare ValueError), and no
  alias that expands to more than MAX_NODES values (a few KB of nested aliases expand to billions).
The text is parsed with libyaml's C loader when PyYAML has it (the pure-Python one is ~10x slower).
"""

from __future__ import annotations

import re
import stat
from pathlib import Path
from typing import Any

import yaml
from yaml.constructor import ConstructorError, SafeConstructor

from ..errors import ConfigError

MAX_BYTES = 1024 * 1024
MAX_DEPTH = 32
MAX_NODES = 50_000
MAX_INT_DIGITS = 64
# C0 controls except tab, newline and carriage return; DEL; C1 controls; lone surrogates; non-characters.
CONTROL = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\ud800-\udfff\ufffe\uffff]")
Loader: type[Any] = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def read_text(path: Path, what: str) -> str:
    """The UTF-8 text of the regular file `path` (`what` names it in messages: "matrix file")."""
    hint = "pass --matrix PATH or run from the project root"
    try:
        info = path.stat()
    except OSError as exc:
        msg = f"cannot read the {what} {path}: {exc.strerror}"
        raise ConfigError(msg, hint=hint) from None
    except ValueError:  # a NUL or a lone surrogate in the name
        msg = f"the {what} {str(path)!r} cannot be a file name"
        raise ConfigError(msg, hint=hint) from None
    if not stat.S_ISREG(info.st_mode):
        kind = "a directory" if stat.S_ISDIR(info.st_mode) else "not a regular file (a pipe, socket or device?)"
        msg = f"the {what} {path} is {kind}"
        raise ConfigError(msg, hint=f"{hint}; it must name a YAML file")
    try:
        with path.open("rb") as handle:
            data = handle.read(MAX_BYTES + 1)
    except OSError as exc:
        msg = f"cannot read the {what} {path}: {exc.strerror}"
        raise ConfigError(msg, hint=hint) from None
    if len(data) > MAX_BYTES:
        msg = f"the {what} {path} is larger than {MAX_BYTES // 1024} KiB"
        raise ConfigError(msg, hint="is it the right file? matrix files are a few KiB")
    return decode(data, path)


def decode(data: bytes, path: Path) -> str:
    """UTF-8 (a BOM is allowed), or an error that names the encoding it looks like and the line."""
    if data.startswith((b"\xff\xfe", b"\xfe\xff")) or (len(data) > 1 and b"\x00" in data[:2]):
        msg = f"{path}: the file is UTF-16 (or another multi-byte encoding), not UTF-8"
        raise ConfigError(msg, hint="save it as UTF-8 (e.g. `iconv -f UTF-16 -t UTF-8`)")
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        msg = f"{path}:{line}: byte 0x{data[exc.start]:02x} is not UTF-8 ({exc.reason})"
        raise ConfigError(msg, hint="save the file as UTF-8") from None


def parse(text: str, path: Path) -> tuple[Any, yaml.Node | None]:
    """The data of YAML `text` and its node tree (for line numbers), after every guard above."""
    bad = CONTROL.search(text)
    if bad:
        line = text.count("\n", 0, bad.start()) + 1
        column = bad.start() - (text.rfind("\n", 0, bad.start()) + 1) + 1
        msg = f"{path}:{line}:{column}: control character {bad.group()!r} in the text"
        raise ConfigError(msg, hint="remove it; write escapes such as \\t inside double quotes if you need them")
    try:
        _check_shape(text, path)
        root = yaml.compose(text, Loader=Loader)
        if root is not None and _expanded_size(root, {}) > MAX_NODES:
            mark = root.start_mark
            raise ConstructorError(None, None, f"the document expands to more than {MAX_NODES} values "
                                   "(aliases of aliases?)", mark)
        data = _Constructor().construct_document(root) if root is not None else None
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        where = f"{path}:{mark.line + 1}:{mark.column + 1}" if mark else str(path)
        context = f"{exc.context}: " if exc.context and exc.problem else ""
        msg = f"{where}: malformed YAML: {context}{exc.problem or exc.context}"
        raise ConfigError(msg, hint="fix the YAML at that line") from None
    except yaml.YAMLError as exc:  # the reader's errors carry a position but are not "marked"
        msg = f"{path}: malformed YAML: {exc}"
        raise ConfigError(msg, hint="fix the YAML syntax") from None
    return data, root


def _check_shape(text: str, path: Path) -> None:
    """Depth and size limits, on libyaml's event stream (iterative: deep nesting cannot recurse here)."""
    depth = nodes = 0
    for event in yaml.parse(text, Loader=Loader):
        if isinstance(event, yaml.NodeEvent):
            nodes += 1
        if isinstance(event, yaml.CollectionStartEvent):
            depth += 1
            if depth > MAX_DEPTH:
                mark = event.start_mark
                where = f"{path}:{mark.line + 1}:{mark.column + 1}" if mark else str(path)
                msg = f"{where}: nested deeper than {MAX_DEPTH} levels"
                raise ConfigError(msg, hint="matrix files nest a few levels; is this the right file?")
        elif isinstance(event, yaml.CollectionEndEvent):
            depth -= 1
        if nodes > MAX_NODES:
            msg = f"{path}: more than {MAX_NODES} values in the file"
            raise ConfigError(msg, hint="matrix files hold a few hundred values; is this the right file?")


def _expanded_size(node: yaml.Node, memo: dict[int, int]) -> int:
    """Values the node stands for once aliases are expanded (memoised: aliases share node objects)."""
    if id(node) not in memo:
        memo[id(node)] = 1  # a recursive alias counts once instead of looping
        children: list[yaml.Node] = []
        if isinstance(node, yaml.SequenceNode):
            children = list(node.value)
        elif isinstance(node, yaml.MappingNode):
            children = [part for pair in node.value for part in pair]
        memo[id(node)] = 1 + sum(_expanded_size(child, memo) for child in children)
    return memo[id(node)]


class _Constructor(SafeConstructor):
    """SafeConstructor that refuses duplicate keys and huge integers, and gives every bad value a line."""

    def construct_object(self, node: yaml.Node, deep: bool = False) -> Any:
        try:
            return super().construct_object(node, deep)
        except (ValueError, OverflowError, TypeError) as exc:  # e.g. a timestamp 2026-13-45
            shown = repr(node.value)[:80] if isinstance(node, yaml.ScalarNode) else node.tag
            raise ConstructorError(None, None, f"cannot read {shown}: {exc}", node.start_mark) from None

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: dict[Any, int] = {}
        for key_node, _ in node.value:
            if not isinstance(key_node, yaml.ScalarNode) or key_node.tag == "tag:yaml.org,2002:merge":
                continue
            key = self.construct_object(key_node)
            if key in seen:
                first = seen[key]
                raise ConstructorError(None, None, f"duplicate key {key!r} (first at line {first}); YAML would "
                                       "keep only the last one", key_node.start_mark)
            seen[key] = key_node.start_mark.line + 1
        return super().construct_mapping(node, deep)

    def construct_yaml_int(self, node: yaml.ScalarNode) -> int:
        if len(str(node.value)) > MAX_INT_DIGITS:
            raise ConstructorError(None, None, f"integer of {len(node.value)} characters (at most "
                                   f"{MAX_INT_DIGITS})", node.start_mark)
        return super().construct_yaml_int(node)


_Constructor.add_constructor("tag:yaml.org,2002:int", _Constructor.construct_yaml_int)  # type: ignore[type-var]
