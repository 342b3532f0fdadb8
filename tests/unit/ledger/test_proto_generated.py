"""The committed generated code is what ledger/codecs/proto/bookkeeper.proto generates now
(`make proto` after changing the schema), with the pinned protoc and mypy-protobuf."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

PROTO_DIR = Path(__file__).resolve().parents[3] / "ledger" / "codecs" / "proto"
GENERATED = ("bookkeeper_pb2.py", "bookkeeper_pb2.pyi")


def test_the_generated_code_is_current(tmp_path: Path) -> None:
    env = dict(os.environ, PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}")
    subprocess.run(
        [sys.executable, "-m", "grpc_tools.protoc", f"-I{PROTO_DIR}", f"--python_out={tmp_path}",
         f"--mypy_out={tmp_path}", str(PROTO_DIR / "bookkeeper.proto")],
        check=True, env=env, capture_output=True, timeout=60,
    )  # fmt: skip
    for name in GENERATED:
        current = (tmp_path / name).read_text()
        assert (PROTO_DIR / name).read_text() == current, f"{name} is stale: run `make proto`"


def test_the_codec_runs_on_upb() -> None:
    from google.protobuf.internal import api_implementation

    import ledger.codecs.message_codec  # noqa: F401  (loads the generated module)

    assert api_implementation.Type() == "upb"
