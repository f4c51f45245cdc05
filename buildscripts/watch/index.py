"""A package index's Simple API (PEP 503 HTML, PEP 691 JSON), read over HTTP with explicit timeouts.

Only what the watch needs: a project's files (with yanked, requires-python and whether the index serves
the core metadata beside them, PEP 658/714), and one wheel's METADATA. Metadata comes from the `.metadata`
file where the index has one, else from the wheel itself by HTTP range requests (its zip directory and the
one member, a few hundred KB of a 900 MB torch wheel), else -- a server that ignores ranges -- from the
whole file when it is small. An index that cannot be reached, or does not answer within the timeout, is a
PackageIndexError naming the URL: the watch stops before it writes anything.
"""

from __future__ import annotations

import email.parser
import io
import json
import re
import ssl
import urllib.error
import urllib.request
import zipfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from email.message import Message
from html.parser import HTMLParser
from pathlib import Path
from typing import Protocol
from urllib.parse import urljoin, urlsplit

from ..errors import PackageIndexError

ACCEPT = "application/vnd.pypi.simple.v1+json, application/vnd.pypi.simple.v1+html;q=0.2, text/html;q=0.1"
TAIL_BYTES = 256 * 1024          # one range request usually covers the zip directory and METADATA
WHOLE_FILE_LIMIT = 64 * 2**20    # a server without range support: read small files whole, refuse the rest
HINT = ("check the host's pip index settings (PIP_INDEX_URL / PIP_EXTRA_INDEX_URL, pip.conf, UV_DEFAULT_INDEX / "
        "UV_INDEX) and the network, then run the watch again (`--timeout SECONDS` waits longer)")


@dataclass(frozen=True)
class DistFile:
    filename: str
    url: str
    yanked: str | None = None            # the reason ("" when none given); None when not yanked
    requires_python: str | None = None
    metadata_url: str | None = None      # PEP 658: the core metadata served beside the file


@dataclass(frozen=True)
class Project:
    name: str
    index: str                           # the index URL the files came from
    files: tuple[DistFile, ...]


@dataclass(frozen=True)
class Answer:
    body: bytes
    content_type: str
    content_range: str
    url: str                             # after redirects: relative links resolve against it


class Index(Protocol):
    """What the watch asks of an index (tests give a fake one)."""

    def project(self, name: str) -> Project | None: ...

    def metadata(self, file: DistFile) -> Message: ...


def normalize(name: str) -> str:
    """PEP 503 project name normalisation."""
    return re.sub(r"[-_.]+", "-", name).lower()


class SimpleIndex:
    """The indexes uv would ask, in its order: the first one that has a project answers for it."""

    def __init__(self, urls: Sequence[str], *, timeout_s: float, ca_bundle: Path | None = None,
                 merge: bool = False) -> None:
        self.urls = [u.rstrip("/") + "/" for u in urls]
        self.merge = merge  # uv's UV_INDEX_STRATEGY=unsafe-*: every index's files count, not the first's only
        self.timeout_s = timeout_s
        context = ssl.create_default_context(cafile=str(ca_bundle) if ca_bundle else None)
        self._opener = urllib.request.build_opener(urllib.request.HTTPSHandler(context=context))

    def project(self, name: str) -> Project | None:
        found: list[Project] = []
        for index in self.urls:
            page = urljoin(index, normalize(name) + "/")
            got = self._get(page, {"Accept": ACCEPT}, missing_ok=True)
            if got is not None:
                found.append(Project(name, index, tuple(parse_page(got.body, got.content_type, got.url))))
                if not self.merge:
                    break
        if not found:
            return None
        return Project(name, " + ".join(p.index for p in found), tuple(f for p in found for f in p.files))

    def metadata(self, file: DistFile) -> Message:
        if file.metadata_url:
            got = self._get(file.metadata_url, {}, missing_ok=True)
            if got is not None:
                return parse_metadata(got.body)
        if not file.filename.endswith(".whl"):
            msg = f"{file.filename} is not a wheel and its index serves no metadata for it"
            raise PackageIndexError(msg, hint="the watch reads metadata from wheels only")
        return parse_metadata(self._wheel_metadata(file))

    # ------------------------------------------------------------ HTTP

    def _get(self, url: str, headers: Mapping[str, str], *, missing_ok: bool = False,
             limit: int = WHOLE_FILE_LIMIT) -> Answer | None:
        request = urllib.request.Request(url, headers={"User-Agent": "sglang-images-watch", **headers})
        try:
            with self._opener.open(request, timeout=self.timeout_s) as answer:
                body = answer.read(limit + 1)
                if len(body) > limit:
                    msg = f"{url} answered with more than {limit // 2**20} MiB"
                    raise PackageIndexError(msg, hint="is this a package index? " + HINT)
                return Answer(body, answer.headers.get("Content-Type", ""), answer.headers.get("Content-Range", ""),
                              answer.geturl())
        except urllib.error.HTTPError as exc:
            if missing_ok and exc.code == 404:
                return None
            msg = f"the package index answered {exc.code} {exc.reason} for {url}"
            raise PackageIndexError(msg, hint=HINT) from None
        except TimeoutError:
            msg = f"the package index did not answer within {self.timeout_s:g} s: {url}"
            raise PackageIndexError(msg, hint=HINT) from None
        except urllib.error.URLError as exc:
            reason = exc.reason
            if isinstance(reason, TimeoutError):
                msg = f"the package index did not answer within {self.timeout_s:g} s: {url}"
            else:
                msg = f"the package index cannot be reached: {url}: {reason}"
            raise PackageIndexError(msg, hint=HINT) from None
        except OSError as exc:  # a connection reset mid-answer, a broken TLS stream
            msg = f"the package index failed while answering {url}: {exc}"
            raise PackageIndexError(msg, hint=HINT) from None

    def _wheel_metadata(self, file: DistFile) -> bytes:
        reader = _RangeReader(self, file.url)
        try:
            with zipfile.ZipFile(reader) as wheel:
                names = [n for n in wheel.namelist() if re.fullmatch(r"[^/]+\.dist-info/METADATA", n)]
                if len(names) != 1:
                    msg = f"{file.filename} has {len(names)} .dist-info/METADATA files, not one"
                    raise PackageIndexError(msg, hint="a broken wheel: report it to the package's authors")
                return wheel.read(names[0])
        except zipfile.BadZipFile as exc:
            msg = f"{file.url} is not a readable wheel: {exc}"
            raise PackageIndexError(msg, hint=HINT) from None


class _RangeReader(io.RawIOBase):
    """A seekable view of a remote file that fetches only the byte ranges zipfile reads."""

    def __init__(self, index: SimpleIndex, url: str) -> None:
        super().__init__()
        self.index, self.url, self.pos = index, url, 0
        got = index._get(url, {"Range": f"bytes=-{TAIL_BYTES}"})
        assert got is not None  # not missing_ok: a 404 raised
        # `bytes START-END/SIZE` on a 206; none when the whole file came back (small, or ranges ignored)
        match = re.fullmatch(r"bytes (\d+)-\d+/(\d+)", got.content_range.strip())
        start, self.size = (int(match[1]), int(match[2])) if match else (0, len(got.body))
        self.chunks: dict[int, bytes] = {start: got.body}

    def seekable(self) -> bool:
        return True

    def readable(self) -> bool:
        return True

    def tell(self) -> int:
        return self.pos

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self.pos, io.SEEK_END: self.size}[whence]
        self.pos = base + offset
        return self.pos

    def read(self, size: int = -1) -> bytes:
        end = self.size if size < 0 else min(self.size, self.pos + size)
        if end <= self.pos:
            return b""
        data = self._cached(self.pos, end)
        if data is None:
            got = self.index._get(self.url, {"Range": f"bytes={self.pos}-{end - 1}"})
            assert got is not None
            data = got.body[: end - self.pos]
            self.chunks[self.pos] = data
        self.pos += len(data)
        return data

    def _cached(self, start: int, end: int) -> bytes | None:
        for at, chunk in self.chunks.items():
            if at <= start and end <= at + len(chunk):
                return chunk[start - at:end - at]
        return None


# ---------------------------------------------------------------- parsing


def parse_page(body: bytes, content_type: str, url: str) -> list[DistFile]:
    """The files of a project page, JSON (PEP 691) or HTML (PEP 503), URLs made absolute."""
    text = body.decode("utf-8", "replace")
    if "json" in content_type:
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            msg = f"{url} is not valid JSON: {exc}"
            raise PackageIndexError(msg, hint=HINT) from None
        return [_json_file(entry, url) for entry in data.get("files", []) if isinstance(entry, dict)]
    parser = _Anchors()
    parser.feed(text)
    return [_html_file(attrs, name, url) for attrs, name in parser.anchors]


def _json_file(entry: dict[str, object], page: str) -> DistFile:
    yanked = entry.get("yanked", False)
    reason = None if yanked is False else (yanked if isinstance(yanked, str) else "")
    url = urljoin(page, str(entry.get("url", "")))
    served = entry.get("core-metadata", entry.get("dist-info-metadata", False))
    requires = entry.get("requires-python")
    return DistFile(str(entry.get("filename", "")), url, reason, requires if isinstance(requires, str) else None,
                    _strip(url) + ".metadata" if served else None)


def _html_file(attrs: dict[str, str | None], name: str, page: str) -> DistFile:
    url = urljoin(page, attrs.get("href") or "")
    yanked = (attrs["data-yanked"] or "") if "data-yanked" in attrs else None  # PEP 592: present means yanked
    served = "data-core-metadata" in attrs or "data-dist-info-metadata" in attrs
    filename = name.strip() or Path(urlsplit(url).path).name
    return DistFile(filename, url, yanked, attrs.get("data-requires-python"),
                    _strip(url) + ".metadata" if served else None)


def _strip(url: str) -> str:
    return url.split("#", 1)[0]


class _Anchors(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.anchors: list[tuple[dict[str, str | None], str]] = []
        self._open: dict[str, str | None] | None = None
        self._text: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "a":
            self._open, self._text = dict(attrs), []

    def handle_data(self, data: str) -> None:
        if self._open is not None:
            self._text.append(data)

    def handle_endtag(self, tag: str) -> None:
        if tag == "a" and self._open is not None:
            self.anchors.append((self._open, "".join(self._text)))
            self._open = None


def parse_metadata(data: bytes) -> Message:
    return email.parser.BytesHeaderParser().parsebytes(data)
