"""What a revived process's history record says of why it had stopped: the last error line of
its log (controller._last_error), read from the log's tail only."""

from __future__ import annotations

from pathlib import Path

from localcluster import controller


def test_the_last_error_or_exit_code_line_of_the_log_is_given(tmp_path: Path) -> None:
    log = tmp_path / "bk.log"
    log.write_text(
        "INFO - started\n"
        "ERROR - Couldn't register bookie with zookeeper, shutting down\n"
        "INFO - Triggering shutdown of Bookie-3185 with exitCode 4\n"
        "INFO - Journal exited loop!\n"
    )
    assert controller._last_error(str(log)).endswith("with exitCode 4")


def test_a_log_without_an_error_and_a_missing_log_say_so(tmp_path: Path) -> None:
    log = tmp_path / "quiet.log"
    log.write_text("INFO - fine\n" * 10)
    assert controller._last_error(str(log)) == "no error logged"
    assert controller._last_error(str(tmp_path / "absent.log")) == "no error logged"


def test_only_the_logs_tail_is_read(tmp_path: Path) -> None:
    log = tmp_path / "long.log"
    old_error = "ERROR - long ago\n"
    log.write_text(old_error + "INFO - filler line\n" * 10_000)
    assert controller._last_error(str(log)) == "no error logged"
