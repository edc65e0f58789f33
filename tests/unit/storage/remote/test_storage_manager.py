"""The store's options (rsm.config.*, strings) as its fsspec file system takes them: an unknown
option is refused (fsspec would take it and ignore it), flags and numbers are converted (a
string "false" would be true), dicts parsed as JSON; errors never show a value."""

import pytest

from storage.remote.storage_manager import FsspecRemoteStorageManager, RemoteStorageError, fs_options


def test_s3_options_are_converted_to_their_parameters_types():
    options = fs_options("s3://bucket/prefix", {
        "endpoint_url": "http://127.0.0.1:9000", "key": "k", "secret": "s", "anon": "False", "use_ssl": "false",
        "client_kwargs": '{"region_name": "eu-west-1"}', "max_paths": "3", "profile": "tier",
    })
    assert options == {
        "endpoint_url": "http://127.0.0.1:9000", "key": "k", "secret": "s", "anon": False, "use_ssl": False,
        "client_kwargs": {"region_name": "eu-west-1"}, "max_paths": 3, "profile": "tier",
    }


@pytest.mark.parametrize("url, options, message", [
    ("s3://bucket", {"secrett": "hunter2"}, "unknown option secrett"),
    ("file:///tmp/store", {"key": "hunter2"}, "unknown option key"),
    ("s3://bucket", {"anon": "hunter2"}, "anon must be true or false"),
    ("s3://bucket", {"max_paths": "hunter2"}, "max_paths must be an integer"),
    ("s3://bucket", {"client_kwargs": "hunter2"}, "client_kwargs must be a JSON object"),
])
def test_options_the_store_would_ignore_or_misread_are_refused_without_their_value(url, options, message):
    with pytest.raises(ValueError, match=message) as refused:
        fs_options(url, options)
    assert "hunter2" not in str(refused.value)
    with pytest.raises(RemoteStorageError, match=message):
        FsspecRemoteStorageManager(url, options)


def test_a_directory_store_takes_its_own_options(tmp_path):
    store = FsspecRemoteStorageManager(f"file://{tmp_path}", {"auto_mkdir": "true"})
    assert store.fs.auto_mkdir is True
