"""Where a client's token comes from (core/security/credentials.py): a token kept in a file is
read again when the file changes, so a renewed token is sent without a restart."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from core.errors import ConfigError
from core.security.credentials import TOKEN_ENV, TOKEN_FILE_ENV, TokenSource

pytestmark = pytest.mark.unit


def test_a_given_token_is_sent_as_is_and_none_sends_no_header() -> None:
    assert TokenSource("abc").headers() == {"Authorization": "Bearer abc"}
    assert TokenSource().headers() == {}


def test_a_token_renewed_in_its_file_is_sent_from_the_next_request_on(tmp_path: Path) -> None:
    path = tmp_path / "token"
    path.write_text("first\n")
    source = TokenSource(path=path).loaded()
    assert source.token() == "first"
    renewed = tmp_path / "token.new"
    renewed.write_text("second\n")
    renewed.replace(path)  # renamed over the old one, as a rotation does
    assert source.token() == "second"
    path.write_text("third-and-longer")  # rewritten in place
    assert source.token() == "third-and-longer"


def test_a_file_unreadable_while_it_changes_leaves_the_last_token(tmp_path: Path) -> None:
    path = tmp_path / "token"
    path.write_text("kept")
    source = TokenSource(path=path).loaded()
    path.write_text("")  # truncated by a writer not done yet
    assert source.token() == "kept"
    path.unlink()
    assert source.token() == "kept"
    path.write_text("back")
    assert source.token() == "back"


def test_a_file_never_read_is_a_config_error_naming_it(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"token file .*missing: No such file"):
        TokenSource(path=tmp_path / "missing").loaded()
    (tmp_path / "empty").write_text("  \n")
    with pytest.raises(ConfigError, match="expected one token"):
        TokenSource(path=tmp_path / "empty").loaded()


def test_the_environment_names_the_token_or_its_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(TOKEN_ENV, "from-env")
    assert TokenSource.default().token() == "from-env"
    monkeypatch.delenv(TOKEN_ENV)
    path = tmp_path / "t"
    path.write_text("from-file")
    monkeypatch.setenv(TOKEN_FILE_ENV, str(path))
    source = TokenSource.default()
    path.write_text("renewed")
    os.utime(path, ns=(1, 1))  # a change the size alone would not show
    assert source.token() == "renewed"
