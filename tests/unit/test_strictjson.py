"""The one strict reader of image documents: what Go's readers and Python could read as different documents."""

from __future__ import annotations

import pytest

from buildscripts import strictjson


@pytest.mark.parametrize(("text", "said"), [
    ('{"manifests":[],"Manifests":[{}]}', "differ only in case"),     # Go takes the last, Python keeps both
    ('{"manifests":[],"manifests":[{}]}', "appears twice"),
    ('{"MANIFESTS":[{}]}', "from the field 'manifests'"),             # Go fills `manifests` from it
    ('{"manifests":[{"Platform":{"os":"linux"}}]}', "from the field 'platform'"),
    ('{"manifests":[{"platform":{"OS":"linux"}}]}', "from the field 'os'"),
    ('{"config":{"Digest":"sha256:0"}}', "from the field 'digest'"),
    ('{"layers":[],"Layers":[]}', "differ only in case"),
    ('{"mediaType":"a","MediaType":"b"}', "differ only in case"),
    ('{"\\u017fize":1}', "from the field 'size'"),                     # ſ folds to s in Go too
    ('{"size":NaN}', "not JSON"),
])
def test_a_document_readers_could_read_otherwise_is_refused(text: str, said: str) -> None:
    with pytest.raises(strictjson.Ambiguous, match=said):
        strictjson.loads(text)


def test_utf16_is_refused() -> None:
    with pytest.raises(strictjson.Ambiguous, match="strict UTF-8"):
        strictjson.loads('{"a": 1}'.encode("utf-16"))


def test_plain_documents_and_peoples_own_keys_are_read() -> None:
    index = strictjson.loads_object(b'{"schemaVersion":2,"manifests":[{"digest":"d","platform":{"os":"linux",'
                                    b'"architecture":"amd64","os.version":"1"},"annotations":{"OS":"x","Size":"1"}}]}')
    assert index["manifests"][0]["annotations"] == {"OS": "x", "Size": "1"}
    config = strictjson.loads_object(b'{"os":"linux","config":{"Labels":{"Architecture":"x"},"Env":["A=1"]}}')
    assert config["config"]["Labels"] == {"Architecture": "x"}


def test_only_an_object_is_a_document() -> None:
    with pytest.raises(strictjson.Ambiguous, match="not a JSON object"):
        strictjson.loads_object(b"[1]")
